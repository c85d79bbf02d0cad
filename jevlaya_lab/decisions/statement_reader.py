"""The statement reader: a yes/no statement (or a choice option) and the state read together, for
texts no head saw.

The similarity prior answers a user's own yes/no statement from the cosine of two separate
encodings, so it can only rank messages as the untrained cosine does; for statements about what a
message *contains* or how it is written ("the customer thanks us", "they want a phone call") that
ranking is near chance, because a message with a thank-you is no closer to the statement than one
without. A reader that sees both texts in one sequence can check the statement against the message.

A checkpoint may declare, inside its ``similarity_prior``::

    "reader": {"layers": 2, "blend": [0.21, 0.83, -0.35]}

(and optionally ``"choices": w``, below), and then ``model.safetensors`` holds
``reader.layers.<i>.*`` (``layers`` encoder layers, trained) and ``reader.out.*`` (one linear
unit). The reader's input is the pair ``[CLS] statement [SEP] state [SEP]`` (token types 0 then
1, as the encoder was pre-trained on pairs); the checkpoint's own encoder runs its embeddings
and every layer but its top ``layers`` (those stay frozen and shared), the reader's layers
replace the top ones, and the mean-pooled output goes through ``out``: the
log-odds ``r`` that the statement holds. For an unseen statement the prior's fallback (see
:mod:`jevlaya_lab.decisions.prior`) then becomes::

    unseen = blend[0] * z + blend[1] * r + blend[2]

``z`` the statement's standardised cosine, so the reader adds to the similarity rather than
replacing it (the similarity still ranks statements about a topic well, the reader those about a
property). ``blend`` is one statement-agnostic logistic fit, multiplied by the noul temperature
like the fallback (``training.reader.fit_blend``), over two sources of equal weight, yes and no
weighted equally within each: intents the reader was not trained on (their held-out statements on
their utterances) and the hand-written training messages with the presets' statements (how users
word a property of a message, which intents alone do not show).

**Read against reference messages** (``"line": [a, b]`` with ``"reference": [texts]``, beside a
``blend``): one statement-agnostic blend puts the 0.5 line of every unseen statement at the same
place, yet the reader's log-odds sit higher for some statements than for others whatever the message
(in the user-question benchmark's dev half, "Something arrived broken or got physically damaged."
read "yes" for 96 % of the messages, 5 of 72 true). With a ``line``, the statement's blended answer is
first computed on each ``reference`` text (hand-written messages), and what answers a state is::

    unseen = a * (blended - mean) / std + b

``mean`` and ``std`` those of the statement's blended answers on the references: the statement is
read against how it answers typical messages. Each read statement costs one reader pass per
reference text once (cached per statement, like its vector, and kept in the cache folder for later
processes: :mod:`jevlaya_lab.decisions.line_store`). ``a`` and ``b`` (times the noul
temperature) are one logistic fit across statements; ``mini-en``'s open part was fit on the dev
statements of the user-question benchmark that are not negated as a whole
(``bench/statement_lines.py --fit-line --without-negated --ship``, README).

**Choices** (``choices``, a weight ``w`` > 0): a choice question with an option far from the
training texts (gate below :data:`READ_BELOW`) gets every one of its options read as the pair
``[CLS] <instructions> <option text> [SEP] state [SEP]``, the same text the prior pools for an
option in context, and ``w * r`` is added to each option's logit. The cosine of two separate
encodings picks an unseen label no better than an untrained encoder does; the reader sees the
option and the message together. ``w`` is one fit over choice questions built from the intents the
reader never saw (``training.reader.fit_choice_weight``), multiplied by the choice temperature.
Every option of a read question is read, so the softmax compares like with like; a question
with more than :data:`READ_MAX_OPTIONS` options is not read (each option costs a pass per state:
a 150-label question would cost 150), and without the key (or at 0) no choice is read.

**Members** (``"members": n``): ``n`` readers of the same size, each trained alone from another
random start, read each pair over the same lower layers, and ``r`` is the mean of their log-odds;
the tensors of the members after the first are ``reader.more.<j>.layers.<i>.*`` and
``reader.more.<j>.out.*``. Why: one reader's answers depend on its random start and the order of its
training pairs, and a mean of several depends on them less; each member costs its ``layers`` more
per pair. ``jevlaya-lab train --reader-join`` joins readers trained apart
(:meth:`StatementReader.joined`). No bundled checkpoint holds members (README, "Two readers
joined": they ranked a little better, and answered no better at 0.5).

**Choices only** (``"reader": {"layers": 3, "choices": w}``, no ``blend``): no yes/no statement is
read (it keeps its answer without the reader, so the checkpoint needs no fallback), only choice
options. ``mini-multi`` ships such a reader: trained with ``mini-en``'s recipe on its e5 encoder, its
yes/no blend ranked the English dev statements of the user-question benchmark below the untrained
cosine (AUC 0.742 against 0.756) and said "yes" to most non-English messages, while reading the
options lifted its English dev choices from 0.619 to 0.672 (README, "Your own questions").

Only statements whose gate is below :data:`READ_BELOW` are read (a statement near the training
texts keeps the trained answer, and the presets pay nothing): the cost of a user's statement is
one more pass over ``(statement, state)`` through the encoder per state, and of a read choice
question one such pass per option. A question whose definition says ``"read": False``
(:mod:`~jevlaya_lab.decisions.questions`) is never read: the caller's choice of the cheaper answer
(the prior alone) for a large table. A checkpoint without the
key has no reader and answers exactly as before. Encoders the reader can run are BERT-like ones
(``embeddings`` and ``encoder.layer``); another raises a ``ValueError`` when the checkpoint loads.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

__all__ = ["READ_BELOW", "READ_MAX_OPTIONS", "READER_MAX_LEN", "STATEMENT_MAX_LEN", "ReaderConfig", "StatementReader",
           "pair_rows"]

READ_BELOW = 0.5
"""A noul statement whose gate (nearness to the training texts) is below this is read by the reader."""

READ_MAX_OPTIONS = 12
"""A choice question with more options than this is answered without the reader (its cost grows with
the options; at 12 a call costs about as much as twelve yes/no statements)."""

READER_MAX_LEN = 128
"""Tokens of a reader pair, special tokens included; the state is cut to what the statement leaves."""

STATEMENT_MAX_LEN = 48
"""Tokens of the statement in a pair (a longer one is cut)."""


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """The ``reader`` entry inside ``similarity_prior``."""

    layers: int
    blend: tuple[float, float, float] | None
    """How an unseen yes/no statement's answer mixes the similarity and the reader (None: statements
    are not read, only choice options)."""
    choices: float = 0.0
    """Weight of the reader's log-odds in an unseen choice option's logit (0: choices are not read)."""
    line: tuple[float, float] | None = None
    """``(scale, bias)`` of a read statement's blended answer standardised against ``reference``
    (None: the blended answer as it is)."""
    reference: tuple[str, ...] = ()
    """The texts a read statement's blended answer is standardised against (with ``line``)."""
    members: int = 1
    """How many readers of this size answer together, their log-odds averaged ("Members" above)."""

    @classmethod
    def from_value(cls, value: Any) -> ReaderConfig:
        """Validate the parsed JSON value; a ``ValueError`` names the key, the value and the fix."""

        def bad(what: str) -> ValueError:
            shown = repr(value)  # clipped: a reference list holds hundreds of texts
            shown = shown if len(shown) <= 240 else shown[:240] + " ...]"
            return ValueError(f"similarity_prior.reader = {shown} is invalid; {what}")

        if (not isinstance(value, dict) or not {"layers"} <= set(value) <= {"layers", "blend", "choices", "line",
                                                                             "reference", "members"}
                or not ("blend" in value or value.get("choices"))):
            raise bad('use an object with "layers" and "blend" (statements read), "choices" (options read) or both, '
                      'e.g. {"layers": 2, "blend": [0.2, 0.8, -0.3], "choices": 1.0}')
        layers, blend, choices = value["layers"], value.get("blend"), value.get("choices", 0.0)
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise bad("layers must be an int >= 1 (how many top encoder layers the reader replaces)")
        if blend is not None and (not isinstance(blend, (list, tuple)) or len(blend) != 3
                                  or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in blend)):
            raise bad("blend must be [similarity scale, reader scale, bias] (numbers)")
        if isinstance(choices, bool) or not isinstance(choices, (int, float)) or not 0 <= choices < float("inf"):
            raise bad("choices must be a number >= 0 (the weight of the reader in an unseen option's logit; "
                      "0 or no key: choices are not read)")
        members = value.get("members", 1)
        if isinstance(members, bool) or not isinstance(members, int) or members < 1:
            raise bad("members must be an int >= 1 (how many readers answer together; 1 or no key: one)")
        line, reference = value.get("line"), value.get("reference")
        if (line is None) != (reference is None):
            raise bad('line and reference come together: "line": [scale, bias] reads a statement against the '
                      '"reference" texts; give both or neither')
        if line is not None:
            if blend is None:
                raise bad("line standardises a read statement's blended answer: it needs a blend")
            if (not isinstance(line, (list, tuple)) or len(line) != 2 or any(
                    isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) for x in line)):
                raise bad("line must be [scale, bias] (finite numbers)")
            if (not isinstance(reference, (list, tuple)) or len(reference) < 2
                    or not all(isinstance(t, str) and t.strip() for t in reference)):
                raise bad("reference must be a list of at least 2 non-empty texts (the messages a statement is "
                          "read against)")
        return cls(layers, None if blend is None else (float(blend[0]), float(blend[1]), float(blend[2])),
                   float(choices), None if line is None else (float(line[0]), float(line[1])),
                   tuple(reference or ()), members)

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"layers": self.layers}
        if self.blend is not None:
            value["blend"] = list(self.blend)
        if self.choices:
            value["choices"] = self.choices
        if self.line is not None:
            value["line"] = list(self.line)
            value["reference"] = list(self.reference)
        if self.members > 1:
            value["members"] = self.members
        return value


def _layers_of(encoder: nn.Module) -> nn.ModuleList:
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or not hasattr(encoder, "embeddings"):
        raise ValueError(f"similarity_prior.reader needs a BERT-like encoder (embeddings and encoder.layer); "
                         f"{type(encoder).__name__} has none: drop the reader key from the checkpoint config")
    return layers


class StatementReader(nn.Module):
    """The trained top encoder layers and the output unit; the lower layers are the encoder's own."""

    def __init__(self, encoder: nn.Module, config: ReaderConfig) -> None:
        super().__init__()
        own = _layers_of(encoder)
        if config.layers > len(own):
            raise ValueError(f"similarity_prior.reader.layers = {config.layers} but the encoder has only "
                             f"{len(own)} layers: use at most {len(own)}")
        self.config = config
        # copies of the encoder's top layers: the architecture, and a start for training
        self.layers = nn.ModuleList(copy.deepcopy(layer) for layer in own[len(own) - config.layers:])
        encoder_config: Any = encoder.config  # a transformers config (nn.Module types attributes as tensors)
        self.out = nn.Linear(int(encoder_config.hidden_size), 1)
        self.more = nn.ModuleList(_Member(self.layers, self.out) for _ in range(config.members - 1))
        """The members after the first (``members`` > 1), each its own layers and ``out``."""

    def forward(self, encoder: nn.Module, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> torch.Tensor:
        """``[pairs]`` the log-odds that each pair's statement holds for its state."""
        return self.read_from(self.lower(encoder, input_ids, token_type_ids, attention_mask), attention_mask)

    def lower(self, encoder: nn.Module, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
              attention_mask: torch.Tensor) -> torch.Tensor:
        """``[pairs, length, hidden]`` the encoder's own layers below the reader's (frozen and shared)."""
        own = _layers_of(encoder)
        hidden = encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)  # type: ignore[operator]
        return _run_layers(own[:len(own) - len(self.layers)], hidden, attention_mask)

    def read_from(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[pairs]`` the log-odds from :meth:`lower`'s output: the reader's layers, mean pooling and
        ``out`` (a caller that trains the reader runs :meth:`lower` once and this per step)."""
        logits = _read(self.layers, self.out, hidden, attention_mask)
        if len(self.more):
            each = [logits, *(_read(m.layers, m.out, hidden, attention_mask) for m in self.more)]
            logits = torch.stack(each).mean(0)
        return logits

    def joined(self, others: Sequence[StatementReader]) -> StatementReader:
        """A reader whose members are this one's and then ``others``' (same encoder, same ``layers``;
        each trained alone, so with one member), its config this one's with ``members`` counted; a
        ``ValueError`` names the reader that does not fit."""
        for i, other in enumerate(others):
            if other.config.layers != self.config.layers or len(other.more):
                raise ValueError(f"readers to join [{i}] has {other.config.layers} layers and "
                                 f"{1 + len(other.more)} member(s); join single readers of "
                                 f"{self.config.layers} layers trained over the same encoder")
        joined = copy.deepcopy(self)
        joined.config = replace(self.config, members=self.config.members + len(others))
        for other in others:
            joined.more.append(_Member(other.layers, other.out))
        return joined


class _Member(nn.Module):
    """A reader after the first: copies of ``layers`` and ``out`` (the architecture, or the weights
    of a reader joined in)."""

    def __init__(self, layers: nn.ModuleList, out: nn.Linear) -> None:
        super().__init__()
        self.layers = copy.deepcopy(layers)
        self.out = copy.deepcopy(out)


def _read(layers: Any, out: Any, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    hidden = _run_layers(layers, hidden, attention_mask)
    mask = attention_mask[..., None].to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
    logits: torch.Tensor = out(pooled).squeeze(-1).float()
    return logits


def _run_layers(layers: Iterable[nn.Module], hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    additive = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
    for layer in layers:
        output = layer(hidden, attention_mask=additive)
        hidden = output[0] if isinstance(output, tuple) else output
    return hidden


def pair_rows(rows: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, token_type_ids, attention_mask)`` of ``[CLS] statement [SEP] state [SEP]`` for
    each ``(statement ids, state ids)`` pair, without special tokens (``rows``: the
    :class:`~jevlaya_lab.decisions.encoding.RowTokenizer`); training and answering build them alike."""
    built = []
    for statement, state in pairs:
        head = [rows.cls_id, *statement[:STATEMENT_MAX_LEN], rows.sep_id]
        built.append((head + [*state[:READER_MAX_LEN - len(head) - 1], rows.sep_id], len(head)))
    length = max((len(ids) for ids, _ in built), default=0)
    input_ids = torch.full((len(built), length), rows.pad_id, dtype=torch.long)
    types = torch.zeros((len(built), length), dtype=torch.long)
    mask = torch.zeros((len(built), length), dtype=torch.long)
    for i, (ids, first) in enumerate(built):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        types[i, first:len(ids)] = 1
        mask[i, :len(ids)] = 1
    return input_ids, types, mask
