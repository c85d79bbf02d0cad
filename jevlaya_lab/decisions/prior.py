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
trained on (gate near 1) answer as before.

**Options in context** (``option_context``). A user's bare option names say little alone ("ring
them", "write back", "leave it"), and which sense is meant is in the question. So a choice option
far from the training texts is pooled as ``"<instructions> <option text>"`` and one near them keeps
its own text (the correction was trained on it): its vector is ``g * v(text) + (1 - g) *
v(instructions + text)``, ``g`` read from ``v(text)``. With mini-en's encoder on the user-question
benchmark's dev choices (9 questions, untrained cosine): 0.616 -> 0.667, higher on 8 of 9; on the
intent datasets' labels under the generic "What does the user want?" 0.706 -> 0.699.

The tensors live in ``model.safetensors`` under ``prior.*``.

A checkpoint without the key (every Laya checkpoint) has no prior and answers exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from jevlaya_lab._lru import LockedLRU

__all__ = ["PRIOR_KEY", "PriorBuilder", "PriorConfig", "PriorInputs", "SimilarityPrior", "context_texts", "mean_pool",
           "option_texts"]

PRIOR_KEY = "similarity_prior"
DEFAULT_GATE = (0.85, 40.0)
"""Option texts with cosine >= ~0.9 to a training text get the correction, below ~0.8 almost none."""
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

    @classmethod
    def from_value(cls, value: Any) -> PriorConfig:
        """Validate the parsed JSON value; a ``ValueError`` names the key, the value and the fix."""

        def bad(what: str) -> ValueError:
            return ValueError(f"{PRIOR_KEY} = {value!r} is invalid; {what}")

        if not isinstance(value, dict):
            raise bad('use an object like {"pooling": "mean", "prefix": "", "rank": 64}')
        allowed = ("pooling", "prefix", "rank", "anchors", "gate", "joint_head", "reference", "fallback",
                   "option_context")
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
        config = cls(**{**value, "gate": (float(gate[0]), float(gate[1])),
                        "fallback": tuple(float(x) for x in fallback)})
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
        return config

    def to_value(self) -> dict[str, Any]:
        value = {"pooling": self.pooling, "prefix": self.prefix, "rank": self.rank, "anchors": self.anchors,
                 "gate": list(self.gate), "joint_head": self.joint_head}
        if self.reference:  # older heads: as written
            value["reference"] = self.reference
        if self.fallback:
            value["fallback"] = list(self.fallback)
        if self.option_context:
            value["option_context"] = True
        return value


class PriorInputs(NamedTuple):
    """What a forward pass needs besides the token rows (slot order, like the option logits)."""

    state_ids: torch.Tensor
    """``[states, length]`` prefix + state tokens with the tokenizer's cls/sep, padded."""
    state_mask: torch.Tensor
    row_state: torch.Tensor
    """``[rows]`` the state (index into ``state_ids``) of each row."""
    option_vectors: torch.Tensor
    """``[rows, max_k, d]`` unit vectors of each slot's text; zero where a slot has no text."""
    true_slot: torch.Tensor
    """``[rows, max_k]`` True at a noul question's ``true`` slot (where ``bias`` applies)."""
    gate: torch.Tensor
    """``[rows, max_k]`` :meth:`SimilarityPrior.gate` of each slot's text, computed with its vector."""
    center: torch.Tensor
    """``[rows, max_k]`` and ``spread``: :meth:`SimilarityPrior.standardiser` of each slot's text."""
    spread: torch.Tensor

    def to(self, device: torch.device | str) -> PriorInputs:
        return PriorInputs(*(t.to(device) for t in self))


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unit-length mean of ``hidden`` over the positions where ``mask`` is 1 (special tokens included)."""
    weights = mask[..., None].to(hidden.dtype)
    pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
    return nn.functional.normalize(pooled.float(), dim=-1)


def context_texts(question: Any) -> list[str | None]:
    """A choice's option texts read in its question's context: ``"<instructions> <option text>"``
    ("How should we respond? ring them"); None for every option of another type (no second vector)."""
    if question.type != "choice":
        return [None] * len(question.labels)
    return [None if t is None else f"{question.instructions} {t}" for t in option_texts(question)]


def option_texts(question: Any) -> list[str | None]:
    """The text pooled for each option of a parsed question, caller order (None: no vector)."""
    if question.type == "noul":
        return [None, question.instructions]  # caller order is (false, true)
    if question.type == "score":
        return list(question.legend) or list(question.option_texts)
    return [text if not isinstance(label, str) else text.replace(label, label.replace("_", " "), 1)
            for label, text in zip(question.labels, question.option_texts)]


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

    def standardiser(self, option_vectors: torch.Tensor, true_slot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``([..., k], [..., k])`` center and spread of each slot's cosine: over the reference
        states for a noul statement (the true slot), 0 and 1 elsewhere or without references."""
        reference: torch.Tensor | None = self.reference  # type: ignore[assignment]  # a registered buffer
        center = torch.zeros(option_vectors.shape[:-1], dtype=option_vectors.dtype, device=option_vectors.device)
        spread = torch.ones_like(center)
        if reference is not None:
            cosines = option_vectors @ reference.T.to(option_vectors.dtype)
            center = torch.where(true_slot, cosines.mean(dim=-1), center)
            spread = torch.where(true_slot, cosines.std(dim=-1).clamp_min(1e-3), spread)
        return center, spread

    def forward(self, state_vectors: torch.Tensor, option_vectors: torch.Tensor, type_ids: torch.Tensor,
                true_slot: torch.Tensor, gate: torch.Tensor | None = None,
                standard: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """``[rows, max_k]`` prior logits from unit state vectors ``[rows, d]`` and option vectors.

        ``gate`` is :meth:`gate` of ``option_vectors`` and ``standard`` their :meth:`standardiser`,
        passed in when the caller computed them once per question set (they compare every option
        with every anchor and reference state)."""
        cosine = torch.einsum("rd,rkd->rk", state_vectors, option_vectors)
        center, spread = self.standardiser(option_vectors, true_slot) if standard is None else standard
        logits = self.scale[type_ids][:, None] * ((cosine - center) / spread)
        if self.config.rank:
            projected = state_vectors @ self.state_proj.T  # [rows, rank]
            correction = torch.einsum("rq,rkq->rk", projected, option_vectors @ self.option_proj.T)
            logits = logits + (self.gate(option_vectors) if gate is None else gate) * correction
        logits = logits + self.bias[type_ids][:, None] * true_slot.to(logits.dtype)
        anchors: torch.Tensor = self.anchors  # type: ignore[assignment]  # a registered buffer
        if self.config.fallback and len(anchors):
            scale, bias, hubness = self.config.fallback
            z = (cosine - center) / spread
            unseen = scale * (z - hubness * self.hubness(state_vectors)[:, None]) + bias
            near = self.gate(option_vectors) if gate is None else gate
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


def slot_layout(questions: Sequence[Any], vectors: Sequence[Sequence[torch.Tensor | None]], hidden_size: int,
                max_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-question ``[q, max_k, d]`` slot vectors and ``[q, max_k]`` true-slot flags."""
    out = torch.zeros((len(questions), max_k, hidden_size))
    true_slot = torch.zeros((len(questions), max_k), dtype=torch.bool)
    for j, (q, per_option) in enumerate(zip(questions, vectors)):
        for slot, caller in enumerate(q.option_order):
            vector = per_option[caller]
            if vector is not None:
                out[j, slot] = vector
            if q.type == "noul" and caller == 1:
                true_slot[j, slot] = True
    return out, true_slot


class PriorBuilder:
    """Builds :class:`PriorInputs` for a model with a prior; option vectors cached per question set.

    ``rows`` is the :class:`~jevlaya_lab.decisions.encoding.RowTokenizer` the rows are built
    with: states reuse their row tokens (cut to the start at ``max_len``), so nothing is
    tokenised twice.
    """

    CACHE_SIZE = 64

    def __init__(self, model: Any, rows: Any, memo: dict[tuple[int, ...], torch.Tensor] | None = None) -> None:
        self.model = model
        self.rows = rows
        self.memo = memo
        """Optional: pooled vectors by exact token row, shared by training runs over one frozen encoder."""
        prefix = model.prior.config.prefix
        self._prefix = tuple(rows.encode([prefix])[0].ids) if prefix else ()
        self._cache: LockedLRU[tuple[Any, ...], tuple[torch.Tensor, ...]] = LockedLRU(self.CACHE_SIZE)

    def _wrap(self, ids: Sequence[int], max_len: int) -> list[int]:
        room = max(0, max_len - 2 - len(self._prefix))
        return [self.rows.cls_id, *self._prefix, *ids[:room], self.rows.sep_id]

    def _pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(len(r) for r in rows)
        ids = torch.tensor([r + [self.rows.pad_id] * (length - len(r)) for r in rows], dtype=torch.long)
        lengths = torch.tensor([len(r) for r in rows])
        return ids, (torch.arange(length)[None, :] < lengths[:, None]).long()

    def _pooled(self, rows: list[list[int]], chunk: int = 64, progress: str | None = None) -> torch.Tensor:
        """Pool token rows in length-sorted chunks (little padding); ``[n, d]`` on the CPU.

        ``progress`` names a tqdm bar (training pools tens of thousands of texts)."""
        device = next(self.model.parameters()).device
        out = torch.zeros((len(rows), self.model.hidden_size))
        memo = self.memo
        todo = [i for i in range(len(rows))] if memo is None else []
        if memo is not None:
            for i, row in enumerate(rows):
                hit = memo.get(tuple(row))
                if hit is None:
                    todo.append(i)
                else:
                    out[i] = hit
        order = sorted(todo, key=lambda i: len(rows[i]))
        starts = range(0, len(order), chunk)
        if progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=progress, unit="chunk", leave=False)
        with torch.inference_mode():
            for start in starts:
                picked = order[start:start + chunk]
                ids, mask = self._pad([rows[i] for i in picked])
                out[picked] = self.model.pool(ids.to(device), mask.to(device)).cpu()
        if memo is not None:
            for i in todo:
                memo[tuple(rows[i])] = out[i].clone()
        return out

    def vectors(self, texts: Sequence[str], max_len: int = 512, progress: str | None = None) -> torch.Tensor:
        """Unit pooled vectors of ``texts`` (prefix applied), ``[n, d]`` on the CPU."""
        return self._pooled([self._wrap(e.ids, max_len) for e in self.rows.encode(list(texts))], progress=progress)

    def state_vectors(self, states: Sequence[Any], max_len: int, progress: str | None = None) -> torch.Tensor:
        """Unit pooled vectors of states given as ``StateTokens`` (what a forward pass computes)."""
        return self._pooled([self._wrap(s.ids, max_len) for s in states], progress=progress)

    def question_vectors(self, questions: tuple[Any, ...], max_k: int) -> tuple[torch.Tensor, ...]:
        """``[q, max_k, d]`` slot vectors (options in context mixed in by the gate) and ``[q, max_k]``
        true-slot flags, gates, centers and spreads of a question set (see :class:`PriorInputs`)."""
        key = (questions, max_k)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        prior = self.model.prior
        slots, true_slot = self._slots(questions, max_k, option_texts)
        with torch.inference_mode():
            on_device = slots.to(prior.anchors.device)
            gate = prior.gate(on_device).cpu()
            center, spread = (t.cpu() for t in prior.standardiser(on_device, true_slot.to(on_device.device)))
        if prior.config.option_context and any(q.type == "choice" for q in questions):
            in_context, _ = self._slots(questions, max_k, context_texts)
            has = in_context.abs().sum(-1, keepdim=True) > 0
            near = gate[..., None]
            slots = torch.where(has, near * slots + (1 - near) * in_context, slots)
        return self._cache.put(key, (slots, true_slot, gate, center, spread))

    def _slots(self, questions: tuple[Any, ...], max_k: int,
               texts_of: Callable[[Any], list[str | None]]) -> tuple[torch.Tensor, torch.Tensor]:
        per_question = [texts_of(q) for q in questions]
        flat = [t for texts in per_question for t in texts if t is not None]
        found = iter(self.vectors(flat)) if flat else iter(())
        vectors = [[None if t is None else next(found) for t in texts] for texts in per_question]
        return slot_layout(questions, vectors, self.model.hidden_size, max_k)

    def inputs(self, states: Sequence[Any], questions: tuple[Any, ...], max_len: int, max_k: int) -> PriorInputs:
        """The prior's inputs for ``states`` (``StateTokens``) x ``questions``, rows state-major."""
        option_vectors, *per_slot = self.question_vectors(questions, max_k)
        state_ids, state_mask = self._pad([self._wrap(s.ids, max_len) for s in states])
        n, q = len(states), len(questions)
        return PriorInputs(state_ids, state_mask, torch.arange(n).repeat_interleave(q),
                           option_vectors.repeat(n, 1, 1), *(t.repeat(n, 1) for t in per_slot))
