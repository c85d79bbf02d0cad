"""decide / decide_batch: JSON schema or pydantic model -> typed questions ->
values, through the Agent's and the Router's normal hook lifecycle. Real tiny checkpoints; the
comparison with laya itself is in test_laya_parity.py."""

from __future__ import annotations

import pytest

from jevlaya_lab.decisions.router import Router
from jevlaya_lab.decisions.structured import (
    DecisionResult,
    SchemaError,
    SchemaField,
    plan_schema,
    questions_from_schema,
)
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.hooks import BaseHook

SCHEMA = {
    "type": "object",
    "properties": {
        "team": {"enum": ["billing", "support", 3, None], "description": "Which team should answer?"},
        "urgency": {"type": "integer", "minimum": 1, "maximum": 3},
        "spam": {"type": "boolean"},
    },
}
STATE = "I was charged twice for my order, please refund me"


def test_each_property_kind_becomes_one_typed_question():
    assert questions_from_schema(SCHEMA) == {
        "team": {"type": "choice", "instructions": "Which team should answer?",
                 "criteria": {"billing": None, "support": None, "3": None, "null": None}},
        "urgency": {"type": "score", "instructions": "Score `urgency` from 1 to 3", "criteria": ["1", "2", "3"]},
        "spam": {"type": "noul", "instructions": "Is `spam` true?"},
    }


def test_refs_optional_unions_and_one_element_allof_are_read_through():
    schema = {"properties": {
        "a": {"$ref": "#/$defs/Team", "description": "outer text"},
        "b": {"anyOf": [{"$ref": "#/definitions/Flag"}, {"type": "null"}]},
        "c": {"allOf": [{"type": "integer", "minimum": 0, "maximum": 1, "description": "inner text"}]},
        "d": {"type": ["null", "boolean"], "description": "   "},
        "e": {"const": "only"},
    }, "$defs": {"Team": {"enum": ["x", "y"], "description": "type text"}},
        "definitions": {"Flag": {"type": "boolean", "description": "type text"}}}
    questions = questions_from_schema(schema)
    assert questions["a"] == {"type": "choice", "instructions": "outer text", "criteria": {"x": None, "y": None}}
    assert questions["b"] == {"type": "noul", "instructions": "Is `b` true?"}  # a $ref's own text is the type's
    assert questions["c"]["instructions"] == "inner text"
    assert questions["d"] == {"type": "noul", "instructions": "Is `d` true?"}  # blank -> default text
    assert questions["e"]["criteria"] == {"only": None}


@pytest.mark.parametrize("prop, message", [
    ({"type": "string"}, "properties.f: a free string"),
    ({"type": "array", "items": {"type": "boolean"}}, "properties.f: arrays are not supported"),
    ({"type": "object", "properties": {}}, "properties.f: nested objects"),
    ({"type": "integer"}, "properties.f: a number becomes a score only with integer 'minimum'"),
    ({"type": "integer", "minimum": 0.5, "maximum": 3}, "integer 'minimum' and 'maximum'"),
    ({"type": "integer", "minimum": 3, "maximum": 1}, "'maximum' 1 is below 'minimum' 3"),
    ({"type": "integer", "minimum": 0, "maximum": 10}, "11 levels is more than MAX_SCORE_LEVELS=10"),
    ({"enum": []}, "properties.f: 'enum' is empty"),
    ({"enum": "ab"}, "'enum' must be a list"),
    ({"enum": [str(i) for i in range(33)]}, "33 enum values is more than MAX_OPTIONS=32"),
    ({"enum": [1, "1"]}, "render to the same option label"),
    ({"anyOf": [{"type": "boolean"}, {"enum": ["x"]}]}, "'anyOf' has 2 non-null branches"),
    ({"type": ["boolean", "integer"]}, "unions of types are not supported"),
    ({"$ref": "#/$defs/Missing"}, "does not name an entry of this schema's '$defs'"),
    ({"$ref": "#/$defs/Loop"}, "refers to itself"),
    ({"allOf": [{"type": "boolean"}, {"description": "x"}]}, "only a one-element 'allOf'"),
    ({}, "properties.f: unsupported schema {}"),
    ("boolean", "properties.f: expected a schema object, got str"),
])
def test_a_property_that_cannot_be_a_question_is_refused_naming_it(prop, message):
    schema = {"properties": {"ok": {"type": "boolean"}, "f": prop}, "$defs": {"Loop": {"$ref": "#/$defs/Loop"}}}
    with pytest.raises(SchemaError, match=message.replace("(", r"\(").replace("[", r"\[")
                       .replace("{", r"\{").replace("$", r"\$")):
        plan_schema(schema)


@pytest.mark.parametrize("schema, message", [
    ({"type": "object"}, "the top level must be an object with 'properties'"),
    ({"type": "array", "properties": {"a": {"type": "boolean"}}}, "the top level must be an object"),
    ({"properties": {}}, "'properties' must be a non-empty object"),
    ({"properties": {f"p{i}": {"type": "boolean"} for i in range(33)}}, "33 properties is more than MAX_PROPERTIES=32"),
    ("not a schema", "expected a JSON schema dict or a pydantic model"),
    (int, "expected a JSON schema dict or a pydantic model"),
])
def test_a_schema_that_is_not_an_object_of_properties_is_refused(schema, message):
    with pytest.raises(SchemaError, match=message):
        plan_schema(schema)
    assert issubclass(SchemaError, ValueError)


def test_answers_become_schema_values():
    team, urgency, spam = plan_schema(SCHEMA)
    assert team.value({"choice": "3"}) == 3 and team.value({"choice": "null"}) is None
    assert team.value({"choice": "billing"}) == "billing"
    # a score's value is its most probable level (first on a tie), not the rounded expectation
    assert urgency.value({"score": 1.6, "probabilities": {"0": 0.45, "1": 0.1, "2": 0.45}}) == 1
    assert urgency.value({"score": 0.4, "probabilities": {"0": 0.1, "1": 0.2, "2": 0.7}}) == 3
    assert urgency.value({"score": 1.2}) == 2  # no probabilities (a hand-made answer): rounded
    assert spam.value({"noul": 0.5}) is True and spam.value({"noul": 0.4999}) is False
    assert isinstance(team, SchemaField) and team.kind == "choice" and urgency.minimum == 1


def test_decide_answers_through_the_agent_lifecycle(agent):
    seen = []

    class Watch(BaseHook):
        def on_predict_start(self, ctx):
            seen.append(("start", ctx.questions))

        def on_predict_end(self, ctx):
            seen.append(("end", {q: a.get("abstention") for q, a in ctx.results[0]["answers"].items()}))

    values = agent.decide(STATE, SCHEMA, hooks=[Watch()], min_confidence=0.0)
    assert seen == [("start", questions_from_schema(SCHEMA)),
                    ("end", {"team": "passed", "urgency": "passed", "spam": "passed"})]
    assert set(values) == {"team", "urgency", "spam"}
    assert values["team"] in ("billing", "support", 3, None) and values["urgency"] in (1, 2, 3)
    assert isinstance(values["spam"], bool)
    import jevlaya_lab

    assert jevlaya_lab.decide(agent, STATE, SCHEMA) == values  # Laya's module-level form
    details = agent.decide(STATE, SCHEMA, return_details=True)
    assert isinstance(details, DecisionResult) and details.values == values
    assert details.routing is None and details.usage["input_tokens"] > 0
    assert details.answer_confidence["team"] == details.answers["team"]["answer_confidence"]
    p_true = details.answers["spam"]["noul"]
    assert details.probabilities["spam"] == {"false": round(1 - p_true, 4), "true": p_true}


def test_min_confidence_turns_abstained_fields_into_none(agent):
    details = agent.decide(STATE, SCHEMA, min_confidence=1.0, return_details=True)
    assert details.values == {"team": None, "urgency": None, "spam": None}
    assert all(a["abstention"] == "abstained" for a in details.answers.values())
    with pytest.raises(ValueError, match="min_confidence"):
        agent.decide(STATE, SCHEMA, min_confidence=1.5)


def test_a_start_hook_may_serve_or_reshape_the_decision(agent, forwards):
    cached = {"model": "tiny", "usage": {"input_tokens": 0, "output_tokens": 0}, "answers": {
        "team": {"type": "choice", "choice": "3", "probabilities": {"billing": 0.1, "support": 0.1, "3": 0.7,
                                                                    "null": 0.1}},
        "spam": {"type": "noul", "noul": 0.9}}}
    values = agent.decide(STATE, SCHEMA, on_predict_start=lambda ctx: ctx.skip([cached]))
    assert values == {"team": 3, "spam": True} and forwards == []  # urgency was not answered: left out

    def drop_urgency(ctx):
        ctx.questions = {k: v for k, v in ctx.questions.items() if k != "urgency"}

    assert set(agent.decide(STATE, SCHEMA, on_predict_start=drop_urgency)) == {"team", "spam"}


def test_decide_with_questions_returns_the_raw_answers(agent):
    questions = {"q": {"type": "noul", "instructions": "The user is angry."}}
    values = agent.decide(STATE, questions=questions)
    assert values == agent.predict(STATE, questions)["answers"]


def test_decide_batch_is_one_predict_batch_call_in_input_order(agent, forwards):
    states = [STATE, "hello", {"body": "the app crashes"}, [{"role": "user", "content": "hi"}]]
    starts = []
    batch = agent.decide_batch(states, SCHEMA, on_predict_start=lambda ctx: starts.append(len(ctx.states)),
                               batch_size=2)
    assert starts == [4] and len(forwards) == 2
    assert batch == [agent.decide(s, SCHEMA) for s in states]
    assert agent.decide_batch([], SCHEMA) == []


def test_bad_calls_are_refused_with_the_fix(agent):
    with pytest.raises(ValueError, match="exactly one of schema="):
        agent.decide(STATE)
    with pytest.raises(ValueError, match="exactly one of schema="):
        agent.decide(STATE, SCHEMA, questions={"q": {"type": "noul", "instructions": "x"}})
    with pytest.raises(TypeError, match="expected a list of states, got str"):
        agent.decide_batch("one state", SCHEMA)
    with pytest.raises(TypeError, match="got generator"):
        agent.decide_batch((s for s in [STATE]), SCHEMA)
    with pytest.raises(TypeError, match="model"):  # an Agent has no routing pins
        agent.decide_batch([STATE], SCHEMA, model="english")
    with pytest.raises(TypeError, match="has no predict_batch; call decide"):
        from jevlaya_lab.decisions.structured import decide_batch

        decide_batch(object(), [STATE], SCHEMA)
    with pytest.raises(TypeError, match="answers\\['team'\\]: expected an answer dict"):
        agent.decide(STATE, SCHEMA, on_predict_start=lambda ctx: ctx.skip(
            [{"model": "m", "answers": {"team": "billing"}, "usage": {}}]))


@pytest.fixture(scope="module")
def router_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("decide-router")
    return {"english": make_tiny_checkpoint(root / "en", seed=0),
            "multilingual": {"source": make_tiny_checkpoint(root / "ml", seed=1), "aliases": ("ml",)}}


def test_router_decide_batch_routes_each_state_and_keeps_routing(router_dirs):
    routed = []

    class Routes(BaseHook):
        def on_route(self, ctx):
            routed.append(ctx.decision.model)

    with Router(router_dirs, default="english", device="cpu", hooks=[Routes()]) as router:
        states = ["I was charged twice for my order, please give me a refund",
                  "Me cobraron dos veces el pedido, quiero que me devuelvan el dinero"]
        details = router.decide_batch(states, SCHEMA, return_details=True)
        assert [d.routing["model"] for d in details] == routed == ["english", "multilingual"]
        assert [d.values for d in details] == [router.decide(s, SCHEMA) for s in states]
        pinned = router.decide_batch(states, SCHEMA, model="ml", head_max_len=48, return_details=True)
        assert [d.routing["model"] for d in pinned] == ["multilingual", "multilingual"]
        assert pinned[0].values == router.decide(states[0], SCHEMA, model="multilingual", head_max_len=48)
        with pytest.raises(TypeError, match="bogus"):
            router.decide_batch(states, SCHEMA, bogus=1)


def test_decide_is_public_from_the_top():
    import jevlaya_lab

    assert jevlaya_lab.decide.__module__ == "jevlaya_lab.decisions.structured"
    assert jevlaya_lab.DecisionResult is DecisionResult and jevlaya_lab.SchemaError is SchemaError
    assert issubclass(SchemaError, jevlaya_lab.JevlayaError)
