"""Schema-driven decisions: ``decide`` / ``decide_batch`` turn a JSON schema (or a pydantic model)
into typed questions, ask them through the runner's normal ``predict`` / ``predict_batch`` (so the
whole hook lifecycle runs, with the generated questions in ``ctx.questions``) and return the
answers as schema values.

This is Laya 0.4.15's ``decide`` / ``decide_batch``, rebuilt from its observed
behaviour. The question texts are the ones Laya generates, so a checkpoint gives the same values
in both libraries (``tests/decisions/test_laya_parity.py`` compares them).

**The schema subset.** The top level is an object with non-empty ``properties`` (at most
:data:`MAX_PROPERTIES`); every property becomes one question, keyed by the property name:

- ``enum`` (at most :data:`MAX_OPTIONS` values) or ``const`` -> a ``choice`` whose labels are the
  values rendered with ``str()`` (``None`` as ``"null"``); the value returned is the enum value
  itself (``1`` stays an int). Labels that render alike (``1`` and ``"1"``) are refused. ``enum``
  wins over ``type`` (``{"type": "integer", "enum": [2, 5]}`` is a choice).
- ``"type": "boolean"`` -> a ``noul``; the value is ``True`` when P(true) >= 0.5.
- ``"type": "integer"`` or ``"number"`` with integer ``minimum`` and ``maximum`` (at most
  :data:`MAX_SCORE_LEVELS` levels) -> a ``score`` over the levels ``minimum..maximum``; the value
  is the most probable level (the first one on a tie), not the rounded expectation.
- ``$ref`` to ``#/$defs/<name>`` or ``#/definitions/<name>`` (the target's keys, overridden by the
  property's own), a one-element ``allOf``, an ``Optional`` union (``anyOf`` / ``oneOf`` with one
  non-null branch, or ``"type": [<t>, "null"]``) are read through.
- Free strings, arrays, nested objects, other unions and anything else raise :class:`SchemaError`
  naming ``properties.<name>`` and what to use instead. ``required``, ``default``, ``title`` and
  other annotations are ignored.

A property's ``description`` is the question's instructions; without one the instructions are
Laya's: ``What is `<name>`?``, ``Score `<name>` from <min> to <max>``, ``Is `<name>` true?``.

Decisions where Laya 0.4.15 and this module differ, or where Laya is silent:

- The description is read from the property and from ``allOf`` / union branches, never from a
  ``$ref`` target: a shared definition's description describes the type, not this field (as
  Laya). A blank description falls back to the default text (Laya sends it as written, and the
  question validator here refuses blank instructions).
- A pydantic model (v2: a class or an instance) is read through ``model_json_schema()``; the
  values come back as a plain ``dict`` (as in Laya), ready for ``Model(**values)`` once nothing
  abstained.
- ``min_confidence`` is passed to the runner's ``predict``, which gates every answer (the
  ``abstention`` fields, so ``on_predict_end`` hooks see them); a field whose answer is
  ``low_confidence`` comes back as ``None`` and its answer stays in the details.
- ``decide_batch`` on a Router (anything with ``route_batch``) copies the routing pins and token
  budgets (``model``, ``task``, ``lang``, ``lang_guess``, ``max_len``, ``head_max_len``) onto
  every request, as Laya does; every other keyword goes to ``predict_batch``. The Agent's
  ``predict_batch`` takes no ``lang`` here (Laya uses it for per-language temperatures, which this
  project does not have), so ``lang=`` on an Agent is a ``TypeError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jevlaya_lab.decisions.errors import SchemaError

__all__ = ["MAX_OPTIONS", "MAX_PROPERTIES", "MAX_SCORE_LEVELS", "ROUTING_KEYS", "DecisionResult",
           "SchemaError", "SchemaField", "decide", "decide_batch", "plan_schema", "questions_from_schema"]

MAX_PROPERTIES = 32
"""At most this many properties (questions) per schema."""
MAX_OPTIONS = 32
"""At most this many ``enum`` values per choice."""
MAX_SCORE_LEVELS = 10
"""At most this many integer levels (``maximum - minimum + 1``) per score."""
ROUTING_KEYS = ("model", "task", "lang", "lang_guess", "max_len", "head_max_len")
"""Keywords ``decide_batch`` copies onto every Router request instead of passing them on."""

_LOCAL_REF_PREFIXES = (("#/$defs/", "$defs"), ("#/definitions/", "definitions"))


@dataclass(frozen=True)
class SchemaField:
    """One planned property: its question and how an answer becomes the schema's value."""

    name: str
    kind: str
    """``"choice"``, ``"score"`` or ``"noul"``."""
    question: dict[str, Any]
    values: dict[Any, Any] = field(default_factory=dict)
    """Choice only: option label -> the enum value it stands for."""
    minimum: int | None = None
    """Score only: the value of level 0."""

    def value(self, answer: Mapping[str, Any]) -> Any:
        """The schema value an answer of this field's question stands for."""
        if self.kind == "choice":
            label = answer.get("choice")
            try:
                return self.values.get(label, label)
            except TypeError:  # an unhashable label from a hand-made (skipped) answer
                return label
        if self.kind == "noul":
            return float(answer.get("noul", 0.0)) >= 0.5
        probabilities = answer.get("probabilities")
        base = self.minimum or 0
        if isinstance(probabilities, Mapping) and probabilities:
            numbers = [float(p) for p in probabilities.values()]
            return base + numbers.index(max(numbers))
        return base + round(float(answer.get("score", 0.0)))


@dataclass
class DecisionResult:
    """What ``decide(..., return_details=True)`` returns (Laya's field names and order).

    ``values`` are the schema values (or the raw answers when ``questions=`` was passed); the
    other maps are keyed by question id over every answer: ``confidence`` (the answer's own
    ``confidence``, 0.0 when it has none), ``probabilities`` (a noul as ``{"false", "true"}``),
    ``answer_confidence`` (the top probability the ``min_confidence`` gate compares; ``None``
    when the answer carries no usable number, which is not the same as 0.0), ``answers`` (the
    raw answers), and the result's ``usage`` and ``routing`` (``None`` on an Agent).
    """

    values: dict[str, Any]
    confidence: dict[str, float]
    probabilities: dict[str, dict[str, Any]]
    answers: dict[str, Any]
    usage: dict[str, Any] | None = None
    routing: dict[str, Any] | None = None
    answer_confidence: dict[str, float | None] = field(default_factory=dict)


# -- planning ---------------------------------------------------------------------------------------
def _json_schema(schema: Any) -> Any:
    """A dict as is; a pydantic (v2) model class or instance as its JSON schema."""
    if isinstance(schema, Mapping):
        return schema
    to_schema = getattr(schema, "model_json_schema", None)
    if callable(to_schema):
        return to_schema()
    raise SchemaError(f"schema: expected a JSON schema dict or a pydantic model (class or instance), "
                      f"got {type(schema).__name__}; pass questions= for hand-written questions")


def plan_schema(schema: Any) -> list[SchemaField]:
    """Check ``schema`` (a JSON schema dict or a pydantic model) and plan one field per property."""
    schema = _json_schema(schema)
    if schema.get("type", "object") != "object" or "properties" not in schema:
        raise SchemaError("schema: the top level must be an object with 'properties' "
                          "(one property per decision); wrap single values in an object")
    properties = schema["properties"]
    if not isinstance(properties, Mapping) or not properties:
        raise SchemaError("schema: 'properties' must be a non-empty object mapping each field to its schema")
    if len(properties) > MAX_PROPERTIES:
        raise SchemaError(f"schema: {len(properties)} properties is more than MAX_PROPERTIES="
                          f"{MAX_PROPERTIES}; split the schema over several decide() calls")
    return [_plan_field(name, node, schema) for name, node in properties.items()]


def questions_from_schema(schema: Any) -> dict[str, dict[str, Any]]:
    """The typed questions ``decide`` asks for ``schema`` (a JSON schema dict or pydantic model)."""
    return {f.name: f.question for f in plan_schema(schema)}


def _plan_field(name: str, node: Any, root: Mapping[str, Any]) -> SchemaField:
    where = f"properties.{name}"
    if not isinstance(node, Mapping):
        raise SchemaError(f"{where}: expected a schema object, got {type(node).__name__}; "
                          "write e.g. {\"type\": \"boolean\"} or {\"enum\": [...]}")
    description, resolved = _read_through(node, root, where)
    if "enum" in resolved or "const" in resolved:
        return _choice(name, resolved, description, where)
    kind = resolved.get("type")
    if kind == "boolean":
        return SchemaField(name, "noul", {"type": "noul", "instructions": _instructions(
            description, f"Is `{name}` true?")})
    if kind in ("integer", "number"):
        return _score(name, resolved, description, where)
    if kind == "string":
        raise SchemaError(f"{where}: a free string has no fixed options to choose from; give it an "
                          "'enum' of the allowed values, or make it a boolean")
    if kind == "array":
        raise SchemaError(f"{where}: arrays are not supported; ask one property per element")
    if kind == "object":
        raise SchemaError(f"{where}: nested objects are not supported; flatten them into top-level properties")
    raise SchemaError(f"{where}: unsupported schema {dict(node)!r}; use an 'enum', a boolean or an "
                      "integer with 'minimum' and 'maximum'")


def _read_through(node: Mapping[str, Any], root: Mapping[str, Any], where: str) -> tuple[Any, dict[str, Any]]:
    """Resolve ``$ref``, one-element ``allOf`` and ``Optional`` unions; return (description, node)."""
    current = dict(node)
    description = None
    followed: set[str] = set()
    while True:
        if description is None and current.get("description") not in (None, ""):
            description = current["description"]
        if "$ref" in current:
            ref = current.pop("$ref")
            if isinstance(ref, str) and ref in followed:
                raise SchemaError(f"{where}: $ref {ref!r} refers to itself; flatten the schema")
            target = _local_ref(ref, root, where)
            followed.add(ref)
            # the target's description describes the shared type, not this field
            current = {**{k: v for k, v in target.items() if k != "description"}, **current}
            continue
        if "allOf" in current:
            branches = current.pop("allOf")
            if not isinstance(branches, list) or len(branches) != 1 or not isinstance(branches[0], Mapping):
                raise SchemaError(f"{where}: unsupported schema {dict(node)!r}; only a one-element "
                                  "'allOf' is read (merge the parts into one schema)")
            current = {**current, **branches[0]}
            continue
        union = next((key for key in ("anyOf", "oneOf") if key in current), None)
        if union is not None:
            branches = current.pop(union)
            branches = branches if isinstance(branches, list) else []
            kept = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
            if len(kept) != 1 or not isinstance(kept[0], Mapping):
                raise SchemaError(f"{where}: '{union}' has {len(kept)} non-null branches; only an "
                                  "Optional (one schema plus null) can be answered from fixed options")
            current = {**current, **kept[0]}
            continue
        if isinstance(current.get("type"), list):
            kinds = [t for t in current["type"] if t != "null"]
            if len(kinds) > 1:
                raise SchemaError(f"{where}: 'type' lists {kinds}; unions of types are not "
                                  "supported, keep one type (plus 'null')")
            if not kinds:
                raise SchemaError(f"{where}: unsupported schema {dict(node)!r}; a field that can only "
                                  "be null asks nothing")
            current["type"] = kinds[0]
        return description, current


def _local_ref(ref: Any, root: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    for prefix, section in _LOCAL_REF_PREFIXES:
        if isinstance(ref, str) and ref.startswith(prefix):
            target = (root.get(section) or {}).get(ref[len(prefix):])
            if isinstance(target, Mapping):
                return target
    raise SchemaError(f"{where}: $ref {ref!r} does not name an entry of this schema's '$defs' or "
                      "'definitions'; inline the definition or add it there")


def _instructions(description: Any, default: str) -> Any:
    if isinstance(description, str) and not description.strip():
        return default
    return default if description is None else description


def _label(value: Any) -> str:
    return "null" if value is None else str(value)


def _choice(name: str, node: Mapping[str, Any], description: Any, where: str) -> SchemaField:
    if "enum" in node:
        options = node["enum"]
        if not isinstance(options, list):
            raise SchemaError(f"{where}: 'enum' must be a list of values, got {type(options).__name__}")
    else:
        options = [node["const"]]
    if not options:
        raise SchemaError(f"{where}: 'enum' is empty; list at least one value")
    if len(options) > MAX_OPTIONS:
        raise SchemaError(f"{where}: {len(options)} enum values is more than MAX_OPTIONS={MAX_OPTIONS}; "
                          "group them or split the question")
    values = {_label(v): v for v in options}
    if len(values) != len(options):
        raise SchemaError(f"{where}: enum values {options!r} render to the same option label; make "
                          "every value distinct as text (1 and '1' collide)")
    question = {"type": "choice", "instructions": _instructions(description, f"What is `{name}`?"),
                "criteria": dict.fromkeys(values)}
    return SchemaField(name, "choice", question, values)


def _score(name: str, node: Mapping[str, Any], description: Any, where: str) -> SchemaField:
    low, high = node.get("minimum"), node.get("maximum")
    if not (isinstance(low, int) and isinstance(high, int)) or isinstance(low, bool) or isinstance(high, bool):
        raise SchemaError(f"{where}: a number becomes a score only with integer 'minimum' and "
                          f"'maximum' (got {low!r} and {high!r}); add both, e.g. 0 and 3")
    if high < low:
        raise SchemaError(f"{where}: 'maximum' {high} is below 'minimum' {low}; swap them")
    levels = high - low + 1
    if levels > MAX_SCORE_LEVELS:
        raise SchemaError(f"{where}: {levels} levels is more than MAX_SCORE_LEVELS={MAX_SCORE_LEVELS}; "
                          "narrow the range or use an 'enum'")
    question = {"type": "score", "instructions": _instructions(description, f"Score `{name}` from {low} to {high}"),
                "criteria": [str(level) for level in range(low, high + 1)]}
    return SchemaField(name, "score", question, minimum=low)


# -- answers -> values --------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _details(values: dict[str, Any], result: Mapping[str, Any]) -> DecisionResult:
    answers = result.get("answers") or {}
    confidence, probabilities, top = {}, {}, {}
    for qid, answer in answers.items():
        confidence[qid] = _number(answer.get("confidence")) or 0.0
        top[qid] = _number(answer.get("answer_confidence"))
        if answer.get("type") == "noul":
            p = float(answer.get("noul", 0.0))
            probabilities[qid] = {"false": round(1.0 - p, 4), "true": round(p, 4)}
        else:
            probabilities[qid] = dict(answer.get("probabilities") or {})
    return DecisionResult(values, confidence, probabilities, dict(answers), result.get("usage"),
                          result.get("routing"), top)


def _finish(fields: list[SchemaField] | None, result: Mapping[str, Any], return_details: bool) -> Any:
    answers = result.get("answers") or {}
    for qid, answer in answers.items():
        if not isinstance(answer, Mapping):
            raise TypeError(f"answers[{qid!r}]: expected an answer dict, got {type(answer).__name__} "
                            f"{answer!r}; a hook's ctx.skip() must return results shaped like predict's")
    if fields is None:
        values = dict(answers)
    else:  # a field without an answer (a hook removed its question) is left out, as in Laya
        values = {f.name: None if answers[f.name].get("low_confidence") else f.value(answers[f.name])
                  for f in fields if f.name in answers}
    return _details(values, result) if return_details else values


def _plan_call(schema: Any, questions: Any) -> tuple[list[SchemaField] | None, Any]:
    if (schema is None) == (questions is None):
        raise ValueError("pass exactly one of schema= (a JSON schema or pydantic model) or "
                         "questions= (a dict of typed questions)")
    if questions is not None:
        return None, questions
    fields = plan_schema(schema)
    return fields, {f.name: f.question for f in fields}


# -- entry points -----------------------------------------------------------------------------------
def decide(runner: Any, state: Any, schema: Any = None, *, questions: Mapping[str, Any] | None = None,
           return_details: bool = False, min_confidence: Any = None, **predict_kwargs: Any) -> Any:
    """Answer ``state`` against ``schema`` (or explicit ``questions``) and return the values.

    ``runner`` is an Agent or a Router; the call is ``runner.predict(state, questions,
    min_confidence=..., **predict_kwargs)``, so hooks, budgets and (on a Router) ``model=`` /
    ``task=`` / ``lang=`` work as for ``predict``. With ``questions=`` the values are the raw
    answers. ``return_details=True`` returns a :class:`DecisionResult`.
    """
    fields, asked = _plan_call(schema, questions)
    predict = getattr(runner, "predict", None)
    if not callable(predict):
        raise TypeError(f"decide(runner): expected an Agent or Router (with predict), got "
                        f"{type(runner).__name__}")
    result = predict(state, asked, min_confidence=min_confidence, **predict_kwargs)
    return _finish(fields, result, bool(return_details))


def decide_batch(runner: Any, states: Sequence[Any], schema: Any = None, *,
                 questions: Mapping[str, Any] | None = None, return_details: bool = False,
                 min_confidence: Any = None, **predict_kwargs: Any) -> list[Any]:
    """``decide`` over many states in one ``predict_batch`` call; one item per state, in order.

    On a Router each state becomes a request ``{"state", "questions", <routing pins>}`` (see
    :data:`ROUTING_KEYS`), so states may go to different checkpoints; on an Agent the states share
    its forward passes. Other keywords (``batch_size=``, ``sort_by_length=``, ``hooks=``, ...) go
    to ``predict_batch``. A runner without ``predict_batch`` is a ``TypeError``.
    """
    if isinstance(states, (str, bytes)) or not isinstance(states, Sequence):
        raise TypeError(f"decide_batch(states): expected a list of states, got {type(states).__name__}; "
                        "for one state call decide(state, ...)")
    fields, asked = _plan_call(schema, questions)
    predict_batch = getattr(runner, "predict_batch", None)
    if not callable(predict_batch):
        raise TypeError(f"decide_batch(runner): {type(runner).__name__} has no predict_batch; call "
                        "decide() for each state instead")
    if callable(getattr(runner, "route_batch", None)):
        pins = {key: predict_kwargs.pop(key) for key in ROUTING_KEYS if predict_kwargs.get(key) is not None}
        for key in ROUTING_KEYS:
            predict_kwargs.pop(key, None)
        requests = [{"state": state, "questions": asked, **pins} for state in states]
        results = predict_batch(requests, min_confidence=min_confidence, **predict_kwargs)
    else:
        results = predict_batch(list(states), asked, min_confidence=min_confidence, **predict_kwargs)
    return [_finish(fields, result, bool(return_details)) for result in results]
