"""The similarity prior's inputs for a forward pass: slot vectors, gates, references, reader pairs.

:class:`PriorBuilder` turns states and a question set into :class:`PriorInputs` (what
:mod:`jevlaya_lab.decisions.prior` defines, computed here): each option's text (:func:`option_texts`,
or with its question in front, :func:`context_texts`) pooled once per question set and cached, the
states pooled from their row tokens, and the statement reader's ``(statement, state)`` pairs for the
yes/no statements and the choice options it answers (:mod:`jevlaya_lab.decisions.statement_reader`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import torch

from jevlaya_lab._lru import LockedLRU
from jevlaya_lab.decisions.line_store import LineStore, line_key
from jevlaya_lab.decisions.statement_reader import READ_BELOW, READ_MAX_OPTIONS, pair_rows

__all__ = ["PriorBuilder", "PriorInputs", "context_texts", "like_length_chunks", "option_texts", "pad_rows",
           "pool_rows", "slot_layout"]


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
    local_center: torch.Tensor
    """``[rows, max_k]`` and ``local_spread``: the same over the reference states in the row's state
    language (:meth:`SimilarityPrior.standardisers`), what an unseen statement reads; ``center`` and
    ``spread`` again when the prior has no language blocks or the language is undecided."""
    local_spread: torch.Tensor
    pair_ids: torch.Tensor
    """``[pairs, length]`` the statement reader's ``(statement, state)`` rows (no pairs: ``[0, 0]``),
    with ``pair_types`` and ``pair_mask`` (see :func:`~jevlaya_lab.decisions.statement_reader.pair_rows`)."""
    pair_types: torch.Tensor
    pair_mask: torch.Tensor
    pair_row: torch.Tensor
    """``[pairs]`` the row each pair answers, and ``pair_slot`` the slot: a yes/no statement's true
    slot, or the option a choice pair reads."""
    pair_slot: torch.Tensor
    pair_center: torch.Tensor
    """``[pairs]`` and ``pair_spread``: the mean and spread of a read statement's blended answer over the
    reader's ``reference`` texts, which its answer is read against (0 and 1 where there is none: a
    choice option, or a reader without a ``line``)."""
    pair_spread: torch.Tensor

    def to(self, device: torch.device | str) -> PriorInputs:
        return PriorInputs(*(t.to(device) for t in self))


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


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, attention mask)`` of token rows padded to the longest with ``pad_id``."""
    length = max(len(r) for r in rows)
    ids = torch.tensor([[*r, *[pad_id] * (length - len(r))] for r in rows], dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    return ids, (torch.arange(length)[None, :] < lengths[:, None]).long()


def like_length_chunks(rows: Sequence[Sequence[Any]], chunk: int) -> list[list[int]]:
    """The indices of ``rows`` sorted by length, in chunks of ``chunk``: batches with little padding."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    return [order[start:start + chunk] for start in range(0, len(order), chunk)]


def pool_rows(model: Any, rows: Sequence[Sequence[int]], pad_id: int, *, chunk: int = 64,
              progress: str | None = None) -> torch.Tensor:
    """``model.pool`` of whole token rows in length-sorted chunks (little padding); ``[n, d]`` on
    the CPU. ``progress`` names a tqdm bar (training pools tens of thousands of texts)."""
    device = next(model.parameters()).device
    out = torch.zeros((len(rows), model.hidden_size))
    chunks: Iterable[list[int]] = like_length_chunks(rows, chunk)
    if progress:
        from tqdm.auto import tqdm

        chunks = tqdm(chunks, desc=progress, unit="chunk", leave=False)
    with torch.inference_mode():
        for picked in chunks:
            ids, mask = pad_rows([rows[i] for i in picked], pad_id)
            out[picked] = model.pool(ids.to(device), mask.to(device)).float().cpu()
    return out


class PriorBuilder:
    """Builds :class:`PriorInputs` for a model with a prior; option vectors cached per question set.

    ``rows`` is the :class:`~jevlaya_lab.decisions.encoding.RowTokenizer` the rows are built
    with: states reuse their row tokens (cut to the start at ``max_len``), so nothing is
    tokenised twice.
    """

    CACHE_SIZE = 64

    def __init__(self, model: Any, rows: Any, memo: dict[tuple[int, ...], torch.Tensor] | None = None,
                 store: LineStore | None = None) -> None:
        self.model = model
        self.rows = rows
        self.memo = memo
        """Optional: pooled vectors by exact token row, shared by training runs over one frozen encoder."""
        self.store: LineStore | None = store
        """Where read statements' reference statistics outlive the process (:mod:`.line_store`); None:
        in memory only."""
        prefix = model.prior.config.prefix
        self._prefix = tuple(rows.encode([prefix])[0].ids) if prefix else ()
        self._cache: LockedLRU[tuple[Any, ...], tuple[torch.Tensor, ...]] = LockedLRU(self.CACHE_SIZE)
        self._statements: LockedLRU[tuple[Any, ...], list[tuple[int, int, list[int]]]] = LockedLRU(self.CACHE_SIZE)
        self._lines: LockedLRU[tuple[Any, ...], tuple[float, float]] = LockedLRU(self.CACHE_SIZE)
        self._reference: tuple[Any, list[list[int]], torch.Tensor] | None = None

    def _wrap(self, ids: Sequence[int], max_len: int) -> list[int]:
        room = max(0, max_len - 2 - len(self._prefix))
        return [self.rows.cls_id, *self._prefix, *ids[:room], self.rows.sep_id]

    def _pooled(self, rows: list[list[int]], chunk: int = 64, progress: str | None = None) -> torch.Tensor:
        """:func:`pool_rows` of the rows that :attr:`memo` does not hold yet; ``[n, d]`` on the CPU."""
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
        if todo:
            out[todo] = pool_rows(self.model, [rows[i] for i in todo], self.rows.pad_id, chunk=chunk,
                                  progress=progress)
        if memo is not None:
            for i in todo:
                memo[tuple(rows[i])] = out[i].clone()
        return out

    def text_rows(self, texts: Sequence[str], max_len: int = 512) -> list[list[int]]:
        """The token rows :meth:`vectors` pools for ``texts``: cls, prefix, the text cut to fit, sep."""
        return [self._wrap(e.ids, max_len) for e in self.rows.encode(list(texts))]

    def state_rows(self, states: Sequence[Any], max_len: int) -> list[list[int]]:
        """The token rows :meth:`state_vectors` pools for ``StateTokens``."""
        return [self._wrap(s.ids, max_len) for s in states]

    def vectors(self, texts: Sequence[str], max_len: int = 512, progress: str | None = None) -> torch.Tensor:
        """Unit pooled vectors of ``texts`` (prefix applied), ``[n, d]`` on the CPU."""
        return self._pooled(self.text_rows(texts, max_len), progress=progress)

    def state_vectors(self, states: Sequence[Any], max_len: int, progress: str | None = None) -> torch.Tensor:
        """Unit pooled vectors of states given as ``StateTokens`` (what a forward pass computes)."""
        return self._pooled(self.state_rows(states, max_len), progress=progress)

    def question_vectors(self, questions: tuple[Any, ...], max_k: int) -> tuple[torch.Tensor, ...]:
        """``[q, max_k, d]`` slot vectors (options in context mixed in by the gate), ``[q, max_k]``
        true-slot flags and gates, and ``[1 + blocks, q, max_k]`` centers and spreads of a question set
        (see :class:`PriorInputs`; index 0 over ``reference``, then one per language block)."""
        key = (questions, max_k)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        prior = self.model.prior
        slots, true_slot = self._slots(questions, max_k, option_texts)
        with torch.inference_mode():
            on_device = slots.to(prior.anchors.device)
            gate = prior.gate(on_device).cpu()
            center, spread = (t.cpu() for t in prior.standardisers(on_device, true_slot.to(on_device.device)))
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
        option_vectors, true_slot, gate, centers, spreads = self.question_vectors(questions, max_k)
        state_ids, state_mask = pad_rows(self.state_rows(states, max_len), self.rows.pad_id)
        n, q = len(states), len(questions)
        blocks = torch.tensor([self._block(s) for s in states] if len(centers) > 1 else [0] * n, dtype=torch.long)
        pairs, pair_row, pair_slot, pair_center, pair_spread = [], [], [], [], []
        if getattr(self.model, "reader", None) is not None:
            for j, slot, statement in self._read_texts(questions, true_slot, gate):
                pairs += [(statement, s.ids) for s in states]
                pair_row += [i * q + j for i in range(n)]
                pair_slot += [slot] * n
                center, spread = (self._line(statement, option_vectors[j, slot], centers[0, j, slot],
                                             spreads[0, j, slot]) if bool(true_slot[j, slot]) else (0.0, 1.0))
                pair_center += [center] * n
                pair_spread += [spread] * n
        pair_ids, pair_types, pair_mask = (pair_rows(self.rows, pairs) if pairs
                                           else (torch.zeros((0, 0), dtype=torch.long),) * 3)
        return PriorInputs(state_ids, state_mask, torch.arange(n).repeat_interleave(q),
                           option_vectors.repeat(n, 1, 1), true_slot.repeat(n, 1), gate.repeat(n, 1),
                           centers[0].repeat(n, 1), spreads[0].repeat(n, 1),
                           centers[blocks].reshape(n * q, -1), spreads[blocks].reshape(n * q, -1),
                           pair_ids, pair_types, pair_mask,
                           torch.tensor(pair_row, dtype=torch.long), torch.tensor(pair_slot, dtype=torch.long),
                           torch.tensor(pair_center), torch.tensor(pair_spread))

    def _line(self, statement: list[int], vector: torch.Tensor, center: torch.Tensor,
              spread: torch.Tensor) -> tuple[float, float]:
        """``(mean, spread)`` of a read statement's blended answer on the reader's ``reference`` texts
        (:mod:`~jevlaya_lab.decisions.statement_reader`, "Read against reference messages"): its
        standardised cosine to each (``center``, ``spread`` and ``vector``: the statement's own, as the
        prior reads it) and the reader's log-odds, blended; ``(0, 1)`` for a reader without a ``line``.
        Once per statement text, cached in memory and, with a :attr:`store`, on disk."""
        config = self.model.prior.config.reader
        if config.line is None:
            return 0.0, 1.0
        key = (tuple(statement), config)
        hit = self._lines.get(key)
        if hit is not None:
            return hit
        store, stored = self.store, ""
        if store is not None:
            stored = line_key(statement, config, vector, center, spread, self.model.reader)
            kept = store.get(stored)
            if kept is not None:
                return self._lines.put(key, kept)
        if self._reference is None or self._reference[0] != config.reference:
            texts = list(config.reference)
            self._reference = (config.reference, [list(e.ids) for e in self.rows.encode(texts)], self.vectors(texts))
        _, rows, vectors = self._reference
        z = (vectors @ vector.float() - float(center)) / float(spread)
        device = next(self.model.parameters()).device
        said = torch.zeros(len(rows))
        with torch.inference_mode():
            for picked in like_length_chunks(rows, 64):
                ids, types, mask = pair_rows(self.rows, [(statement, rows[i]) for i in picked])
                said[picked] = self.model.reader(self.model.encoder, ids.to(device), types.to(device),
                                                 mask.to(device)).float().cpu()
        blend = config.blend
        blended = blend[0] * z + blend[1] * said + blend[2]
        value = (float(blended.mean()), max(float(blended.std()), 1e-3))
        if store is not None:
            store.put(stored, value)
        return self._lines.put(key, value)

    def _block(self, state: Any) -> int:
        """The language block of a state (``StateTokens``), read from its text as the tokens give it."""
        return int(self.model.prior.language_block(self.rows.decode(state.ids)))

    def _read_texts(self, questions: tuple[Any, ...], true_slot: torch.Tensor,
                    gate: torch.Tensor) -> list[tuple[int, int, list[int]]]:
        """``(question index, slot, token ids)`` of each text the reader reads with every state: a noul
        question's statement (at its true slot), when the reader has a ``blend``, if its gate is below
        :data:`~jevlaya_lab.decisions.statement_reader.READ_BELOW`, and, when the reader reads
        choices, every option of a choice question with an option below it, in its question's
        context (:func:`context_texts`), if it has at most
        :data:`~jevlaya_lab.decisions.statement_reader.READ_MAX_OPTIONS` options; never a question
        whose definition says ``"read": False``. Once per question set, like the slot vectors."""
        reader = self.model.prior.config.reader  # what it reads follows its config, a key of the cache
        hit = self._statements.get((questions, reader))
        if hit is not None:
            return hit
        picked: list[tuple[int, int, str]] = []
        for j, q in enumerate(questions):
            if not q.read:  # the user's "read": False
                continue
            if q.type == "noul" and reader.blend is not None:
                statement = option_texts(q)[1]
                if statement is not None and float(gate[j][true_slot[j]].max()) < READ_BELOW:
                    picked.append((j, int(true_slot[j].nonzero()[0]), statement))
            elif (q.type == "choice" and reader.choices and q.n_options <= READ_MAX_OPTIONS
                  and float(gate[j][:q.n_options].min()) < READ_BELOW):
                texts = context_texts(q)
                picked += [(j, slot, text) for slot, caller in enumerate(q.option_order)
                           if (text := texts[caller]) is not None]
        found = self.rows.encode([t for _, _, t in picked]) if picked else []
        return self._statements.put((questions, reader),
                                    [(j, slot, list(e.ids)) for (j, slot, _), e in zip(picked, found)])
