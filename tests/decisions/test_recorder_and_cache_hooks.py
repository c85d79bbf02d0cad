"""Built-in hooks on a real Agent: the event recorder and the cache (seed "Caching with skip")."""

from __future__ import annotations

import threading

import pytest

from jevlaya_lab.decisions.errors import QuestionError
from jevlaya_lab.hooks import BaseHook, PredictContext
from jevlaya_lab.hooks.cache import PredictionCache, state_key
from jevlaya_lab.hooks.recorder import EventRecorder


# -- recorder -------------------------------------------------------------------------------

def test_recorder_records_every_event_with_run_id_model_and_monotonic_times(agent, questions):
    recorder = EventRecorder()
    agent.add_hook(recorder)
    agent.predict("hello", questions)
    with pytest.raises(QuestionError, match="question 'bad'"):
        agent.predict("hello", {"bad": {"type": "noul"}})
    events = recorder.events
    assert [e.event for e in events] == ["on_predict_start", "on_predict_end",
                                         "on_predict_start", "on_error", "on_predict_end"]
    assert {e.model for e in events} == {"tiny"} and {e.level for e in events} == {"agent"}
    assert [e.t for e in events] == sorted(e.t for e in events)
    first, second = recorder.run_ids()
    assert [e.event for e in recorder.for_run(second)] == ["on_predict_start", "on_error", "on_predict_end"]
    end = recorder.for_run(first)[-1]
    assert end.elapsed_ms > 0 and end.error is None and end.n_states == 1
    assert recorder.for_run(second)[-1].error.startswith("QuestionError: question 'bad'")


def test_recorder_run_ids_match_the_contexts(agent, questions):
    recorder = EventRecorder()
    seen = []
    agent.predict_batch(["a", "b"], questions, hooks=[recorder], on_predict_end=seen.append)
    assert recorder.run_ids() == [seen[0].run_id]
    assert recorder.events[0].t >= seen[0].started_at


def test_recorder_load_and_evict_and_route_events():
    recorder = EventRecorder()
    router = object()  # what a Router passes: contexts with a decision, or a checkpoint name
    recorder.on_route(PredictContext(["x"], {}, run_id="r1", decision={"model": "english"}, router=router,
                                     parent_id="call"))
    recorder.on_evict(PredictContext([], {}, model="english", router=router, parent_id="call"))
    recorder.on_load(PredictContext([], {}, model="multilingual", router=router, parent_id="call"))
    assert [(e.event, e.model, e.level, e.run_id, e.n_states) for e in recorder.events] == [
        ("on_route", "english", "router", "r1", 1), ("on_evict", "english", "router", None, None),
        ("on_load", "multilingual", "router", None, None)]
    assert [r["parent_id"] for r in recorder.to_records()] == ["call"] * 3


def test_recorder_is_bounded_thread_safe_and_clearable(agent, questions):
    recorder = EventRecorder(max_events=10)
    agent.add_hook(recorder)
    threads = [threading.Thread(target=agent.predict, args=(f"s{i}", questions)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(recorder) == 10
    recorder.clear()
    assert recorder.events == []
    with pytest.raises(ValueError, match="max_events"):
        EventRecorder(max_events=0)


# -- cache ----------------------------------------------------------------------------------

def test_seed_cache_miss_runs_forward_and_end_stores_then_hit_skips_forward(agent, questions, forwards):
    cache = PredictionCache()
    agent.add_hook(cache)
    first = agent.predict("hello", questions)
    assert forwards == [1] and len(cache) == 1 and cache.misses == 1
    ends = []
    second = agent.predict("hello", questions, on_predict_end=ends.append)
    assert forwards == [1] and cache.hits == 1
    assert second == first and second is not first
    assert ends[0].results == [second]  # on_predict_end still runs on a hit


def test_cache_serves_only_when_every_state_hits(agent, questions, forwards):
    cache = PredictionCache()
    agent.add_hook(cache)
    agent.predict_batch(["a", "b"], questions)
    agent.predict_batch(["a", "c"], questions)  # partial hit: computed
    assert forwards == [1, 1] and cache.hits == 0
    agent.predict_batch(["c", "b", "a"], questions)
    assert forwards == [1, 1] and cache.hits == 1


def test_cache_keys_cover_state_questions_model_and_budgets(agent, questions, forwards):
    cache = PredictionCache()
    agent.add_hook(cache)
    agent.predict("a", questions)
    agent.predict("a", questions, max_len=64)
    agent.predict("a", questions, head_max_len=40)
    agent.predict("a", {"spam": questions["spam"]})
    agent.predict({"a": 1}, questions)
    assert len(forwards) == 5 and cache.hits == 0
    agent.predict("a", questions, max_len=64)
    assert len(forwards) == 5 and cache.hits == 1
    base = state_key("a", questions, "tiny", 128, 64)
    assert base != state_key("a", questions, "other", 128, 64)
    assert state_key({"k": 1}, {}, "m", 1, 1) != state_key({"k": "1"}, {}, "m", 1, 1)
    assert state_key({"k": 1}, {}, "m", 1, 1) != state_key({"k": True}, {}, "m", 1, 1)


def test_cache_after_a_hook_that_sets_the_budget_keys_on_that_budget(agent, questions, forwards):
    class Budget(BaseHook):
        def on_predict_start(self, ctx):
            ctx.max_len = 90

    cache = PredictionCache()
    agent.add_hook(Budget())
    agent.add_hook(cache)
    agent.predict("a", questions)
    agent.predict("a", questions, max_len=90)
    assert cache.hits == 1 and len(forwards) == 1


def test_cache_does_not_store_failed_calls_and_strips_gating_and_routing(agent, questions):
    cache = PredictionCache()
    agent.add_hook(cache)
    with pytest.raises(RuntimeError):
        agent.predict("a", questions, on_predict_end=_raise_if_results_missing,
                      on_predict_start=_fail)
    assert len(cache) == 0
    gated = agent.predict("b", questions, min_confidence=1.0,
                          on_predict_end=lambda ctx: ctx.results[0].update(routing={"model": "x"}))
    assert gated["answers"]["spam"]["abstention"] == "abstained"
    served = agent.predict("b", questions)
    assert "routing" not in served
    assert all("abstention" not in a and "low_confidence" not in a for a in served["answers"].values())


def _fail(ctx):
    raise RuntimeError("start failed")


def _raise_if_results_missing(ctx):
    assert ctx.results is None


def test_cache_results_are_copies_and_lru_bounded(agent, questions):
    cache = PredictionCache(max_entries=2)
    agent.add_hook(cache)
    first = agent.predict("a", questions)
    first["answers"].clear()
    assert agent.predict("a", questions)["answers"] != {}
    agent.predict("b", questions)
    agent.predict("c", questions)
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0 and cache.hits == 0
    with pytest.raises(ValueError, match="max_entries"):
        PredictionCache(max_entries=0)
