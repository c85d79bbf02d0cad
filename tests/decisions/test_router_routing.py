"""Router routing: precedence chain, decision dicts, on_route, route_batch.

Routing never loads a model, so these tests use the default registry without any checkpoint.
"""

import json

import pytest

from jevlaya_lab.decisions.router import Decision, Router
from jevlaya_lab.hooks import BaseHook

ENGLISH = "Hello, I was charged twice for invoice 4411 and I would like a refund please."
SPANISH = "Hola, me cobraron dos veces la factura 4411 y quiero un reembolso, por favor."
RUSSIAN = "Здравствуйте, с меня дважды списали деньги за счёт 4411, прошу вернуть."
QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the user want?",
                        "criteria": ["refund", "other"]}}
TRIAGE = {"urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"]},
          "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]}}


class RecordRoute(BaseHook):
    def __init__(self):
        self.seen = []

    def on_route(self, ctx):
        self.seen.append((ctx.states, ctx.decision["model"], ctx.router))


@pytest.fixture
def router():
    return Router(tasks={"triage": "english", "global": "multilingual"},
                  workflows={"triage": TRIAGE.keys()})


@pytest.mark.parametrize("state,model", [
    (ENGLISH, "english"),
    (SPANISH, "multilingual"),
    (RUSSIAN, "multilingual"),
    ({"subject": "Refund", "body": ENGLISH, "note": "El cliente dice que le cobraron dos veces la factura."},
     "multilingual"),
    ({"amount": 12.5, "id": "4411-22"}, "english"),
    ("refund please", "english"),
])
def test_detection_routes_by_script_and_language(router, state, model):
    """Non-Latin → multilingual; non-English Latin → multilingual; mixed segment →
    multilingual; no letters or undecided → the default."""
    decision = router.route(state)
    assert decision.model == model and decision.source == "detection"
    assert decision.detection is not None and decision.workflow is None


def test_decision_is_a_dict_with_a_human_reason_and_properties(router):
    """A decision is a dict with model, source, reason, detection, workflow (+ properties),
    and laya's ``repo``."""
    decision = router.route(SPANISH)
    assert isinstance(decision, dict) and isinstance(decision, Decision)
    assert set(decision) == {"model", "source", "reason", "detection", "workflow", "repo"}
    assert decision.repo == f"bundled:mini-{'en' if decision.model == 'english' else 'multi'}"
    assert decision.reason == decision["reason"]
    assert "Spanish" in decision.reason and decision.reason.endswith(".")
    json.dumps(decision)  # JSON-ready
    undecided = router.route("refund please")
    assert "could not be decided" in undecided.reason and "default" in undecided.reason


def test_precedence_model_beats_task_beats_workflow_beats_lang_beats_guess_beats_detection():
    """Precedence: explicit model > task > workflow (opt-in) > lang > lang_guess > detection."""
    router = Router(tasks={"triage": "english", "global": "multilingual"},
                    workflows={"triage": TRIAGE.keys()}, auto_task_detection=True)
    everything = dict(model="en", task="global", lang="es", lang_guess="es")
    assert router.route(SPANISH, TRIAGE, **everything).source == "model"
    everything.pop("model")
    assert router.route(ENGLISH, TRIAGE, **everything).source == "task"
    everything.pop("task")
    decision = router.route(SPANISH, TRIAGE, **everything)
    assert (decision.source, decision.model, decision.workflow) == ("workflow", "english", "triage")
    assert router.route(ENGLISH, QUESTIONS, **everything).source == "lang"
    everything.pop("lang")
    assert router.route(ENGLISH, QUESTIONS, **everything).model == "multilingual"
    assert router.route(ENGLISH, QUESTIONS, **everything).source == "lang_guess"
    assert router.route(ENGLISH, QUESTIONS).source == "detection"


def test_workflow_matching_is_opt_in(router):
    """Workflow detection is opt-in (auto_task_detection)."""
    assert router.route(SPANISH, TRIAGE).source == "detection"
    router.auto_task_detection = True
    assert router.route(SPANISH, TRIAGE).source == "workflow"
    # as in laya 0.4.15, only the exact question-id set matches
    assert router.route(SPANISH, {"urgency": TRIAGE["urgency"]}).source == "detection"
    assert router.route(SPANISH, {**TRIAGE, "other": {}}).source == "detection"


def test_lang_guess_per_call_then_router_level_and_may_abstain():
    """lang_guess per call, then Router-level; a code or a callable; may abstain."""
    router = Router(lang_guess=lambda state: "es")
    assert router.route(ENGLISH).model == "multilingual"
    assert router.route(ENGLISH, lang_guess="en").model == "english"
    decision = router.route(ENGLISH, lang_guess=lambda state: None)
    assert decision.source == "lang_guess" and decision.model == "multilingual"  # Router-level decided
    abstaining = Router(lang_guess=lambda state: None)
    assert abstaining.route(ENGLISH, lang_guess=lambda state: None).source == "detection"


def test_lang_accepts_tags_and_names_the_language(router):
    decision = router.route(ENGLISH, lang="pt-BR")
    assert decision.model == "multilingual" and "Portuguese" in decision.reason
    for agnostic in ("und", "mul", "zxx"):  # laya: codes naming no language decide nothing
        assert router.route(ENGLISH, lang=agnostic).source == "detection"
    assert router.route(SPANISH, lang="EN_us").model == "english"


def test_explain_lists_every_step_and_the_detection(router):
    """explain=True diagnostics."""
    decision = router.route(ENGLISH, lang="es", explain=True)
    steps = [s["step"] for s in decision["explain"]["steps"]]
    assert steps == ["model", "task", "workflow", "lang"]
    assert decision["explain"]["detection"]["language"] == "en"  # computed even though lang decided
    assert decision.detection is None  # decided before detection


def test_route_never_loads_a_model(router):
    """route never loads a model (the bundled checkpoints are not even assembled)."""
    router.route(ENGLISH)
    router.route_batch([{"state": SPANISH}, {"state": RUSSIAN, "model": "ml"}])
    assert router.loaded == ()


def test_on_route_fires_once_per_request_and_sees_a_context(router):
    """Seed: route_batch → on_route once per request (installed first, then per call)."""
    installed, per_call = RecordRoute(), RecordRoute()
    router.add_hook(installed)
    decisions = router.route_batch([{"state": ENGLISH}, {"state": SPANISH}, {"state": RUSSIAN}], hooks=[per_call])
    assert [d.model for d in decisions] == ["english", "multilingual", "multilingual"]
    assert [s[1] for s in installed.seen] == [d.model for d in decisions] == [s[1] for s in per_call.seen]
    assert installed.seen[0][0] == [ENGLISH] and installed.seen[0][2] is router


def test_on_route_hook_may_replace_the_decision_and_aliases_resolve(router):
    """Seed: a hook may replace the decision; the checkpoint name is resolved (alias → canonical)."""

    class Pin(BaseHook):
        def __init__(self, value):
            self.value = value

        def on_route(self, ctx):
            ctx.decision = self.value

    decision = router.route(ENGLISH, hooks=[Pin("ml")])
    assert (decision.model, decision.source) == ("multilingual", "hook")
    decision = router.route(ENGLISH, hooks=[Pin({"model": "multi", "reason": "pinned for the demo"})])
    assert decision.model == "multilingual" and decision.reason == "pinned for the demo"
    with pytest.raises(ValueError, match="unknown checkpoint name 'nowhere'"):
        router.route(ENGLISH, hooks=[Pin("nowhere")])
    with pytest.raises(TypeError, match="ctx.decision must be"):
        router.route(ENGLISH, hooks=[Pin(42)])


def test_on_route_hook_failure_raises_or_warns_with_hooks_raise(router):
    class Boom(BaseHook):
        def on_route(self, ctx):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        router.route(ENGLISH, hooks=[Boom()])
    with pytest.warns(RuntimeWarning, match="boom"):
        assert router.route(ENGLISH, hooks=[Boom()], hooks_raise=False).model == "english"


@pytest.mark.parametrize("request_,error,match", [
    ({"questions": QUESTIONS}, TypeError, r"requests\[1\]\['state'\]: missing or None"),
    ({"state": "x", "modle": "en"}, ValueError, r"requests\[1\]: unknown key\(s\) \['modle'\]"),
    ({"state": "x", "model": "englsh"}, ValueError, "Did you mean 'english'"),
    ({"state": "x", "task": "nope"}, ValueError, "unknown task 'nope'; known tasks: 'triage', 'global'"),
    ({"state": "x", "lang": "e1"}, ValueError, r"requests\[1\]\['lang'\]: 'e1' is not a language code"),
    ({"state": "x", "max_len": 0}, ValueError, r"requests\[1\]\['max_len'\] must be a positive int or None"),
    ({"state": "x", "questions": ["a"]}, TypeError, r"requests\[1\]\['questions'\]: expected a dict"),
])
def test_every_request_is_validated_before_routing(router, request_, error, match):
    """All requests are validated first; messages name the field, the value and the fix."""
    hook = RecordRoute()
    with pytest.raises(error, match=match):
        router.route_batch([{"state": ENGLISH}, request_], hooks=[hook])
    assert hook.seen == []  # nothing was routed


def test_route_rejects_none_state_and_non_list_batches(router):
    with pytest.raises(TypeError, match="route\\['state'\\]: missing or None"):
        router.route(None)
    with pytest.raises(TypeError, match="requests: expected a list of request dicts"):
        router.route_batch({"state": ENGLISH})
    for plain in (router, Router(), Router.laya()):  # a route that only detects checks its fields too
        with pytest.raises(TypeError, match="route\\['state'\\]: missing or None"):
            plain.route(None)
        with pytest.raises(TypeError, match="route\\['questions'\\]: expected a dict question_id"):
            plain.route(ENGLISH, ["intent"])


def test_router_construction_errors_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="max_loaded: expected a positive int"):
        Router(max_loaded=0)
    with pytest.raises(ValueError, match="workflows\\['triage'\\]: no checkpoint for this workflow"):
        Router(workflows={"triage": ["a"]})
    with pytest.raises(ValueError, match="unknown checkpoint name 'nope'"):
        Router(default="nope")
    custom = Router({"support": tmp_path})
    assert custom.default == "support"  # no 'english' registered: the first name is the default
    decision = custom.route(SPANISH)
    assert decision.model == "support" and "no 'multilingual' checkpoint is registered" in decision.reason


def test_route_subcommand_prints_the_decision_as_json(capsys):
    """`jevlaya-lab route` shows which checkpoint the Router picks and why, without loading."""
    from jevlaya_lab.cli import main

    assert main(["route", "--json", json.dumps({"body": SPANISH})]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert decision["model"] == "multilingual" and decision["detection"]["language"] == "es"
    assert main(["route", "--explain", "--lang", "en", ENGLISH]) == 0
    assert [s["step"] for s in json.loads(capsys.readouterr().out)["explain"]["steps"]][-1] == "lang"
    assert main(["route", "--model", "englsh", "hi"]) == 2
    assert "Did you mean 'english'" in capsys.readouterr().err


def test_decision_has_an_escaped_notebook_view(router):
    view = router.route({"body": SPANISH})._repr_html_()
    assert "multilingual" in view and "Latin 100%" in view and "Spanish" in view
    pinned = Decision(model="m<b>", source="hook", reason="x < y & z", detection=None, workflow=None)
    view = pinned._repr_html_()
    assert "m&lt;b&gt;" in view and "x &lt; y &amp; z" in view and "<b>" not in view


def test_a_registry_change_reaches_the_next_decision(tmp_path):
    """The checkpoint for a language (and its reason) is kept per language code; registering or
    unregistering a checkpoint, or renaming the policy's targets, must change the next
    decision, not leave the kept one in place."""
    router = Router({"english": tmp_path / "en"})
    first = router.route(SPANISH)
    assert first.model == "english" and "no 'multilingual' checkpoint is registered" in first.reason
    router.register("multilingual", tmp_path / "multi")
    second = router.route(SPANISH)
    assert second.model == "multilingual" and ("so the multilingual checkpoint 'multilingual' reads it. "
                                               "Decided by: Spanish common words") in second.reason
    router.register("spanish", tmp_path / "es")
    router.policy.multilingual = "spanish"
    assert router.route(SPANISH).model == "spanish"
    router.unregister("spanish")
    assert router.route(SPANISH).model == "english"


def test_a_callable_guesser_runs_inside_the_route_call():
    """A route() that only detects skips the call scope (nothing in it can make a hook
    context); a callable language guesser is user code, so its route() keeps the scope: a
    context the guesser makes has the call's id as parent, one id per call."""
    from jevlaya_lab.hooks.context import current_call

    parents = []

    def guesser(state):
        parents.append(current_call())
        return None  # abstain: detection decides

    router = Router()
    assert router.route(ENGLISH, lang_guess=guesser).model == "english"
    assert router.route(ENGLISH, lang_guess=guesser).model == "english"
    Router(lang_guess=guesser).route(ENGLISH)
    assert len(parents) == 3 and None not in parents and len(set(parents)) == 3
    assert current_call() is None
