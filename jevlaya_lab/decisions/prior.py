"""The similarity prior: the encoder's own sentence similarity as the floor of every answer.

An untrained sentence encoder already answers many questions: the cosine between the mean-pooled
state and each option's text picks the right intent ~0.6-0.7 of the time on real datasets, and a
head trained on a few hundred labels easily does *worse* on labels it never saw (measured: a
learned bilinear correction lifts seen labels to 0.80-0.94 and costs unseen ones 1-6 points). So a
checkpoint may declare, in ``rl_agent_config.json``::

    "similarity_prior": {"pooling": "mean", "prefix": "query: ", "rank": 64, "anchors": 900,
                         "gate": [0.85, 40.0], "joint_head": false, "reference": 1000}

and then every option logit is the Laya head's logit (only when ``joint_head`` is true) plus::

    prior[row, slot] = scale[type] * z(s, o) + g(o) * (A s) . (B o) + bias[type] * is_true_slot
    g(o) = sigmoid(gate[1] * (max_m cos(o, anchor_m) - gate[0]))
    z(s, o) = (cos(s, o) - mean_r cos(ref_r, o)) / std_r cos(ref_r, o)   for a noul statement
    z(s, o) = cos(s, o)                                                   otherwise

``s`` is the mean-pooled encoder output of the state alone (``prefix`` + the state's row tokens,
cut to ``max_len``; special tokens included, as sentence-transformers pools), ``o`` the same for
the option's text: a choice option's ``"label: description"`` (underscores in the label read as
spaces), a score level's description, and for a noul question the statement (its instructions) on
the ``true`` slot and nothing on the ``false`` slot. Option vectors depend only on the question
set, so they are computed once per set. ``scale`` and ``bias`` are per question type (choice,
score, noul). The learned correction ``(A s) . (B o)`` (``A`` starts at zero) applies only to
option texts near one the head was trained on: the ``anchors`` are the unit vectors of every
option text and statement of its training data (but the alias names that stand for a user's own
labels, ``training.written.is_alias_text``), so on a label far from all of them the answer
falls back to the calibrated cosine instead of a guess learned for other labels.
With ``joint_head`` false the row pass through the encoder is skipped (the scorer would add
nothing) and the act head reads a zero first-position vector: the cost of a call is then one
encoder pass over the states.

**Reference states** (``reference`` > 0) answer a problem of yes/no statements: how high a cosine
means "yes" differs from statement to statement (a long specific statement is less similar to
everything than a short vague one), so one learned bias cannot fit unseen statements. The
checkpoint keeps the unit vectors of ``reference`` typical states (``prior.reference``, hand-written
messages of its training data), and a statement's cosine is read against how similar those states
are to it: a z-score. Measured leave-one-dataset-out on held-out statements (all-MiniLM-L6-v2,
threshold fitted on the two other datasets; balanced accuracy, raw cosine -> z-score):
CLINC150 0.698 -> 0.786, BANKING77 0.639 -> 0.699, HWU64 0.636 -> 0.666, close to a threshold
at the test set's own median (0.805, 0.722, 0.677), which no model can know. Choices are not
standardised: the softmax over a question's options already compares them with each other.

**Unseen statements** (``fallback``: ``[scale, bias, hubness]``). The trained noul scale and bias
were fit together with the correction on statements the head knows, and for a statement far from
all of them (a user's own, gate near 0) they put the 0.5 line too high: 1.7 reference standard
deviations, where nearly every message reads "no". With a fallback, the true slot's logit is
``g * (the above) + (1 - g) * (scale * (z - hubness * h(s)) + bias)``: ``h(s)`` is the state's mean
cosine to its 20 nearest anchors (a state near many training texts is near every statement of
its domain), and ``scale``/``bias`` are one statement-agnostic logistic fit over held-out
statements on real utterances and the presets' statements on hand-written messages, classes
weighted equally so that 0.5 separates (``training.trainer.fit_fallback``). Statements the head was
trained on (gate near 1) answer as before: ``g`` here is the gate over the gate of a training text
itself (cosine 1), at most 1, so a preset's own statement gets none of the fallback even where the
gate is soft (``mini-multi``'s gives a training text 0.944; with 5.6 % of the fallback its guard
``is_safe`` fell from 0.958 to 0.875 balanced on the locked test).

**Reference states by language** (``reference_languages``: ``{"de": 49, "es": 43, ...}``, with
``prior.language_reference`` holding that many unit vectors, block after block). A multilingual
encoder finds two texts in one language closer than any two in different ones, so a Spanish
statement's cosine to a Spanish message reads high against reference states that are mostly
English: ``mini-multi``'s unseen statements said "yes" to 65 % of the Spanish, French, German,
Portuguese and Italian dev messages of the user-question benchmark (18 % hold). With blocks, an
unseen statement's answer (the fallback, and a reader's blend) reads its z-score against the
reference states in the *state's* language, as :func:`jevlaya_lab.decisions.detect.detect` tells it
from the state's text; a state whose language is undecided or has no block reads it against
``reference`` as before. The trained part of an answer (nearly all of it for a statement near the
training texts, such as a preset's) always reads ``reference``. ``jevlaya-lab train
--language-references N`` draws the blocks from the multilingual hand-written training messages by
their detected language (blocks of fewer than :data:`MIN_LANGUAGE_BLOCK` messages are not kept; no
English block: ``reference`` is mostly English already, and on the dev half an English block read
English statements worse, ECE 0.145 against 0.121).

**Options in context** (``option_context``). A user's bare option names say little alone ("ring
them", "write back", "leave it"), and which sense is meant is in the question. So a choice option
far from the training texts is pooled as ``"<instructions> <option text>"`` and one near them keeps
its own text (the correction was trained on it): its vector is ``g * v(text) + (1 - g) *
v(instructions + text)``, ``g`` read from ``v(text)``. With mini-en's encoder on the user-question
benchmark's dev choices (9 questions, untrained cosine): 0.616 -> 0.667, higher on 8 of 9; on the
intent datasets' labels under the generic "What does the user want?" 0.706 -> 0.699.

**A reader for unseen statements** (``reader``): a ranking the cosine cannot make (does the message
*contain* a thank-you, ask for a call?) needs the statement and the state read together; with a
reader that has a ``blend``, an unseen statement's fallback becomes a blend of the z-score and the
reader's log-odds, and an unseen choice option's logit may gain the reader's log-odds of the
option in its question's context (:mod:`jevlaya_lab.decisions.statement_reader`). The inputs of a
forward pass (slot vectors, gates, the reader's pairs) are built by
:mod:`jevlaya_lab.decisions.prior_inputs`.

The tensors live in ``model.safetensors`` under ``prior.*`` (and ``reader.*``).

A checkpoint without the key (every Laya checkpoint) has no prior and answers exactly as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from jevlaya_lab.decisions.statement_reader import ReaderConfig

__all__ = ["DEFAULT_GATE", "MIN_LANGUAGE_BLOCK", "PRIOR_KEY", "PriorConfig", "SimilarityPrior", "mean_pool"]

PRIOR_KEY = "similarity_prior"
DEFAULT_GATE = (0.85, 40.0)
"""Option texts with cosine >= ~0.9 to a training text get the correction, below ~0.8 almost none."""
MIN_LANGUAGE_BLOCK = 20
"""The fewest reference states a language block is drawn with (fewer would give a noisy z-score)."""
INITIAL_SCALE = 20.0
"""A cosine gap of 0.1 becomes a logit gap of 2 before training (roughly what the fitted scales reach)."""


@dataclass(frozen=True, slots=True)
class PriorConfig:
    """The ``similarity_prior`` entry of ``rl_agent_config.json``."""

    pooling: str = "mean"
    prefix: str = ""
    rank: int = 0
    anchors: int = 0
    gate: tuple[float, float] = DEFAULT_GATE
    joint_head: bool = True
    reference: int = 0
    fallback: tuple[float, ...] = ()
    """``(scale, bias, hubness)`` of an unseen statement's answer (see :meth:`SimilarityPrior.forward`);
    empty: none, the statement gets the trained scale and bias as before."""
    option_context: bool = False
    """Read a choice option far from the training texts with its question (see the module docstring)."""
    reader: ReaderConfig | None = None
    """The statement reader of unseen yes/no statements and choice options
    (:mod:`jevlaya_lab.decisions.statement_reader`)."""
    reference_languages: tuple[tuple[str, int], ...] = ()
    """``((language, count), ...)``: the blocks of ``prior.language_reference`` an unseen statement is
    standardised against, by the state's language (see the module docstring); empty: none."""

    @classmethod
    def from_value(cls, value: Any) -> PriorConfig:
        """Validate the parsed JSON value; a ``ValueError`` names the key, the value and the fix."""

        def bad(what: str) -> ValueError:
            return ValueError(f"{PRIOR_KEY} = {value!r} is invalid; {what}")

        if not isinstance(value, dict):
            raise bad('use an object like {"pooling": "mean", "prefix": "", "rank": 64}')
        allowed = ("pooling", "prefix", "rank", "anchors", "gate", "joint_head", "reference", "fallback",
                   "option_context", "reader", "reference_languages")
        unknown = set(value) - set(allowed)
        if unknown:
            raise bad(f"unknown keys {sorted(unknown)}; allowed are {', '.join(allowed)}")
        gate = value.get("gate", DEFAULT_GATE)
        if (not isinstance(gate, (list, tuple)) or len(gate) != 2
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in gate)):
            raise bad("gate must be [threshold, sharpness], e.g. [0.85, 40]")
        fallback = value.get("fallback", ())
        if (not isinstance(fallback, (list, tuple)) or len(fallback) not in (0, 3)
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in fallback)):
            raise bad("fallback must be [scale, bias, hubness] (numbers), e.g. [0.4, -0.2, 10.0]")
        reader = ReaderConfig.from_value(value["reader"]) if "reader" in value else None
        blocks = value.get("reference_languages", {})
        if (not isinstance(blocks, dict) or any(not isinstance(k, str) or not k.strip() for k in blocks)
                or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in blocks.values())):
            raise bad('reference_languages must map language codes to counts >= 1, e.g. {"en": 300, "es": 49} '
                      "(write it with jevlaya-lab train --fallback-only --language-references 300, or drop it)")
        config = cls(**{**value, "gate": (float(gate[0]), float(gate[1])),
                        "fallback": tuple(float(x) for x in fallback), "reader": reader,
                        "reference_languages": tuple(blocks.items())})
        if config.pooling != "mean":
            raise bad('pooling must be "mean"')
        if not isinstance(config.prefix, str):
            raise bad("prefix must be a string (\"\" for none)")
        if isinstance(config.rank, bool) or not isinstance(config.rank, int) or config.rank < 0:
            raise bad("rank must be an int >= 0 (0: no learned correction)")
        if isinstance(config.anchors, bool) or not isinstance(config.anchors, int) or config.anchors < 0:
            raise bad("anchors must be an int >= 0 (0: the correction applies everywhere)")
        if not isinstance(config.joint_head, bool):
            raise bad("joint_head must be true or false")
        if isinstance(config.reference, bool) or not isinstance(config.reference, int) or config.reference < 0:
            raise bad("reference must be an int >= 0 (0: statements are not standardised)")
        if not isinstance(config.option_context, bool):
            raise bad("option_context must be true or false")
        if config.reference_languages and not config.reference:
            raise bad("reference_languages refines the reference states: it needs reference > 0 "
                      "(or drop reference_languages)")
        if reader is not None and not config.anchors:
            raise bad("reader reads only texts far from the training texts: it needs anchors "
                      "(fit them with jevlaya-lab train --fallback-only, or drop the reader)")
        if reader is not None and reader.blend is not None and not config.fallback:
            raise bad("reader.blend answers unseen statements in place of the fallback: it needs a fallback "
                      "(fit it with jevlaya-lab train --fallback-only, or drop the blend to read only choices)")
        return config

    def with_choice_weight(self, weight: float) -> PriorConfig:
        """This config with its reader's ``choices`` weight set to ``weight`` (0: no choice is read),
        e.g. to answer with and without reading the options in one process."""
        if self.reader is None:
            raise ValueError("similarity_prior has no reader, so it has no choice weight to set")
        return replace(self, reader=replace(self.reader, choices=weight))

    def to_value(self) -> dict[str, Any]:
        value = {"pooling": self.pooling, "prefix": self.prefix, "rank": self.rank, "anchors": self.anchors,
                 "gate": list(self.gate), "joint_head": self.joint_head}
        if self.reference:  # older heads: as written
            value["reference"] = self.reference
        if self.fallback:
            value["fallback"] = list(self.fallback)
        if self.option_context:
            value["option_context"] = True
        if self.reader is not None:
            value["reader"] = self.reader.to_value()
        if self.reference_languages:
            value["reference_languages"] = dict(self.reference_languages)
        return value


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unit-length mean of ``hidden`` over the positions where ``mask`` is 1 (special tokens included)."""
    weights = mask[..., None].to(hidden.dtype)
    pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
    return nn.functional.normalize(pooled.float(), dim=-1)


class SimilarityPrior(nn.Module):
    """Per-type scale and bias of the cosine, plus a gated low-rank bilinear correction."""

    def __init__(self, hidden_size: int, config: PriorConfig) -> None:
        super().__init__()
        self.config = config
        self.scale = nn.Parameter(torch.full((3,), INITIAL_SCALE))
        self.bias = nn.Parameter(torch.zeros(3))
        rank = config.rank
        self.state_proj = nn.Parameter(torch.zeros(rank, hidden_size))
        self.option_proj = nn.Parameter(torch.randn(rank, hidden_size) * hidden_size ** -0.5)
        self.register_buffer("anchors", torch.zeros(config.anchors, hidden_size))
        # no tensor at all without references: checkpoints from before the key load unchanged
        self.register_buffer("reference", torch.zeros(config.reference, hidden_size) if config.reference else None)
        languages = sum(n for _, n in config.reference_languages)
        self.register_buffer("language_reference", torch.zeros(languages, hidden_size) if languages else None)
        if config.reference:  # a z-score of 1 is a cosine gap of ~0.07: about INITIAL_SCALE's logit gap
            with torch.no_grad():
                self.scale[2] = INITIAL_SCALE * 0.07

    def gate(self, option_vectors: torch.Tensor) -> torch.Tensor:
        """``[..., k]`` how near each option text is to the training texts (1 with no anchors)."""
        anchors: torch.Tensor = self.anchors  # type: ignore[assignment]  # a registered buffer
        if not len(anchors):
            return torch.ones(option_vectors.shape[:-1], dtype=option_vectors.dtype, device=option_vectors.device)
        nearest = (option_vectors @ anchors.T).amax(dim=-1)
        threshold, sharpness = self.config.gate
        return torch.sigmoid(sharpness * (nearest - threshold))

    def gate_of_a_training_text(self) -> float:
        """The gate of a text equal to an anchor (cosine 1): below 1 with a soft gate (``mini-multi``'s
        gives 0.944), so the fallback share is measured from it, and a preset's own statement gets
        none of the fallback."""
        threshold, sharpness = self.config.gate
        return 1.0 / (1.0 + math.exp(-sharpness * (1.0 - threshold)))

    def language_block(self, text: str) -> int:
        """Which standardisation an unseen statement on a state with this text reads: 1 + the index
        of the block of its detected language, or 0 (``reference``) when undecided or without a block."""
        codes = [code for code, _ in self.config.reference_languages]
        if not codes:
            return 0
        from jevlaya_lab.decisions.detect import detect

        language = detect(text)["language"]
        return codes.index(language) + 1 if language in codes else 0

    def standardisers(self, option_vectors: torch.Tensor, true_slot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``([1 + blocks, ..., k], ...)`` :meth:`standardiser` over ``reference`` (index 0), then over
        each language block of ``language_reference`` (see :meth:`language_block`)."""
        parts = [self.standardiser(option_vectors, true_slot)]
        languages: torch.Tensor | None = self.language_reference  # type: ignore[assignment]  # a registered buffer
        start = 0
        for _, count in self.config.reference_languages:
            assert languages is not None
            parts.append(self.standardiser(option_vectors, true_slot, languages[start:start + count]))
            start += count
        return torch.stack([c for c, _ in parts]), torch.stack([s for _, s in parts])

    def standardiser(self, option_vectors: torch.Tensor, true_slot: torch.Tensor,
                     reference: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``([..., k], [..., k])`` center and spread of each slot's cosine: over the reference
        states (``reference``, else the prior's own) for a noul statement (the true slot), 0 and 1
        elsewhere or without references."""
        if reference is None:
            reference = self.reference  # type: ignore[assignment]  # a registered buffer
        center = torch.zeros(option_vectors.shape[:-1], dtype=option_vectors.dtype, device=option_vectors.device)
        spread = torch.ones_like(center)
        if reference is not None:
            cosines = option_vectors @ reference.T.to(option_vectors.dtype)
            center = torch.where(true_slot, cosines.mean(dim=-1), center)
            spread = torch.where(true_slot, cosines.std(dim=-1).clamp_min(1e-3), spread)
        return center, spread

    def forward(self, state_vectors: torch.Tensor, option_vectors: torch.Tensor, type_ids: torch.Tensor,
                true_slot: torch.Tensor, gate: torch.Tensor | None = None,
                standard: tuple[torch.Tensor, torch.Tensor] | None = None,
                read: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                local: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """``[rows, max_k]`` prior logits from unit state vectors ``[rows, d]`` and option vectors.

        ``gate`` is :meth:`gate` of ``option_vectors`` and ``standard`` their :meth:`standardiser`,
        passed in when the caller computed them once per question set (they compare every option
        with every anchor and reference state). ``read`` is ``(rows, slots, log-odds, center, spread)``
        of the statement reader: with a ``reader`` config it answers a row's unseen statement (at its
        true slot) in place of the fallback (read against its ``reference`` texts' ``center`` and
        ``spread`` when the reader has a ``line``), and adds ``choices * log-odds`` to a read choice
        option.
        ``local`` is the center and spread an unseen statement's answer reads, by each row's state
        language (:meth:`standardisers`); without it, ``standard``'s."""
        cosine = torch.einsum("rd,rkd->rk", state_vectors, option_vectors)
        center, spread = self.standardiser(option_vectors, true_slot) if standard is None else standard
        logits = self.scale[type_ids][:, None] * ((cosine - center) / spread)
        if self.config.rank:
            projected = state_vectors @ self.state_proj.T  # [rows, rank]
            correction = torch.einsum("rq,rkq->rk", projected, option_vectors @ self.option_proj.T)
            logits = logits + (self.gate(option_vectors) if gate is None else gate) * correction
        logits = logits + self.bias[type_ids][:, None] * true_slot.to(logits.dtype)
        reader = self.config.reader
        read_at = None  # (the reader's log-odds, where it read) over [rows, max_k], when it read any
        if reader is not None and read is not None and len(read[0]):
            rows, slots, said, said_center, said_spread = read
            by_reader, has = torch.zeros_like(logits), torch.zeros_like(true_slot)
            by_reader[rows, slots], has[rows, slots] = said.to(logits.dtype), True
            if reader.line is not None:  # each read statement's answer on its reference texts
                read_center, read_spread = torch.zeros_like(logits), torch.ones_like(logits)
                read_center[rows, slots] = said_center.to(logits.dtype)
                read_spread[rows, slots] = said_spread.to(logits.dtype)
            read_at = by_reader, has
            if reader.choices:  # a read choice option: the reader's log-odds, weighted
                logits = logits + reader.choices * torch.where(has & ~true_slot, by_reader, 0.0)
        anchors: torch.Tensor = self.anchors  # type: ignore[assignment]  # a registered buffer
        if self.config.fallback and len(anchors):
            scale, bias, hubness = self.config.fallback
            z = (cosine - center) / spread if local is None else (cosine - local[0]) / local[1]
            unseen = scale * (z - hubness * self.hubness(state_vectors)[:, None]) + bias
            if reader is not None and reader.blend is not None and read_at is not None:
                by_reader, has = read_at
                blended = reader.blend[0] * z + reader.blend[1] * by_reader + reader.blend[2]
                if reader.line is not None:  # read against the reference texts (statement_reader)
                    blended = reader.line[0] * (blended - read_center) / read_spread + reader.line[1]
                unseen = torch.where(has, blended, unseen)
            near = (self.gate(option_vectors) if gate is None else gate) / self.gate_of_a_training_text()
            near = near.clamp(max=1.0)  # a training statement word for word keeps its trained answer alone
            logits = torch.where(true_slot, near * logits + (1 - near) * unseen, logits)
        return logits

    HUB_TOP = 20
    """How many nearest anchors :meth:`hubness` averages."""

    def hubness(self, state_vectors: torch.Tensor) -> torch.Tensor:
        """``[rows]`` the mean cosine of each state to its :data:`HUB_TOP` nearest anchors: how close a
        state sits to the training texts in general. A state near many of them (a short banking
        request among banking statements) is close to *every* statement of its domain, true or not,
        so an unseen statement's z-score is read net of it."""
        anchors: torch.Tensor = self.anchors  # type: ignore[assignment]  # a registered buffer
        sims = state_vectors @ anchors.T.to(state_vectors.dtype)
        return sims.topk(min(self.HUB_TOP, sims.shape[-1]), dim=-1).values.mean(dim=-1)
