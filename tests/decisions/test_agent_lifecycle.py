"""Agent.predict_batch follows the lifecycle seed exactly (seeds 000/002, "Agent.predict_batch").

Each test names the seed rule it checks. Hooks here are real hook objects recording what they
see; the forward pass is counted with a torch forward hook on the real model.
"""

from __future__ import annotations

import threading
import time
import warnings

import pytest

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.encoding import row_tokenizer
from jevlaya_lab.hooks import BaseHook, PredictContext


class Log(BaseHook):
    """Appends (name, event, ctx) for every predict event."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def on_predict_start(self, ctx):
        self.log.append((self.name, "start", ctx))

    def on_error(self, ctx):
        self.log.append((self.name, "error", ctx))

    def on_predict_end(self, ctx):
        self.log.append((self.name, "end", ctx))


class Raiser(BaseHook):
    def __init__(self, event: str, exc: BaseException):
        setattr(self, event, self._raise)
        self.exc = exc

    def _raise(self, ctx):
        raise self.exc


def events(log):
    return [(name, event) for name, event, _ in log]


# -- ordering rules ------------------------------------------------------------------------

def test_seed_ordering_rule_installed_hooks_run_before_per_call_hooks(agent, questions):
    log: list = []
    agent.add_hook(Log("A", log))
    agent.add_hook(Log("B", log))
    agent.predict("hello", questions, hooks=[Log("C", log)])
    assert events(log) == [("A", "start"), ("B", "start"), ("C", "start"),
                           ("A", "end"), ("B", "end"), ("C", "end")]


def test_seed_ordering_rule_list_order_within_installed_and_per_call(tiny_checkpoint_dir, questions):
    log: list = []
    agent = Agent(tiny_checkpoint_dir, hooks=[Log("B", log), Log("A", log)])
    agent.predict("hello", questions, hooks=[Log("D", log), Log("C", log)],
                  on_predict_start=lambda ctx: log.append(("fn", "start", ctx)))
    assert [n for n, e in events(log) if e == "start"] == ["B", "A", "D", "C", "fn"]


def test_seed_ordering_rule_every_hook_finishes_an_event_before_the_next(agent, questions):
    log: list = []

    class Slow(Log):
        def on_predict_start(self, ctx):
            time.sleep(0.01)
            super().on_predict_start(ctx)

    agent.predict("x", questions, hooks=[Slow("A", log), Log("B", log)])
    assert events(log) == [("A", "start"), ("B", "start"), ("A", "end"), ("B", "end")]


def test_seed_none_and_empty_list_add_no_per_call_hooks(agent, questions):
    log: list = []
    agent.add_hook(Log("A", log))
    agent.predict("x", questions, hooks=None)
    agent.predict("x", questions, hooks=[])
    assert events(log) == [("A", "start"), ("A", "end")] * 2


# -- one ctx through start, error and end ----------------------------------------------------

def test_seed_same_ctx_and_run_id_flow_through_start_and_end(agent, questions):
    log: list = []
    result = agent.predict("x", questions, hooks=[Log("A", log)])
    (_, _, start), (_, _, end) = log
    assert start is end and isinstance(start, PredictContext)
    assert len(start.run_id) == 32 and int(start.run_id, 16) >= 0
    assert end.results == [result] and end.error is None
    assert end.model == "tiny" and end.agent is agent and end.router is None
    assert end.elapsed_ms is not None and end.elapsed_ms > 0
    assert end.usage == {"input_tokens": result["usage"]["input_tokens"], "output_tokens": 0}


def test_seed_same_ctx_flows_through_start_error_and_end_and_end_reads_ctx_error(agent):
    log: list = []
    with pytest.raises(ValueError, match="question 'bad'") as info:
        agent.predict("x", {"bad": {"type": "choice", "instructions": "x"}}, hooks=[Log("A", log)])
    assert events(log) == [("A", "start"), ("A", "error"), ("A", "end")]
    ctxs = {id(c) for _, _, c in log}
    assert len(ctxs) == 1
    assert log[2][2].error is info.value and log[2][2].results is None


def test_seed_on_error_runs_before_on_predict_end_when_a_start_hook_raises(agent, questions):
    log: list = []
    boom = RuntimeError("start failed")
    with pytest.raises(RuntimeError, match="start failed"):
        agent.predict("x", questions, hooks=[Log("A", log), Raiser("on_predict_start", boom),
                                             Log("C", log)])
    # the raising start hook aborts the event; error and end still reach every hook
    assert events(log) == [("A", "start"), ("A", "error"), ("C", "error"), ("A", "end"), ("C", "end")]
    assert log[-1][2].error is boom


def test_seed_end_still_runs_after_an_error_in_the_forward_path(agent, questions):
    log: list = []
    with pytest.raises(TypeError, match="state 1 is None"):
        agent.predict_batch(["ok", None], questions, hooks=[Log("A", log)])
    assert events(log)[-2:] == [("A", "error"), ("A", "end")]


def test_seed_failing_on_error_hook_never_masks_the_original_error(agent, questions):
    original = ValueError("the real problem")
    with pytest.raises(ValueError, match="the real problem") as info:
        agent.predict("x", questions, hooks=[Raiser("on_predict_start", original),
                                             Raiser("on_error", KeyError("hook bug"))])
    assert info.value is original
    assert any("on_error raised KeyError" in note for note in info.value.__notes__)


def test_failing_end_hook_on_the_failure_path_keeps_the_original_error(agent, questions):
    original = ValueError("the real problem")
    log: list = []
    with pytest.raises(ValueError, match="the real problem") as info:
        agent.predict("x", questions, hooks=[Raiser("on_predict_start", original),
                                             Raiser("on_predict_end", KeyError("end bug")),
                                             Log("B", log)])
    assert info.value is original
    assert any("on_predict_end raised KeyError" in n for n in info.value.__notes__)
    assert events(log) == [("B", "error"), ("B", "end")]  # later end hooks still ran


def test_failing_end_hook_on_the_success_path_raises_its_error(agent, questions):
    with pytest.raises(KeyError, match="end bug"):
        agent.predict("x", questions, hooks=[Raiser("on_predict_end", KeyError("end bug"))])


def test_seed_hooks_raise_false_turns_hook_failures_into_one_warning_each(agent, questions):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = agent.predict("x", questions, hooks_raise=False,
                               hooks=[Raiser("on_predict_start", RuntimeError("s")),
                                      Raiser("on_predict_end", RuntimeError("e"))])
    assert set(result["answers"]) == set(questions)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 2


# -- what a start hook may do ----------------------------------------------------------------

def test_seed_start_hook_rewrites_states_and_questions_and_they_reach_encoding(agent, questions):
    def rewrite(ctx):
        ctx.states = ["my invoice is wrong", "the app crashes"]
        ctx.questions = {"spam": questions["spam"]}

    rewritten = agent.predict_batch(["original"], questions, on_predict_start=rewrite)
    direct = agent.predict_batch(["my invoice is wrong", "the app crashes"], {"spam": questions["spam"]})
    assert rewritten == direct and len(rewritten) == 2


def test_seed_start_hook_sets_budgets_and_hook_beats_argument_beats_config(agent, questions):
    state = "word " * 200

    def dropped(**kwargs):
        return agent.predict(state, questions, **kwargs)["usage"]["state_tokens_dropped"]

    def set_budget(ctx):
        assert ctx.max_len == 100  # the per-call argument is visible to hooks
        ctx.max_len = 60

    config_drop, arg_drop = dropped(), dropped(max_len=100)
    hook_drop = dropped(max_len=100, on_predict_start=set_budget)
    assert config_drop < arg_drop < hook_drop


def test_seed_start_hook_sets_head_max_len(agent):
    q = {"c": {"type": "choice", "instructions": "word " * 60, "criteria": ["a", "b"]}}
    seen = []

    def budget(ctx):
        ctx.head_max_len = 24

    loose = agent.predict("x", q)["usage"]
    tight = agent.predict("x", q, on_predict_start=budget, on_predict_end=lambda c: seen.append(c))["usage"]
    assert seen[0].head_max_len == 24
    assert tight["input_tokens"] < loose["input_tokens"]
    assert tight["truncated_questions"] == []  # a cut instruction is not a cut state (as laya)


def test_seed_skip_with_one_result_skips_tokenization_and_forward(agent, questions, forwards, monkeypatch):
    encoded = []
    adapter = row_tokenizer(agent.tokenizer)
    original = adapter.encode
    monkeypatch.setattr(adapter, "encode", lambda texts: encoded.append(texts) or original(texts))
    cached = {"model": "tiny", "answers": {"x": 1}, "usage": {"input_tokens": 7, "output_tokens": 0}}
    ends = []
    result = agent.predict("x", questions, on_predict_start=lambda ctx: ctx.skip(cached),
                           on_predict_end=ends.append)
    assert result is cached
    assert forwards == [] and encoded == []
    assert ends[0].usage == {"input_tokens": 7, "output_tokens": 0}


def test_seed_skip_with_n_results_returns_them_in_order(agent, questions, forwards):
    served = [{"answers": {}, "usage": {"input_tokens": i, "output_tokens": 0}} for i in range(3)]
    out = agent.predict_batch(["a", "b", "c"], questions, on_predict_start=lambda ctx: ctx.skip(served))
    assert out == served and forwards == []


def test_seed_skip_with_the_wrong_count_is_a_value_error_and_fires_on_error(agent, questions):
    log: list = []
    with pytest.raises(ValueError, match=r"got 1 result\(s\) for 2 state\(s\)"):
        agent.predict_batch(["a", "b"], questions, hooks=[Log("A", log)],
                            on_predict_start=lambda ctx: ctx.skip([{}]))
    assert events(log) == [("A", "start"), ("A", "error"), ("A", "end")]


def test_seed_bare_str_states_after_start_hooks_is_a_type_error_pointing_to_predict(agent, questions):
    with pytest.raises(TypeError, match=r"agent\.predict\(state, questions\)"):
        agent.predict_batch("just one state", questions)
    with pytest.raises(TypeError, match=r"got a dict.*predict\("):
        agent.predict_batch(["fine"], questions, on_predict_start=lambda ctx: setattr(ctx, "states", {"a": 1}))


# -- empty inputs ---------------------------------------------------------------------------

def test_seed_empty_inputs_predict_batch_of_no_states_returns_empty_list_and_hooks_fire(agent, questions, forwards):
    log: list = []
    assert agent.predict_batch([], questions, hooks=[Log("A", log)]) == []
    assert events(log) == [("A", "start"), ("A", "end")]
    assert log[-1][2].results == [] and forwards == []


def test_seed_empty_inputs_no_questions_gives_one_empty_payload_per_state(agent, forwards, monkeypatch):
    encoded = []
    adapter = row_tokenizer(agent.tokenizer)
    monkeypatch.setattr(adapter, "encode", lambda texts: encoded.append(texts))
    log: list = []
    out = agent.predict_batch(["a", {"b": 1}], {}, hooks=[Log("A", log)])
    assert out == [{"model": "tiny", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}] * 2
    assert out[0] is not out[1]
    assert forwards == [] and encoded == []
    assert events(log) == [("A", "start"), ("A", "end")]
    assert log[-1][2].usage == {"input_tokens": 0, "output_tokens": 0}


def test_seed_empty_inputs_system_one_with_no_questions_is_a_single_empty_payload(agent, forwards):
    log: list = []
    assert agent.system_one("a", {}, hooks=[Log("A", log)]) == {
        "model": "tiny", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}
    assert events(log) == [("A", "start"), ("A", "end")] and forwards == []


# -- system_one / predict ---------------------------------------------------------------------

def test_seed_system_one_is_predict_batch_of_one_state_with_the_same_lifecycle(agent, questions):
    log: list = []
    one = agent.system_one("hello", questions, hooks=[Log("A", log)])
    assert log[0][2].states == ["hello"]
    assert events(log) == [("A", "start"), ("A", "end")]
    assert one == agent.predict_batch(["hello"], questions)[0]
    assert Agent.predict is Agent.system_one


# -- hook management and misuse --------------------------------------------------------------

def test_add_remove_and_hooks_installed(agent, questions):
    log: list = []
    a = Log("A", log)
    with agent.hooks_installed(a):
        assert agent.hooks == (a,)
        agent.predict("x", questions)
    assert agent.hooks == ()
    agent.predict("x", questions)
    assert len(log) == 2
    agent.add_hook(a)
    agent.remove_hook(a)
    with pytest.raises(ValueError, match="not installed"):
        agent.remove_hook(a)


def test_hook_misuse_raises_clear_type_errors(agent, questions, tiny_checkpoint_dir):
    with pytest.raises(TypeError, match="not an instance"):
        agent.predict("x", questions, hooks=[Log])
    with pytest.raises(TypeError, match="bare function"):
        agent.predict("x", questions, hooks=[print])
    bad = BaseHook()
    bad.on_predict_start = 3
    with pytest.raises(TypeError, match="not callable"):
        agent.add_hook(bad)
    with pytest.raises(TypeError, match="not an instance"):
        Agent(tiny_checkpoint_dir, hooks=[BaseHook])


# -- concurrency ----------------------------------------------------------------------------

class Tracking(BaseHook):
    """Measures how many threads are inside this hook at once."""

    def __init__(self):
        self.inside = 0
        self.peak = 0
        self.lock = threading.Lock()

    def on_predict_start(self, ctx):
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        time.sleep(0.05)
        with self.lock:
            self.inside -= 1


def test_seed_hooks_concurrent_false_serialises_each_hook_invocation(tiny_checkpoint_dir, questions):
    tracking = Tracking()
    agent = Agent(tiny_checkpoint_dir, hooks=[tracking], hooks_concurrent=False)
    threads = [threading.Thread(target=agent.predict, args=("x", questions)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert tracking.peak == 1


def test_seed_hooks_concurrent_true_lets_hooks_run_in_parallel(tiny_checkpoint_dir, questions):
    tracking = Tracking()
    agent = Agent(tiny_checkpoint_dir, hooks=[tracking])
    threads = [threading.Thread(target=agent.predict, args=("x", questions)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert tracking.peak > 1


def test_seed_hooks_concurrent_false_allows_a_hook_to_call_back_into_the_agent(tiny_checkpoint_dir, questions):
    inner = []

    class Reentrant(BaseHook):
        def on_predict_start(self, ctx):
            if ctx.states != ["inner"]:
                inner.append(ctx.agent.predict("inner", {"spam": questions["spam"]}))

    agent = Agent(tiny_checkpoint_dir, hooks=[Reentrant()], hooks_concurrent=False)
    done = []
    worker = threading.Thread(target=lambda: done.append(agent.predict("outer", questions)))
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "re-entrant call deadlocked"
    assert len(done) == 1 and set(inner[0]["answers"]) == {"spam"}


def test_agent_awaits_async_hooks_bounds_them_with_hooks_timeout_and_refuses_typos(agent, questions):
    """As laya: async events are awaited, hooks_timeout per Agent or per call."""
    import asyncio

    class Ship(BaseHook):
        async def on_predict_end(self, ctx):
            await asyncio.sleep(0)
            ctx.results[0]["shipped"] = True

    assert agent.predict("hello", questions, hooks=[Ship()])["shipped"] is True

    class Slow(BaseHook):
        def on_predict_start(self, ctx):
            time.sleep(0.3)

    with pytest.raises(TimeoutError, match="Slow.on_predict_start exceeded hooks_timeout=0.05s"):
        agent.predict("hello", questions, hooks=[Slow()], hooks_timeout=0.05)

    class Typo(BaseHook):
        def on_predict_ned(self, ctx):
            pass

    with pytest.raises(TypeError, match="on_predict_ned, which is not a hook event"):
        agent.add_hook(Typo())
    assert agent.hooks == ()
