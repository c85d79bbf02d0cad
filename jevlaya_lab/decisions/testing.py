"""Tiny but real decision checkpoints for tests, examples and benchmarks.

:func:`make_tiny_parts` builds a seeded :class:`DecisionModel` (a BERT encoder from a config, no
download) with a fast WordPiece tokenizer that has ``[MASK]``; :func:`make_tiny_checkpoint`
writes the same thing as a checkpoint directory in well under a second. The weights are random,
so answers are arbitrary but deterministic for a seed: good for testing plumbing, not quality.
:func:`pooled_text` and :func:`trained_share` compute what the similarity prior reads the plain way,
so tests can check its answers against an independent computation.
"""

from __future__ import annotations

import os
import random
import string
from pathlib import Path
from typing import Any

from jevlaya_lab.decisions.checkpoint import Checkpoint, CheckpointConfig, save_checkpoint

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_WORDS = """
a an and are as at be but by can do does for from has have he her his how i if in is it its
me my no not of on or our she so that the their them then there they this to up was we were
what when where which who why will with would you your yes true false question choice score
noul level hold holds statement user assistant role content message reply answer help please
thanks thank order refund invoice bill billing account password login error bug crash slow
price cost plan upgrade cancel delivery ship shipping late package email phone call urgent
high low medium normal spam safe unsafe toxic polite rude happy sad angry neutral positive
negative support sales technical english spanish french german language team route ticket
hello hi word words turn pick last first new old today now time day state
""".split()


def tiny_vocab() -> list[str]:
    """Specials, printable ASCII characters, their ``##`` continuations and a few common words."""
    chars = [c for c in string.printable if not c.isspace()]
    words = [w for w in dict.fromkeys(_WORDS) if w not in chars]
    return [*SPECIAL_TOKENS, *chars, *(f"##{c}" for c in chars), *words]


def make_tiny_tokenizer() -> Any:
    """A transformers fast tokenizer (uncased WordPiece, BERT pre-tokenisation, ``[MASK]``)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(tiny_vocab())}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )


def make_tiny_parts(*, seed: int = 0, hidden_size: int = 32, num_layers: int = 1,
                    num_heads: int = 2, head_layers: int = 1, act_costs: tuple[float, ...] = (1.0,),
                    max_len: int = 128, head_max_len: int = 64,
                    temperature: tuple[float, float, float] = (1.0, 1.0, 1.0),
                    temperature_by_options: dict[str, float] | None = None,
                    similarity_prior: dict[str, Any] | None = None) -> Checkpoint:
    """Build ``(model, tokenizer, config)`` in memory with seeded random weights.

    ``similarity_prior`` (e.g. ``{"rank": 4}``) declares a :mod:`~jevlaya_lab.decisions.prior`."""
    import torch
    from transformers import BertConfig, BertModel

    from jevlaya_lab.decisions.model import DecisionModel

    tokenizer = make_tiny_tokenizer()
    encoder_config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, intermediate_size=2 * hidden_size,
        max_position_embeddings=max(max_len, 16), pad_token_id=tokenizer.pad_token_id,
    )
    config = CheckpointConfig(
        encoder="tiny-bert (random, jevlaya_lab.decisions.testing)", head_layers=head_layers,
        act_costs=list(act_costs), max_len=max_len, head_max_len=head_max_len,
        temperature=list(temperature), temperature_by_options=dict(temperature_by_options or {}),
    )
    prior = None
    if similarity_prior is not None:
        from jevlaya_lab.decisions.prior import PRIOR_KEY, PriorConfig

        prior = PriorConfig.from_value(similarity_prior)
        config.extra[PRIOR_KEY] = prior.to_value()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecisionModel(BertModel(encoder_config, add_pooling_layer=False),
                              head_layers=head_layers, n_act=config.n_act, prior=prior)
        # Larger scorer weights than the default init, so option probabilities are not ~uniform.
        scorer: Any = model.scorer[-1]
        torch.nn.init.normal_(scorer.weight, std=1.0)
    model.eval()
    return Checkpoint(model, tokenizer, config)


def make_tiny_checkpoint(directory: str | os.PathLike[str], *, seed: int = 0, hidden_size: int = 32,
                         **options: Any) -> Path:
    """Write a tiny, valid checkpoint directory and return its path (see :func:`make_tiny_parts`)."""
    model, tokenizer, config = make_tiny_parts(seed=seed, hidden_size=hidden_size, **options)
    return save_checkpoint(directory, model, tokenizer, config)


def pooled_text(encoder: Any, tokenizer: Any, text: str) -> Any:
    """The unit mean of ``encoder``'s output over ``[CLS] text [SEP]`` (as sentence-transformers pools),
    computed directly with the transformers tokenizer, without the Agent's row building."""
    import torch

    ids = [tokenizer.cls_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.sep_token_id]
    with torch.no_grad():
        hidden = encoder(input_ids=torch.tensor([ids])).last_hidden_state
    return torch.nn.functional.normalize(hidden.mean(dim=1)[0], dim=-1)


def trained_share(prior: Any, vector: Any) -> float:
    """The trained part's share of a yes/no statement's answer: the statement vector's gate over the
    gate of a training text itself (cosine 1, ``sigmoid(sharpness * (1 - threshold))``), at most 1."""
    import math

    threshold, sharpness = prior.config.gate
    return min(1.0, float(prior.gate(vector[None])[0]) * (1.0 + math.exp(-sharpness * (1.0 - threshold))))


REFERENCE_TEXTS = ("where is my parcel", "thanks for the help", "invoice wrong")
"""The reference states of :func:`fixed_prior_parts`."""


def fixed_prior_parts(similarity_prior: dict[str, Any], *, anchors: tuple[str, ...], unseen: tuple[str, ...],
                      num_layers: int = 1) -> Any:
    """Tiny parts whose answers a test can compute by hand: a zero Laya scorer, prior scales
    (7, 5, 9) and biases (0, 0, -3) per type, :data:`REFERENCE_TEXTS` as the reference states and
    ``anchors`` as the training texts; the gate is put halfway between the ``unseen`` texts and the
    anchors (a random tiny encoder finds every text alike, so the default gate would read all as seen),
    and with no ``unseen`` text it stays as ``similarity_prior`` says."""
    import dataclasses

    import torch

    from jevlaya_lab.decisions.prior import PRIOR_KEY

    parts = make_tiny_parts(num_layers=num_layers, similarity_prior=similarity_prior)
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    with torch.no_grad():
        model.scorer[-1].weight.zero_()
        model.scorer[-1].bias.zero_()
        model.prior.scale.copy_(torch.tensor([7.0, 5.0, 9.0]))
        model.prior.bias.copy_(torch.tensor([0.0, 0.0, -3.0]))
        model.prior.reference.copy_(torch.stack([pooled_text(encoder, tokenizer, t) for t in REFERENCE_TEXTS]))
        model.prior.anchors.copy_(torch.stack([pooled_text(encoder, tokenizer, t) for t in anchors]))
        if not unseen:
            return parts
        near = max(float((model.prior.anchors @ pooled_text(encoder, tokenizer, t)).max()) for t in unseen)
    config = dataclasses.replace(model.prior.config, gate=((1 + near) / 2, 20 / (1 - near)))
    model.prior.config = config
    parts.config.extra[PRIOR_KEY] = config.to_value()
    return parts


OPEN_ANCHORS = ("The customer asks for money back.", "refund")
"""The training texts of :func:`tiny_open_parts`' own head: a question in these words is its own."""


def tiny_open_parts(*, unseen: tuple[str, ...] = ("The writer attaches a photograph.", "happy", "angry",
                                                   "calm")) -> Any:
    """Tiny parts with an open part (:mod:`~jevlaya_lab.decisions.open_questions`): the own head of
    :func:`fixed_prior_parts` with :data:`OPEN_ANCHORS` as its training texts and the gate put between
    them and ``unseen``, and as the open part another seeded head over another encoder, with
    temperatures of its own (0.7, 1.0, 1.3). ``tiny_open_parts().model.open_model`` is that part."""
    own = fixed_prior_parts({"rank": 0, "reference": 3, "anchors": 2, "fallback": [1.5, 0.25, 0.0]},
                            anchors=OPEN_ANCHORS, unseen=unseen)
    return with_open_part(own, tiny_open_part())


def with_open_part(own: Any, part: Checkpoint) -> Any:
    """``own``'s parts with ``part`` as their open part (:mod:`~jevlaya_lab.decisions.open_questions`);
    ``part``'s encoder has ``own``'s shape, as an open part's must."""
    from jevlaya_lab.decisions.open_questions import OPEN_KEY

    own.model.open_model = part.model
    own.config.extra[OPEN_KEY] = part.config.to_dict()
    return own


def tiny_open_part(num_layers: int = 1) -> Checkpoint:
    """The open part of :func:`tiny_open_parts` alone, as a checkpoint of its own (``num_layers``:
    its encoder's, which must be its own head's)."""
    return make_tiny_parts(num_layers=num_layers, seed=7, similarity_prior={"rank": 0, "reference": 0, "anchors": 0},
                           temperature=(0.7, 1.0, 1.3))


def topic_pairs(rng: random.Random, n: int, topics: dict[str, list[str]]) -> list[tuple[str, str, bool]]:
    """``n`` ``(statement, text, truth)`` pairs for training a tiny reader: ``topics`` maps each
    statement to its topic words; a text is two fillers and one topic word, the statement's own for
    half the pairs (true) and another statement's otherwise (false)."""
    out = []
    for _ in range(n):
        statement, truth = rng.choice(list(topics)), rng.random() < 0.5
        other = [w for s, ws in topics.items() if s != statement for w in ws]
        words = [*rng.sample(["hi", "please", "order", "thanks"], 2), rng.choice(topics[statement] if truth else other)]
        rng.shuffle(words)
        out.append((statement, " ".join(words), truth))
    return out
