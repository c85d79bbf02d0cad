"""Token rows for (state, question) pairs: budgets, truncation, option markers, collation.

One row per (state, question)::

    [CLS] "<type> question: <instructions>" [SEP] ([MASK] " option")*k [SEP] state [SEP]

The question part ("head") depends only on the question and ``head_max_len``, so it is built once
per call (:func:`encode_questions`); every state is tokenised once per call
(:func:`tokenize_states`) and sliced per row to the room its head leaves under ``max_len``
(:func:`build_batch`). :func:`encode_requests` composes the three and is what training uses.

Budget rules (Laya 0.4.15's, checked against it by ``tests/decisions/test_laya_parity.py``):

- Each option's text is capped at 48 tokens, then its ``[MASK]`` marker is prefixed. When the
  options leave fewer than 16 tokens of ``head_max_len``, every option (marker included) is cut
  to ``max(4, (head_max_len - 16) // k)`` tokens. The instruction is cut to
  ``max(8, head_max_len - option_tokens)`` (``[CLS]`` and the two ``[SEP]`` are not counted).
- The state fills the rest of ``max_len``: a str/dict keeps its start, a conversation (list
  state) the last tokens of its serialised JSON (it may start mid-turn).
- Only an option marker at or past ``max_len`` is an error (:class:`BudgetError`); otherwise a
  row too long for ``max_len`` is cut there.
- Literal mask-token text inside user strings is replaced by a space (so user text cannot forge
  an option marker); other special-token text is left as written.
- ``usage["truncated"]`` / ``truncated_questions`` report rows that lost state tokens (cut
  options or instructions do not count); ``state_tokens_dropped`` is the most state tokens any
  row of that state lost. ``usage["options"]`` appears only when the budget left two options of
  a question with the same tokens.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from jevlaya_lab._unreadable import first_unreadable
from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.errors import BudgetError, StateError, TokenizerError
from jevlaya_lab.decisions.questions import Question, parse_questions

OPTION_CAP = 48
"""Most tokens of one option's text; its ``[MASK]`` marker comes on top."""
HEAD_STATE_RESERVE = 16
"""When options leave fewer tokens than this of ``head_max_len``, options are squeezed."""
MIN_OPTION_TOKENS = 4
MIN_INSTRUCTION_TOKENS = 8
ROWS_PER_CHUNK = 80
"""(state, question) rows per forward pass when a caller gives no batch size (the Agent's
predict_batch, adaptation's features): 16 states of 5 questions. A pass's transient activations
set a process's peak memory, and smaller passes pad less: 10,000 tickets x 5 questions on mini-en
peaked at 653 MB with 256 and at 623 MB with 80, in the same time (189-192 s on one busy thread)."""


MAX_STATE_DEPTH = 100
"""Most levels of lists/dicts a state may nest (a conversation or record is a few levels)."""


def check_state(state: Any, index: int = 0) -> None:
    """Raise a ``TypeError`` naming the state's index unless it is a str, dict or list, and a
    :class:`StateError` when the encoder could not read it (:func:`check_state_text`)."""
    if isinstance(state, (str, dict, list)):
        check_state_text(state, index)
        return
    if state is None:
        raise TypeError(f"state {index} is None; pass a str, a dict or a list (a conversation, "
                        "oldest turn first)")
    raise TypeError(f"state {index} is a {type(state).__name__} ({state!r:.60}); pass a str, "
                    "a dict or a list (a conversation, oldest turn first)")


def check_state_text(state: Any, index: int = 0) -> None:
    """Raise :class:`StateError` naming the place when a string of ``state`` (a value or a
    key) is not valid Unicode, or ``state`` nests deeper than ``MAX_STATE_DEPTH``. Without this
    a lone surrogate reaches the tokenizer as an opaque ``TypeError`` and a deep state the JSON
    encoder as a ``RecursionError``; the walk is iterative, so any depth is reported."""
    found = first_unreadable(state, MAX_STATE_DEPTH)
    if found is None:
        return
    if found.char is not None:
        raise StateError(
            f"state {index}{found.where}: character {found.index} "
            f"({found.char!r}) is not valid Unicode (a lone surrogate), which "
            "no tokenizer can read; clean the text first, e.g. "
            "text.encode('utf-8', 'replace').decode('utf-8')")
    raise StateError(f"state {index}{found.where}: nested deeper than MAX_STATE_DEPTH="
                     f"{MAX_STATE_DEPTH} levels of lists/dicts; flatten it (or pass the "
                     "deep part as a string)")


def serialize_state(state: Any, index: int = 0) -> str:
    """Render a state as the text the model reads: strings as-is, dicts/lists as one-line JSON."""
    check_state(state, index)
    if isinstance(state, str):
        return state
    try:
        return _dumps(state)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state {index} cannot be serialised as JSON ({exc}); use only str, "
                        "numbers, bools, None, lists and dicts with string keys") from None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class RowTokenizer:
    """A thread-safe view of a transformers fast tokenizer for building rows.

    It keeps a private copy of the Rust tokenizer with truncation and padding turned off (a
    saved ``tokenizer.json`` may carry both), so encoding never mutates shared state and can run
    from many threads at once.
    """

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerError(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; "
                                 "load it with AutoTokenizer.from_pretrained(..., use_fast=True)")
        mask = tokenizer.mask_token_id
        if mask is None:
            raise TokenizerError("tokenizer has no mask token; option markers need one "
                                 "(set tokenizer.mask_token, e.g. '[MASK]')")
        cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        if cls_id is None or sep_id is None:
            raise TokenizerError("tokenizer needs a cls/bos and a sep/eos token to build rows")
        from tokenizers import Tokenizer

        self._backend = Tokenizer.from_str(backend.to_str())
        self._backend.no_truncation()
        self._backend.no_padding()
        self.mask_id: int = mask
        self.cls_id: int = cls_id
        self.sep_id: int = sep_id
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._mask_text: str = tokenizer.mask_token

    def clean(self, text: str) -> str:
        """Replace literal mask-token text with a space (a user string cannot forge a marker)."""
        return text.replace(self._mask_text, " ") if self._mask_text in text else text

    def encode(self, texts: list[str]) -> list[Any]:
        """Tokenise cleaned texts without special tokens; returns ``tokenizers.Encoding`` objects."""
        return self._backend.encode_batch([self.clean(t) for t in texts], add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens dropped (e.g. to tell a state's language)."""
        return str(self._backend.decode(list(ids), skip_special_tokens=True))


_ROW_TOKENIZERS: "weakref.WeakKeyDictionary[Any, RowTokenizer]" = weakref.WeakKeyDictionary()
_ROW_TOKENIZERS_LOCK = threading.Lock()


def row_tokenizer(tokenizer: Any) -> RowTokenizer:
    """The cached :class:`RowTokenizer` for a transformers tokenizer (or the adapter itself)."""
    if isinstance(tokenizer, RowTokenizer):
        return tokenizer
    with _ROW_TOKENIZERS_LOCK:
        try:
            return _ROW_TOKENIZERS[tokenizer]
        except KeyError:
            adapter = RowTokenizer(tokenizer)
            _ROW_TOKENIZERS[tokenizer] = adapter
            return adapter
        except TypeError:  # not weak-referenceable: build one per call
            return RowTokenizer(tokenizer)


@dataclass(frozen=True, slots=True)
class QuestionHead:
    """The question part of a row: ids up to the ``[SEP]`` after the options."""

    question: Question
    ids: tuple[int, ...]
    marker_positions: tuple[int, ...]
    collapsed: dict[str, Any] | None = None
    """``{"total", "distinct", "tokens_per_option"}`` when the budget left two options the same
    tokens (reported in ``usage["options"]``), else ``None``."""


@dataclass(frozen=True, slots=True)
class StateTokens:
    """One state tokenised once; a conversation (list state) keeps its newest tokens when cut."""

    ids: tuple[int, ...]
    keep_end: bool = False

    def slice(self, room: int) -> tuple[int, ...]:
        """The tokens a row with ``room`` free positions keeps (see the module docstring)."""
        n = len(self.ids)
        if n <= room:
            return self.ids
        if room <= 0:
            return ()
        return self.ids[n - room:] if self.keep_end else self.ids[:room]


def encode_questions(tokenizer: Any, questions: Any, *, head_max_len: int) -> tuple[QuestionHead, ...]:
    """Build the head of every question once, applying the option and instruction caps."""
    check_budget("head_max_len", head_max_len)
    tok = row_tokenizer(tokenizer)
    empty = isinstance(questions, (Mapping, tuple)) and not questions
    parsed = () if empty else parse_questions(questions)
    texts: list[str] = []
    for q in parsed:
        texts.append(q.text)
        texts.extend(" " + q.option_texts[i] for i in q.option_order)
    encodings = iter(tok.encode(texts)) if texts else iter(())
    heads = []
    for q in parsed:
        text_ids = next(encodings).ids
        options = [[tok.mask_id, *next(encodings).ids[:OPTION_CAP]] for _ in q.option_order]
        k = len(options)
        per = None
        if head_max_len - sum(map(len, options)) < HEAD_STATE_RESERVE:
            per = max(MIN_OPTION_TOKENS, (head_max_len - HEAD_STATE_RESERVE) // k)
            options = [o[:per] for o in options]
        option_tokens = sum(map(len, options))
        text_budget = max(MIN_INSTRUCTION_TOKENS, head_max_len - option_tokens)
        ids = [tok.cls_id, *text_ids[:text_budget], tok.sep_id]
        markers = []
        for option in options:
            markers.append(len(ids))
            ids.extend(option)
        ids.append(tok.sep_id)
        distinct = len({tuple(o) for o in options})
        collapsed = ({"total": k, "distinct": distinct, "tokens_per_option": per}
                     if distinct < k else None)
        heads.append(QuestionHead(q, tuple(ids), tuple(markers), collapsed))
    return tuple(heads)


def tokenize_states(tokenizer: Any, states: Sequence[Any]) -> list[StateTokens]:
    """Tokenise every state once (one batched call); validates state types."""
    tok = row_tokenizer(tokenizer)
    texts = [serialize_state(state, index) for index, state in enumerate(states)]
    encodings = tok.encode(texts) if texts else []
    return [StateTokens(tuple(e.ids), isinstance(state, list)) for e, state in zip(encodings, states)]


@dataclass
class EncodedBatch:
    """Padded rows for a group of states, a state's rows adjacent in question order."""

    input_ids: torch.Tensor
    """``[rows, length]`` token ids, padded with the tokenizer's pad id."""
    attention_mask: torch.Tensor
    """``[rows, length]`` 1 for real tokens."""
    type_ids: torch.Tensor
    """``[rows]`` question type per row (0 choice, 1 score, 2 noul)."""
    option_positions: torch.Tensor
    """``[rows, max_k]`` index of each option marker (slot order); 0 in padded slots."""
    option_mask: torch.Tensor
    """``[rows, max_k]`` True for real option slots."""
    questions: tuple[Question, ...]
    usage: list[dict[str, Any]] = field(default_factory=list)
    """Per state: input/output tokens and truncation statistics."""

    @property
    def n_states(self) -> int:
        return len(self.usage)

    def to(self, device: torch.device | str) -> EncodedBatch:
        """The same batch with its tensors on ``device``."""
        move = {name: getattr(self, name).to(device) for name in
                ("input_ids", "attention_mask", "type_ids", "option_positions", "option_mask")}
        return EncodedBatch(**move, questions=self.questions, usage=self.usage)

    def take(self, rows: torch.Tensor) -> EncodedBatch:
        """The tensors of ``rows`` (indices), padded only to the longest of them (for the model;
        ``questions`` and ``usage`` stay those of the whole batch)."""
        length = int(self.attention_mask[rows].sum(dim=1).max()) if len(rows) else 0
        return EncodedBatch(self.input_ids[rows, :length], self.attention_mask[rows, :length],
                            self.type_ids[rows], self.option_positions[rows], self.option_mask[rows],
                            questions=self.questions, usage=self.usage)


LENGTH_SLACK = 0.1
"""A row joins a length group while it needs at most this share of the group's length as padding."""


def length_groups(lengths: torch.Tensor, slack: float = LENGTH_SLACK) -> list[torch.Tensor]:
    """Row indices in groups of similar length (longest first), each padded to its own longest.

    One padded batch of a call's rows spends the padding of its shortest rows on every layer
    (choice questions with four options make rows ~20 tokens longer than yes/no ones); grouping
    the rows by length keeps that waste under ``slack`` per row, for one more forward pass per
    group (a fraction of a millisecond of Python, against milliseconds per row of matrix work).
    """
    order = torch.argsort(lengths, descending=True, stable=True)
    ordered = lengths[order].tolist()
    groups, start = [], 0
    for i, n in enumerate(ordered):
        if ordered[start] - n > slack * ordered[start]:
            groups.append(order[start:i])
            start = i
    if ordered:
        groups.append(order[start:])
    return groups


def build_batch(tokenizer: Any, states: Sequence[StateTokens], heads: Sequence[QuestionHead], *,
                max_len: int) -> EncodedBatch:
    """Assemble, pad and collate the rows of ``states`` x ``heads``."""
    check_budget("max_len", max_len)
    tok = row_tokenizer(tokenizer)
    rooms = []
    for head in heads:
        fitting = sum(1 for position in head.marker_positions if position < max_len)
        if fitting < len(head.marker_positions):
            q = head.question
            raise BudgetError(
                f"max_len={max_len} is too small for question {q.id!r}: only {fitting} of its "
                f"{q.n_options} option markers fall inside it (the question and its options take "
                f"{len(head.ids)} tokens); raise max_len, lower head_max_len or use fewer/shorter options")
        rooms.append(max(0, max_len - len(head.ids) - 1))
    collapsed = {h.question.id: h.collapsed for h in heads if h.collapsed}
    rows: list[list[int]] = []
    usage = []
    for state in states:
        input_tokens, dropped, cut = 0, 0, []
        for head, room in zip(heads, rooms):
            kept = state.slice(room)
            row = [*head.ids, *kept, tok.sep_id][:max_len]
            rows.append(row)
            input_tokens += len(row)
            lost = len(state.ids) - len(kept)
            dropped = max(dropped, lost)
            if lost:
                cut.append(head.question.id)
        usage.append({
            "input_tokens": input_tokens,
            "output_tokens": 0,
            "state_tokens": len(state.ids),
            "state_tokens_dropped": dropped,
            "truncated": bool(cut),
            "truncated_questions": cut,
        })
        if collapsed:
            usage[-1]["options"] = {qid: dict(info) for qid, info in collapsed.items()}
    length = max((len(r) for r in rows), default=0)
    max_k = max((len(h.marker_positions) for h in heads), default=0)
    ids = torch.tensor([r + [tok.pad_id] * (length - len(r)) for r in rows],
                       dtype=torch.long).reshape(len(rows), length)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    positions = torch.zeros((len(heads), max_k), dtype=torch.long)
    option_mask = torch.zeros((len(heads), max_k), dtype=torch.bool)
    for j, head in enumerate(heads):
        k = len(head.marker_positions)
        positions[j, :k] = torch.tensor(head.marker_positions, dtype=torch.long)
        option_mask[j, :k] = True
    n = len(states)
    return EncodedBatch(
        input_ids=ids,
        attention_mask=mask,
        type_ids=torch.tensor([h.question.type_id for h in heads] * n, dtype=torch.long),
        option_positions=positions.repeat(n, 1),
        option_mask=option_mask.repeat(n, 1),
        questions=tuple(h.question for h in heads),
        usage=usage,
    )


def encode_requests(tokenizer: Any, states: Sequence[Any], questions: Mapping[str, Any] | tuple[Question, ...],
                    *, max_len: int, head_max_len: int) -> EncodedBatch:
    """Encode every (state, question) pair of a call into one padded batch.

    ``questions`` is a questions dict (validated here) or already parsed questions. Each state
    is tokenised once and sliced per row; see the module docstring for the budget rules.
    """
    check_budget("max_len", max_len)
    heads = encode_questions(tokenizer, questions, head_max_len=head_max_len)
    return build_batch(tokenizer, tokenize_states(tokenizer, states), heads, max_len=max_len)
