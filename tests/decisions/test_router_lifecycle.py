"""Router.predict / predict_batch lifecycle, rule by rule from the lifecycle seeds (000 wins over 002).

Real tiny checkpoints ("a" and "b", different seeds) built from a config; hooks record events.
"""

import contextvars
import copy
import threading

import pytest

from jevlaya_lab.decisions.router import Router
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.hooks import BaseHook

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the user want?",
               "criteria": {"refund": "money back", "bug": "something is broken", "other": ""}},
    "spam": {"type": "noul", "instructions": "The message is spam."},
}
OTHER_QUESTIONS = {"urgency": {"type": "score", "instructions": "How urgent is it?",
                               "criteria": ["not urgent", "urgent"]}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("router-lifecycle")
    return {"a": make_tiny_checkpoint(root / "a", seed=0), "b": make_tiny_checkpoint(root / "b", seed=1)}


class Timeline(BaseHook):
    """Records every event as (event, label); the label of a predict event is its state."""

    def __init__(self):
        self.events = []
        self.contexts = []
        self._lock = threading.Lock()

    def _add(self, *event):
        with self._lock:
            self.events.append(event)

    def on_route(self, ctx):
        self._add("route", ctx.states[0])

    def on_load(self, name, agent):
        self._add("load", name)

    def on_evict(self, name, agent):
        self._add("evict", name)

    def on_predict_start(self, ctx):
        self.contexts.append(ctx)
        self._add("start", ctx.states[0])

    def on_error(self, ctx):
        self._add("error", ctx.states[0])

    def on_predict_end(self, ctx):
        self._add("end", ctx.states[0])

    def of(self, *kinds):
        return [e for e in self.events if e[0] in kinds]


class ForwardLog(BaseHook):
    """Installed on the Agents: one entry per agent.predict_batch call (= one shared forward pass)."""

    def __init__(self):
        self.calls = []

    def on_predict_start(self, ctx):
        self.calls.append((ctx.model, list(ctx.states), tuple(ctx.questions)))


def make_router(checkpoints, **kwargs):
    models = {"a": {"source": checkpoints["a"], "aliases": ["alpha"]}, "b": checkpoints["b"], "c": checkpoints["a"]}
    return Router(models, default="a", **kwargs)


def req(state, model="a", questions=QUESTIONS, **extra):
    return {"state": state, "questions": questions, "model": model, **extra}


def test_predict_returns_the_agent_result_with_routing(checkpoints):
    """Seed Router.predict: result = agent.system_one(...); result["routing"] = decision."""
    router = make_router(checkpoints)
    result = router.predict("refund my order", QUESTIONS, model="b")
    assert result["model"] == "b" and set(result["answers"]) == {"intent", "spam"}
    assert result["routing"]["model"] == "b" and result["routing"]["source"] == "model"
    direct = router.load("b").predict("refund my order", QUESTIONS)
    assert direct["answers"] == result["answers"]


def test_on_route_runs_before_loading_so_a_hook_can_pin_a_checkpoint(checkpoints):
    """Seed: on_route runs before the model is loaded, so a hook can pin a checkpoint and avoid
    loading another one."""

    class PinB(BaseHook):
        def on_route(self, ctx):
            ctx.decision = "b"

    timeline = Timeline()
    router = make_router(checkpoints, hooks=[PinB(), timeline])
    result = router.predict("refund my order", QUESTIONS)  # would route to the default "a"
    assert result["routing"]["model"] == "b" and router.loaded == ("b",)
    assert timeline.events[:2] == [("route", "refund my order"), ("load", "b")]


def test_router_hooks_wrap_the_call_and_are_not_forwarded_into_the_agent(checkpoints):
    """Seed: Router-level predict hooks are not forwarded into the Agent; an attached Agent with
    its own hooks runs those too."""
    from jevlaya_lab.decisions.agent import Agent

    router_hook, agent_hook = Timeline(), Timeline()
    router = make_router(checkpoints, hooks=[router_hook])
    router.attach("a", Agent(checkpoints["a"], hooks=[agent_hook], model_id="a"))
    router.predict("hello there", QUESTIONS, model="a")
    assert router_hook.of("start", "end") == [("start", "hello there"), ("end", "hello there")]
    assert agent_hook.of("start", "end") == [("start", "hello there"), ("end", "hello there")]
    assert router_hook.contexts[0] is not agent_hook.contexts[0]
    assert router_hook.contexts[0].router is router and agent_hook.contexts[0].router is None


def test_router_level_skip_still_adds_routing(checkpoints):
    """Seed: a Router-level ctx.skip() still adds routing, so the return shape is stable."""
    forward = ForwardLog()

    def serve_cached(ctx):
        ctx.skip([{"model": "cache", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}])

    router = make_router(checkpoints, agent_kwargs={"hooks": [forward]})
    result = router.predict("anything", QUESTIONS, model="a", on_predict_start=serve_cached)
    assert result["model"] == "cache" and result["routing"]["model"] == "a"
    with_routing = {"model": "cache", "answers": {}, "routing": {"model": "kept"}}
    result = router.predict("anything", QUESTIONS, on_predict_start=lambda ctx: ctx.skip([with_routing]))
    assert result["routing"] == {"model": "kept"}  # setdefault: a cached routing is kept
    assert forward.calls == []


def test_every_request_gets_its_own_context_run_id_and_elapsed_ms(checkpoints):
    """Seed 000 predict_batch: every request gets its own PredictContext, run_id and elapsed_ms."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    results = router.predict_batch([req("one"), req("two"), req("three", "b")])
    contexts = timeline.contexts
    assert [c.states for c in contexts] == [["one"], ["two"], ["three"]]
    assert len({c.run_id for c in contexts}) == 3
    assert all(c.elapsed_ms is not None and c.elapsed_ms >= 0 for c in contexts)
    assert [c.model for c in contexts] == ["a", "a", "b"]
    assert [r["model"] for r in results] == ["a", "a", "b"]


def test_batch_order_routes_all_first_then_each_checkpoint_load_starts_ends_in_reverse(checkpoints):
    """Seed 000: route_batch (on_route once per request, nothing loaded yet); then per checkpoint
    in order of first appearance: load, starts in input order, ends in reverse input order."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    results = router.predict_batch([req("s0", "b"), req("s1", "a"), req("s2", "b"), req("s3", "alpha")])
    assert timeline.events == [
        ("route", "s0"), ("route", "s1"), ("route", "s2"), ("route", "s3"),
        ("load", "b"), ("start", "s0"), ("start", "s2"), ("end", "s2"), ("end", "s0"),
        ("load", "a"), ("start", "s1"), ("start", "s3"), ("end", "s3"), ("end", "s1"),
    ]
    assert [r["routing"]["model"] for r in results] == ["b", "a", "b", "a"]  # input order


def test_a_router_call_is_the_parent_of_its_routes_loads_predicts_and_agent_runs(checkpoints):
    """One Router call -> its on_route, on_load/on_evict and predict contexts (and the
    Agent's own contexts inside it) carry the call's id as parent_id; a request keeps one run_id
    from on_route to on_predict_end; separate calls and a plain Agent call are not linked."""
    seen = []

    class Contexts(BaseHook):
        def on_route(self, ctx):
            seen.append(("route", ctx.states[0], ctx.run_id, ctx.parent_id))

        def on_load(self, ctx):
            seen.append(("load", ctx.model, None, ctx.parent_id))

        def on_evict(self, ctx):
            seen.append(("evict", ctx.model, None, ctx.parent_id))

        def on_predict_start(self, ctx):
            seen.append(("start", ctx.states[0], ctx.run_id, ctx.parent_id))

    class AgentRuns(BaseHook):
        def on_predict_start(self, ctx):
            seen.append(("agent", ctx.model, ctx.run_id, ctx.parent_id))

    router = make_router(checkpoints, hooks=[Contexts()], max_loaded=1, agent_kwargs={"hooks": [AgentRuns()]})
    router.predict_batch([req("s0", "a"), req("s1", "b")])
    calls = {parent for *_, parent in seen}
    assert len(calls) == 1 and None not in calls
    kinds = [(kind, label) for kind, label, *_ in seen]
    assert kinds == [("route", "s0"), ("route", "s1"), ("load", "a"), ("start", "s0"), ("agent", "a"),
                     ("evict", "a"), ("load", "b"), ("start", "s1"), ("agent", "b")]
    run_of = {(kind, label): run for kind, label, run, _ in seen}
    assert run_of[("start", "s0")] == run_of[("route", "s0")] != run_of[("route", "s1")] == run_of[("start", "s1")]
    assert run_of[("agent", "a")] not in (run_of[("start", "s0")], run_of[("start", "s1")])
    seen.clear()
    router.predict("s2", QUESTIONS, model="a")
    router.route("s3", QUESTIONS)
    second, third = dict.fromkeys(parent for *_, parent in seen if parent)
    assert len({second, third} | calls) == 3
    seen.clear()
    router.load("a").predict("s4", QUESTIONS)  # the Agent on its own: no Router call around it
    assert seen[-1][0] == "agent" and seen[-1][3] is None


def test_installed_hooks_run_before_per_call_hooks_in_list_order(checkpoints):
    """Seed ordering rules: installed [A, B], per-call [C] → A, B, C for start and for end."""
    order = []

    class Named(BaseHook):
        def __init__(self, name):
            self.name = name

        def on_predict_start(self, ctx):
            order.append(("start", self.name))

        def on_predict_end(self, ctx):
            order.append(("end", self.name))

    router = make_router(checkpoints, hooks=[Named("A"), Named("B")])
    router.predict_batch([req("x")], hooks=[Named("C")])
    assert order == [("start", "A"), ("start", "B"), ("start", "C"), ("end", "A"), ("end", "B"), ("end", "C")]
    order.clear()
    router.predict_batch([req("x")], hooks=[])  # None and [] add nothing
    assert order == [("start", "A"), ("start", "B"), ("end", "A"), ("end", "B")]


def test_one_shared_forward_pass_per_questions_and_budget_group(checkpoints):
    """Seed: group the requests left to infer by (questions, max_len, head_max_len); one
    agent.predict_batch per group; equal question dicts share a pass."""
    forward = ForwardLog()
    router = make_router(checkpoints, agent_kwargs={"hooks": [forward]})
    router.predict_batch([
        req("s0"), req("s1", questions=copy.deepcopy(QUESTIONS)), req("s2", questions=OTHER_QUESTIONS),
        req("s3", max_len=100), req("s4"), req("s5", head_max_len=56),
    ])
    assert [c[1] for c in forward.calls] == [["s0", "s1", "s4"], ["s2"], ["s3"], ["s5"]]


def test_an_alias_pinned_in_on_route_shares_the_forward_pass(checkpoints):
    """Seed 000: the name is resolved before grouping, so a request pinned through an alias ("ml")
    shares that checkpoint's forward pass, and ctx.model is the resolved name."""
    forward, timeline = ForwardLog(), Timeline()

    class PinAlias(BaseHook):
        def on_route(self, ctx):
            if ctx.states[0] == "pinned":
                ctx.decision = "alpha"

    router = make_router(checkpoints, hooks=[PinAlias(), timeline], agent_kwargs={"hooks": [forward]})
    results = router.predict_batch([req("plain", "a"), req("pinned", "b")])
    assert [c[1] for c in forward.calls] == [["plain", "pinned"]]
    assert [c.model for c in timeline.contexts] == ["a", "a"]
    assert results[1]["routing"]["model"] == "a"


def test_per_request_budgets_and_a_start_hook_overrides_them(checkpoints):
    """Seed 000: a request may carry max_len / head_max_len (ctx built with them); a start hook
    that sets ctx.max_len overrides, because it runs after the context is built; mixed budgets make
    one agent.predict_batch per budget."""
    forward, seen = ForwardLog(), []

    def budget(ctx):
        seen.append((ctx.states[0], ctx.max_len, ctx.head_max_len))
        if ctx.states[0] == "hooked":
            ctx.max_len = 100

    router = make_router(checkpoints, agent_kwargs={"hooks": [forward]})
    results = router.predict_batch(
        [req("own", max_len=100, head_max_len=56), req("call"), req("hooked", max_len=110)],
        max_len=120, on_predict_start=budget,
    )
    assert seen == [("own", 100, 56), ("call", 120, None), ("hooked", 110, None)]
    assert [c[1] for c in forward.calls] == [["own"], ["call"], ["hooked"]]
    assert results[0]["usage"]["input_tokens"] > 0


def test_start_hook_replacing_states_or_questions_changes_only_its_own_request(checkpoints):
    """Seed: a start hook that replaces ctx.states / ctx.questions changes its own request only;
    requests are grouped for the forward pass after their start hooks ran."""
    forward = ForwardLog()

    def rewrite(ctx):
        if ctx.states[0] == "mine":
            ctx.states = ["rewritten"]
            ctx.questions = OTHER_QUESTIONS

    router = make_router(checkpoints, agent_kwargs={"hooks": [forward]})
    shared = copy.deepcopy(QUESTIONS)
    results = router.predict_batch([req("first", questions=shared), req("mine", questions=shared)],
                                   on_predict_start=rewrite)
    assert forward.calls == [("a", ["first"], ("intent", "spam")), ("a", ["rewritten"], ("urgency",))]
    assert set(results[0]["answers"]) == {"intent", "spam"} and set(results[1]["answers"]) == {"urgency"}
    assert shared == QUESTIONS  # the caller's dict was not touched


def test_mutating_a_shared_questions_dict_in_place_reaches_every_request_and_the_caller(checkpoints):
    """Seed 000: mutating a shared questions dict in place reaches every request sharing it,
    including those whose start hooks ran earlier, and the caller (assign a new dict instead)."""

    def mutate(ctx):
        if ctx.states[0] == "last":
            ctx.questions.pop("spam")

    router = make_router(checkpoints)
    shared = copy.deepcopy(QUESTIONS)
    results = router.predict_batch([req("first", questions=shared), req("last", questions=shared)],
                                   on_predict_start=mutate)
    assert [set(r["answers"]) for r in results] == [{"intent"}, {"intent"}]
    assert list(shared) == ["intent"]


def test_all_starts_of_a_group_before_its_ends_so_a_cache_cannot_serve_a_duplicate_within_a_group(checkpoints):
    """Seed: a cache that fills in on_predict_end cannot serve a duplicate state within the same
    checkpoint group; it can across calls (and across checkpoint groups of one call)."""

    class EndFilledCache(BaseHook):
        def __init__(self):
            self.store, self.hits = {}, []

        def on_predict_start(self, ctx):
            key = (ctx.model, ctx.states[0])
            if key in self.store:
                self.hits.append(ctx.states[0])
                ctx.skip([copy.deepcopy(self.store[key])])

        def on_predict_end(self, ctx):
            if ctx.error is None:
                self.store[(ctx.model, ctx.states[0])] = ctx.results[0]

    cache, forward = EndFilledCache(), ForwardLog()
    router = make_router(checkpoints, hooks=[cache], agent_kwargs={"hooks": [forward]})
    router.predict_batch([req("dup"), req("dup")])
    assert cache.hits == [] and forward.calls[0][1] == ["dup", "dup"]
    results = router.predict_batch([req("dup"), req("dup")])
    assert cache.hits == ["dup", "dup"] and len(forward.calls) == 1
    assert all(r["routing"]["model"] == "a" for r in results)


def test_contextvars_set_in_start_and_reset_in_end_return_to_their_original_value(checkpoints):
    """Seed 000: requests end in reverse start order, so a hook that sets a value in start and
    resets it in end (contextvars, OpenTelemetry attach/detach) returns to the value it found."""
    current = contextvars.ContextVar("current", default="outside")

    class Scope(BaseHook):
        def __init__(self):
            self.tokens = {}
            self.seen_at_end = []

        def on_predict_start(self, ctx):
            self.tokens[ctx] = current.set(ctx.states[0])

        def on_predict_end(self, ctx):
            self.seen_at_end.append(current.get())
            current.reset(self.tokens.pop(ctx))  # raises ValueError if resets were out of order

    scope = Scope()
    router = make_router(checkpoints, hooks=[scope])
    router.predict_batch([req("s0"), req("s1", "b"), req("s2"), req("s3", "b")])
    assert current.get() == "outside"
    assert scope.seen_at_end == ["s2", "s0", "s3", "s1"]


def test_ctx_usage_is_set_once_per_request_from_its_own_result(checkpoints):
    """Seed 000: ctx.usage, once per request (summed input/output tokens of its result)."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    results = router.predict_batch([req("short"), req("a much longer state with many more words in it")])
    for ctx, result in zip(timeline.contexts, results):
        assert ctx.usage == {"input_tokens": result["usage"]["input_tokens"], "output_tokens": 0}
    assert timeline.contexts[0].usage["input_tokens"] < timeline.contexts[1].usage["input_tokens"]


def test_every_started_request_gets_one_end_even_when_an_end_hook_raises(checkpoints):
    """Seed: every started request gets exactly one on_predict_end even when another request's
    end hook raises; the first such error is raised after all of them have run."""
    timeline = Timeline()

    def explode(ctx):
        if ctx.states[0] in {"s1", "s2"}:
            raise RuntimeError(f"end hook failed for {ctx.states[0]}")

    router = make_router(checkpoints, hooks=[timeline])
    with pytest.raises(RuntimeError, match="end hook failed for s2"):  # reverse order: s2 ends first
        router.predict_batch([req("s0"), req("s1"), req("s2"), req("later", "b")], on_predict_end=explode)
    assert timeline.of("end") == [("end", "s2"), ("end", "s1"), ("end", "s0")]
    assert ("start", "later") not in timeline.events  # the next checkpoint group never started


def test_a_failing_start_hook_fails_every_started_request_of_its_group(checkpoints):
    """Seed 000 failure path: every started request of the failed checkpoint group, in reverse
    input order: ctx.error = exc, on_error, on_predict_end; then re-raise. Earlier groups finished
    with their results; later groups never start. A cache hit of the group fails too."""
    timeline = Timeline()

    def start(ctx):
        if ctx.states[0] == "cached":
            ctx.skip([{"model": "cache", "answers": {}}])
        if ctx.states[0] == "bad":
            raise KeyError("start hook failed")

    router = make_router(checkpoints, hooks=[timeline])
    with pytest.raises(KeyError, match="start hook failed") as info:
        router.predict_batch([req("early", "b"), req("cached"), req("bad"), req("never"), req("after", "c")],
                             on_predict_start=start)
    assert timeline.of("start", "error", "end") == [
        ("start", "early"), ("end", "early"),
        ("start", "cached"), ("start", "bad"),
        ("error", "bad"), ("end", "bad"), ("error", "cached"), ("end", "cached"),
    ]
    assert "c" not in router.loaded
    by_state = {c.states[0]: c for c in timeline.contexts}
    assert by_state["early"].error is None and by_state["early"].results[0]["model"] == "b"
    assert by_state["cached"].error is info.value and by_state["bad"].error is info.value


def test_a_failing_forward_pass_fails_requests_whose_question_group_already_ran(checkpoints):
    """Seed 000: a request whose question group already ran still fails with the group's error
    (on_error, then on_predict_end), because the caller gets no result for any of them."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    too_small = req("tight", max_len=10)  # its question rows cannot fit: the Agent raises
    with pytest.raises(ValueError) as info:
        router.predict_batch([req("fine"), too_small])
    assert timeline.of("error", "end") == [("error", "tight"), ("end", "tight"), ("error", "fine"), ("end", "fine")]
    fine = timeline.contexts[0]
    assert fine.results is not None and fine.error is info.value


def test_a_failing_on_error_or_end_hook_never_masks_the_batch_error(checkpoints):
    """A failing on_error never masks the original error (it is attached as a note)."""

    class Noisy(BaseHook):
        def on_predict_start(self, ctx):
            raise LookupError("the real failure")

        def on_error(self, ctx):
            raise RuntimeError("on_error broke")

        def on_predict_end(self, ctx):
            raise RuntimeError("on_predict_end broke")

    router = make_router(checkpoints, hooks=[Noisy()])
    with pytest.raises(LookupError, match="the real failure") as info:
        router.predict_batch([req("x")])
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "on_error broke" in notes and "on_predict_end broke" in notes


def test_hooks_raise_false_turns_hook_failures_into_warnings(checkpoints):
    router = make_router(checkpoints)

    def boom(ctx):
        raise RuntimeError("boom")

    with pytest.warns(RuntimeWarning, match="boom"):
        results = router.predict_batch([req("x"), req("y")], on_predict_start=boom, hooks_raise=False)
    assert len(results) == 2 and all("routing" in r for r in results)


def test_all_requests_are_validated_before_anything_loads_or_routes(checkpoints):
    """All requests are validated before anything loads."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    bad_questions = {"q": {"type": "choice", "instructions": "Pick", "criteria": []}}
    with pytest.raises(ValueError, match="question 'q'"):
        router.predict_batch([req("ok"), req("broken", questions=bad_questions)])
    with pytest.raises(TypeError, match=r"requests\[1\]\['questions'\]: missing"):
        router.predict_batch([req("ok"), {"state": "no questions"}])
    assert timeline.events == [] and router.loaded == ()


def test_empty_inputs(checkpoints):
    """Seed empty inputs: predict_batch([]) → []; no questions → an empty-answer payload per state,
    with routing, and the hooks still fire."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    assert router.predict_batch([]) == []
    results = router.predict_batch([req("x", questions={}), req("y", "b", questions={})])
    assert [r["answers"] for r in results] == [{}, {}]
    assert [r["routing"]["model"] for r in results] == ["a", "b"]
    assert timeline.of("start", "end") == [("start", "x"), ("end", "x"), ("start", "y"), ("end", "y")]


def test_predict_rejects_bad_input_with_the_field_named(checkpoints):
    router = make_router(checkpoints)
    with pytest.raises(TypeError, match=r"predict\['state'\]: missing or None"):
        router.predict(None, QUESTIONS)
    with pytest.raises(TypeError, match=r"requests: expected a list"):
        router.predict_batch("a state")

    def two_states(ctx):
        ctx.states = ["a", "b"]

    with pytest.raises(ValueError, match="exactly one state"):
        router.predict("x", QUESTIONS, on_predict_start=two_states)


def test_the_shipped_prediction_cache_on_a_router_serves_across_calls_only(checkpoints):
    """Seed "Caching with skip" with the shipped PredictionCache: a duplicate within one checkpoint
    group is computed (ends come after all starts); the next call is served, and the Router adds
    the current routing to the cached result."""
    from jevlaya_lab.hooks.cache import PredictionCache

    cache, forward = PredictionCache(), ForwardLog()
    router = make_router(checkpoints, hooks=[cache], agent_kwargs={"hooks": [forward]})
    first = router.predict_batch([req("dup"), req("dup")])
    assert len(forward.calls) == 1 and forward.calls[0][1] == ["dup", "dup"]
    again = router.predict_batch([req("dup", "alpha")])
    assert len(forward.calls) == 1  # served from the cache
    assert again[0]["answers"] == first[0]["answers"]
    assert again[0]["routing"]["source"] == "model" and again[0]["routing"]["model"] == "a"


def test_hooks_concurrent_false_lets_a_hook_call_back_into_the_router(checkpoints):
    """Seed "Concurrency": hooks_concurrent=False serialises each hook invocation with a
    re-entrant lock, so a hook may call back into the same Router without deadlocking."""
    routed = []

    class CallsBack(BaseHook):
        def on_predict_start(self, ctx):
            routed.append(ctx.router.route(ctx.states[0], model="b").model)

        def on_route(self, ctx):
            routed.append("on_route")

    router = make_router(checkpoints, hooks=[CallsBack()], hooks_concurrent=False)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (router.predict_batch([req("x"), req("y", "b")]), done.set()))
    worker.start()
    assert done.wait(30), "a hook calling back into the Router deadlocked"
    assert routed == ["on_route", "on_route", "on_route", "b", "on_route", "b"]


def test_bad_hooks_are_clear_type_errors(checkpoints):
    """Clear TypeErrors for a class, a bare function in hooks=, or a non-callable event."""

    class NotCallable:
        on_predict_start = "oops"

    with pytest.raises(TypeError, match="not an instance"):
        make_router(checkpoints, hooks=[Timeline])
    with pytest.raises(TypeError, match="bare function"):
        make_router(checkpoints).predict("x", QUESTIONS, hooks=[print])
    with pytest.raises(TypeError, match="not callable"):
        make_router(checkpoints).add_hook(NotCallable())


def test_hooks_installed_context_manager_on_the_router(checkpoints):
    timeline = Timeline()
    router = make_router(checkpoints)
    with router.hooks_installed(timeline):
        router.predict("inside", QUESTIONS)
    router.predict("outside", QUESTIONS)
    assert timeline.of("start") == [("start", "inside")] and router.hooks == ()


def test_predict_long_runs_the_router_lifecycle_once_around_the_window_scan(checkpoints):
    """Laya's Router.predict_long: route, load, then one start/end around the whole scan."""
    timeline = Timeline()
    router = make_router(checkpoints, hooks=[timeline])
    long_state = " ".join(f"line {i}: my refund is late and nobody answers" for i in range(60))
    result = router.predict_long(long_state, QUESTIONS, model="b", window=40)
    assert [e for e, _ in timeline.events] == ["route", "load", "start", "end"]
    assert result["routing"]["model"] == "b" and result["usage"]["windows"] > 1
    assert result == {**router.load("b").predict_long(long_state, QUESTIONS, window=40), "routing": result["routing"]}
    cached = {"model": "b", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}
    served = router.predict_long(long_state, QUESTIONS, on_predict_start=lambda ctx: ctx.skip([dict(cached)]))
    assert served["answers"] == {} and "routing" in served
    with pytest.raises(ValueError, match="exactly one state"):
        router.predict_long(long_state, QUESTIONS, on_predict_start=lambda ctx: setattr(ctx, "states", []))
