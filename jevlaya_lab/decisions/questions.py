"""Typed questions: validation and rendering of ``choice`` / ``score`` / ``noul`` definitions.

A questions mapping is an ordered ``dict`` ``question_id -> definition``. :func:`parse_questions`
checks every definition and returns :class:`Question` objects whose option texts are already
rendered, so encoding never has to look at user dicts again.

The rules, each tested in ``tests/decisions``:

- Question ids are non-empty strings or ints (as in Laya; the answer is keyed by the same id).
  ``True``/``False`` are refused (Laya accepts them), because they collide with ``1``/``0``.
  Definitions are dicts with a ``type`` key.
- Unknown keys in a definition are an error (a typo such as ``"critera"`` must not be ignored).
- ``instructions`` must not be empty or blank once rendered.
- Choice labels are non-empty strings, ints, floats (not NaN) or bools; ``None`` is refused as
  in Laya. Labels render with Python ``str()`` (``False`` -> ``"False"``), descriptions and
  instructions that are not strings as one-line JSON, as Laya renders them.
- A score level of ``None`` is refused (as in Laya); an empty string is a valid level text.
- A criterion description of ``None`` counts as empty.
- ``noul`` (Laya 0.4.15's rules): ``criteria`` keys are a subset of ``true``/``false``
  (case-insensitive); a missing, null or empty description uses the default text, any other
  value is used as written. ``labels`` maps exactly ``false`` and ``true`` to two distinct
  non-blank words (stripped). ``option_order`` is not allowed for ``noul``, whose two options
  have a fixed order (Laya ignores it silently; an ignored key would hide a mistake).
- ``read`` (this project's key; Laya has none and refuses it) may be set on a ``choice`` or
  ``noul`` question: ``True`` (the default) lets a checkpoint with a statement reader read the
  statement, or a choice's options, together with each state when they are far from its training
  texts (:mod:`~jevlaya_lab.decisions.statement_reader`); ``False`` never reads them: the answer
  comes from the similarity prior alone, and a call costs one encoder pass over the states (a read
  4-option choice costs 6-7x that on the bundled checkpoints). Only a bool is accepted (``"no"``
  would be truthy), and a ``score`` question, which is never read, refuses the key.
- ``part`` (this project's key, any type): ``"own"`` or ``"open"`` sends the question to a
  checkpoint's own head or to its open part whatever its texts
  (:mod:`~jevlaya_lab.decisions.open_questions`); without it the texts decide. A checkpoint
  without an open part answers every question with its one head, so there the key changes nothing
  (a Router may send a call to either kind). Any other value is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jevlaya_lab.decisions.errors import QuestionError

QUESTION_TYPES: tuple[str, ...] = ("choice", "score", "noul")
TYPE_IDS: dict[str, int] = {name: index for index, name in enumerate(QUESTION_TYPES)}

_ALLOWED_KEYS: dict[str, frozenset[str]] = {
    "choice": frozenset({"type", "instructions", "criteria", "option_order", "read", "part"}),
    "score": frozenset({"type", "instructions", "criteria", "option_order", "part"}),
    "noul": frozenset({"type", "instructions", "criteria", "labels", "read", "part"}),
}
_NOUL_DEFAULT_TEXT = {
    "false": "no, the statement does not hold",
    "true": "yes, the statement holds",
}


@dataclass(frozen=True, slots=True)
class Question:
    """One validated question with its options rendered, in the caller's order."""

    id: str | int
    type: str
    instructions: str
    labels: tuple[Any, ...]
    """Caller-facing option keys: choice labels, score levels ``"0"..``, or ``("false", "true")``."""
    option_texts: tuple[str, ...]
    """Rendered option text per option, caller order (without the mask marker)."""
    option_order: tuple[int, ...]
    """``option_order[slot]`` is the caller index of the option placed in that slot."""
    legend: tuple[str, ...] = ()
    """Score only: the rendered level descriptions."""
    words: tuple[str, ...] = ()
    """Yes/no only: the (false, true) words of ``labels`` when given, shown on the answer."""
    read: bool = True
    """``False``: the statement reader never reads this question (its ``read`` key)."""
    part: str | None = None
    """``"own"`` / ``"open"``: the head that answers it on a checkpoint with an open part (its
    ``part`` key); None lets its texts decide."""

    @property
    def type_id(self) -> int:
        return TYPE_IDS[self.type]

    @property
    def n_options(self) -> int:
        return len(self.labels)

    @property
    def text(self) -> str:
        """The question line of the token row: ``"<type> question: <instructions>"``."""
        return f"{self.type} question: {self.instructions}"


def render_value(value: Any) -> str:
    """Render a user value as text: strings as they are, anything else as one-line JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _fail(qid: Any, message: str) -> QuestionError:
    return QuestionError(f"question {str(qid)!r}: {message}")


def _render(qid: str | int, field: str, value: Any) -> str:
    try:
        return _readable(qid, field, render_value(value))
    except RecursionError:
        raise _fail(qid, f"{field} is nested too deeply to be rendered as text; "
                         "use a string or a flat list or dict") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, QuestionError):
            raise
        raise _fail(qid, f"{field} {value!r:.80} cannot be rendered as JSON ({exc}); "
                         "use strings, numbers, bools, lists or dicts") from None


def _readable(qid: str | int, field: str, text: str) -> str:
    """``text`` when a tokenizer can read it, else a :class:`QuestionError` naming ``field``
    (a lone surrogate such as ``"\\ud800"`` cannot be encoded, and reaching the tokenizer it
    would be an opaque ``TypeError``)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _fail(qid, f"{field}: character {exc.start} ({text[exc.start]!r}) is not valid "
                             "Unicode (a lone surrogate), which no tokenizer can read; clean "
                             "the text first") from None
    return text


def _instructions(qid: str | int, definition: Mapping[str, Any]) -> str:
    if "instructions" not in definition or definition["instructions"] is None:
        raise _fail(qid, "missing 'instructions'; add the question text, "
                         "e.g. {'instructions': 'Which team should handle this?'}")
    text = _render(qid, "instructions", definition["instructions"])
    if not text.strip():
        raise _fail(qid, f"instructions {definition['instructions']!r} is empty; "
                         "write the question the model should answer")
    return text


def _check_label(qid: str | int, label: Any) -> None:
    if isinstance(label, str):
        if not label.strip():
            raise _fail(qid, f"label {label!r} is empty; use a non-blank string")
        return
    if label is None:
        raise _fail(qid, "label None is not allowed: it would read as the text 'None' but answer "
                         "as null; use a string such as 'none'")
    if isinstance(label, (bool, int)):
        return
    if isinstance(label, float):
        if math.isnan(label):
            raise _fail(qid, "label nan is not allowed (NaN never equals itself); use a string")
        return
    raise _fail(qid, f"label {label!r} of type {type(label).__name__} is not a hashable scalar; "
                     "use a str, int, float, bool or None")


def _choice_options(qid: str | int, criteria: Any) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    if isinstance(criteria, Mapping):
        pairs = list(criteria.items())
    elif isinstance(criteria, (list, tuple)):
        pairs = [(label, None) for label in criteria]
    else:
        raise _fail(qid, f"criteria must be a dict label -> description or a list of labels, "
                         f"got {type(criteria).__name__} {criteria!r}")
    if not pairs:
        raise _fail(qid, "criteria is empty; give at least one option label")
    seen: set[Any] = set()
    labels, texts = [], []
    for label, description in pairs:
        _check_label(qid, label)
        if label in seen:
            raise _fail(qid, f"duplicate label {label!r} (1, 1.0 and True count as the same "
                             "label); make every label distinct")
        seen.add(label)
        # Python str(), as laya renders labels (False -> "False")
        label_text = _readable(qid, f"label {label!r}", str(label))
        desc = "" if description is None else _render(qid, f"criteria[{label!r}]", description)
        labels.append(label)
        texts.append(f"{label_text}: {desc}" if desc else label_text)
    return tuple(labels), tuple(texts)


def _score_options(qid: str | int, criteria: Any) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    if not isinstance(criteria, (list, tuple)):
        raise _fail(qid, f"score criteria must be a list of level descriptions (level 0 first), "
                         f"got {type(criteria).__name__} {criteria!r}")
    if not criteria:
        raise _fail(qid, "criteria is empty; give at least one level description, level 0 first")
    if any(level is None for level in criteria):
        raise _fail(qid, f"score level {list(criteria).index(None)} is None; give every level a "
                         "description (level 0 first)")
    legend = tuple(_render(qid, f"criteria[{i}]", level) for i, level in enumerate(criteria))
    labels = tuple(str(i) for i in range(len(legend)))
    texts = tuple(f"level {i}: {text}" for i, text in enumerate(legend))
    return labels, texts, legend


def _noul_criteria(qid: str | int, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(qid, f"noul criteria must be a dict with optional 'true' / 'false' descriptions, "
                         f"got {type(value).__name__} {value!r}; or leave it out")
    out: dict[str, Any] = {}
    for key, item in value.items():
        norm = key.lower() if isinstance(key, str) else None
        if norm not in ("true", "false"):
            raise _fail(qid, f"criteria key {key!r} is not allowed; use only 'true' and 'false' "
                             "(either or both)")
        if norm in out:
            raise _fail(qid, f"criteria names {norm!r} twice (keys are case-insensitive); keep one")
        out[norm] = item
    return out


def _noul_labels(qid: str | int, value: Any) -> dict[str, str]:
    words = {k: _readable(qid, f"labels[{k!r}]", v.strip()) for k, v in value.items()
             if isinstance(v, str)} if isinstance(value, Mapping) else {}
    if (not isinstance(value, Mapping) or set(value) != {"false", "true"} or len(words) != 2
            or not all(words.values()) or words["false"] == words["true"]):
        raise _fail(qid, f"labels = {value!r} must map exactly 'false' and 'true' to two distinct "
                         "non-blank words, e.g. {'false': 'no', 'true': 'yes'}")
    return words


def _noul_options(qid: str | int, definition: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    words = {"false": "false", "true": "true"}
    if definition.get("labels") is not None:
        words = _noul_labels(qid, definition["labels"])
    texts = dict(_NOUL_DEFAULT_TEXT)
    if definition.get("criteria") is not None:
        for key, desc in _noul_criteria(qid, definition["criteria"]).items():
            if desc is not None and desc != "":  # any other value is used as written
                texts[key] = _render(qid, f"criteria[{key!r}]", desc)
    return ("false", "true"), tuple(f"{words[k]}: {texts[k]}" for k in ("false", "true"))


def _option_order(qid: str | int, value: Any, k: int) -> tuple[int, ...]:
    if value is None:
        return tuple(range(k))
    if not isinstance(value, (list, tuple)) or any(
        isinstance(i, bool) or not isinstance(i, int) for i in value
    ):
        raise _fail(qid, f"option_order {value!r} must be a list of option indices")
    if sorted(value) != list(range(k)):
        raise _fail(qid, f"option_order {list(value)!r} is not a permutation of 0..{k - 1}; "
                         f"list every option index exactly once, e.g. {list(range(k))[::-1]}")
    return tuple(value)


def _read(qid: str | int, definition: Mapping[str, Any]) -> bool:
    value = definition.get("read", True)
    if not isinstance(value, bool):
        raise _fail(qid, f"read must be True or False, got {type(value).__name__} {value!r}; "
                         "write 'read': False to answer without the statement reader")
    return value


PARTS = ("own", "open")
"""The values of a question's ``part`` key."""


def _part(qid: str | int, definition: Mapping[str, Any]) -> str | None:
    value = definition.get("part")
    if value is not None and value not in PARTS:
        raise _fail(qid, f"part must be 'own' or 'open', got {type(value).__name__} {value!r}; "
                         "write 'part': 'own' for the checkpoint's own head, 'open' for its open part, "
                         "or leave it out to let the question's texts decide")
    return value


def parse_question(qid: Any, definition: Any) -> Question:
    """Validate one definition and render its options; raises :class:`QuestionError`."""
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or (isinstance(qid, str) and not qid.strip()):
        raise _fail(qid, f"question ids must be non-empty strings or ints, got {type(qid).__name__} {qid!r}")
    if not isinstance(definition, Mapping):
        raise _fail(qid, f"definition must be a dict with a 'type', got "
                         f"{type(definition).__name__} {definition!r}")
    qtype = definition.get("type")
    if qtype not in QUESTION_TYPES:
        raise _fail(qid, f"type {qtype!r} is not one of {list(QUESTION_TYPES)}; "
                         "set 'type' to 'choice', 'score' or 'noul'")
    if qtype == "score" and "read" in definition:
        raise _fail(qid, "read is not allowed for a score question: the statement reader never reads "
                         "score levels, so the key would do nothing; remove it")
    unknown = sorted(map(str, set(definition) - _ALLOWED_KEYS[qtype]))
    if unknown:
        raise _fail(qid, f"unknown key(s) {unknown} for a {qtype} question; "
                         f"allowed keys are {sorted(_ALLOWED_KEYS[qtype])}")
    instructions = _instructions(qid, definition)
    legend: tuple[str, ...] = ()
    if qtype == "noul":
        labels, texts = _noul_options(qid, definition)
        order: tuple[int, ...] = (0, 1)
    else:
        if "criteria" not in definition or definition["criteria"] is None:
            raise _fail(qid, f"missing 'criteria'; a {qtype} question needs its options")
        if qtype == "choice":
            labels, texts = _choice_options(qid, definition["criteria"])
        else:
            labels, texts, legend = _score_options(qid, definition["criteria"])
        order = _option_order(qid, definition.get("option_order"), len(labels))
    words: tuple[str, ...] = ()
    if qtype == "noul" and definition.get("labels") is not None:
        named = _noul_labels(qid, definition["labels"])
        words = (named["false"], named["true"])
    return Question(qid, qtype, instructions, labels, texts, order, legend, words, _read(qid, definition),
                    _part(qid, definition))


def parse_questions(questions: Any) -> tuple[Question, ...]:
    """Validate a ``question_id -> definition`` dict, keeping its order.

    Raises ``TypeError`` when ``questions`` is not a dict and :class:`QuestionError` (a
    ``ValueError``) naming the question id for a bad definition. Already parsed questions
    (a non-empty tuple of :class:`Question`) pass through unchanged.
    """
    if isinstance(questions, tuple) and questions and all(isinstance(q, Question) for q in questions):
        return questions
    if not isinstance(questions, Mapping):
        raise TypeError(f"questions must be a dict question_id -> definition, got "
                        f"{type(questions).__name__}; e.g. {{'intent': {{'type': 'choice', "
                        "'instructions': '...', 'criteria': ['a', 'b']}}")
    return tuple(parse_question(qid, definition) for qid, definition in questions.items())
