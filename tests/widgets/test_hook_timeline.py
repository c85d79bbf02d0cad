"""HookTimeline: a hook on a real Agent/Router; one lane per run_id, throttled pushes."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jevlaya_lab.decisions.presets import triage_questions
from jevlaya_lab.hooks.recorder import EventRecorder
from jevlaya_lab.widgets import HookTimeline


def test_router_calls_give_one_lane_per_run_id_and_a_router_lane_for_loads(router: Any) -> None:
    """Lifecycle seed: on_route per request, on_load when a checkpoint is built, then
    on_predict_start → on_predict_end per checkpoint group; a request keeps its run_id from
    on_route to on_predict_end, so each request is one lane."""
    timeline = HookTimeline(throttle=0)
    router.add_hook(timeline)
    requests = [{"state": "Where is my parcel? It is late again.", "questions": triage_questions()},
                {"state": "Где моя посылка?", "questions": triage_questions()}]
    router.predict_batch(requests)
    lanes = timeline.lanes()
    assert [e["event"] for e in lanes["router"]] == ["on_load", "on_load"]
    predict_lanes = [evs for lane, evs in lanes.items()
                     if lane != "router" and any(e["event"] == "on_predict_start" for e in evs)]
    assert len(predict_lanes) == 2 and len(lanes) == 3
    for evs in predict_lanes:
        names = [e["event"] for e in evs]
        assert names == ["on_route", "on_predict_start", "on_predict_end"]
        evs = evs[1:]
        assert evs[1]["elapsed_ms"] > 0 and evs[1]["t_ms"] >= evs[0]["t_ms"]
        assert evs[1]["usage"]["input_tokens"] > 0
    routed = [e for evs in lanes.values() for e in evs if e["event"] == "on_route"]
    assert sorted(e["model"] for e in routed) == ["english", "multilingual"]
    assert timeline.get_state()["events"] == timeline.events


def test_the_trace_nests_router_call_then_loads_and_runs_then_agent_runs(router: Any, agent: Any) -> None:
    """Router → load/evict → predict (with its route mark) → the Agent's runs,
    read from the contexts' parent_id; separate Router calls are separate rows, an Agent's own
    run is top-level, and the rows the browser draws are these."""
    from jevlaya_lab.widgets.timeline import trace_rows

    timeline = HookTimeline(throttle=0)
    router.add_hook(timeline)
    english = router.load("english")  # a Router call of its own: on_load
    english.add_hook(timeline)  # the Agent's own runs show one level further in
    try:
        router.predict_batch([{"state": "Where is my parcel?", "questions": triage_questions(), "model": "english"},
                              {"state": "Где моя посылка?", "questions": triage_questions(),
                               "model": "multilingual"}])
        router.route("Hello there")
        agent.predict_batch(["on its own"], triage_questions(), hooks=[timeline])
    finally:
        english.remove_hook(timeline)
        router.remove_hook(timeline)
    rows = timeline.rows
    assert rows == trace_rows(timeline.events)
    shape = [(r["depth"], r["kind"], r["label"].split(" · ")[0]) for r in rows]
    assert shape == [
        (0, "call", "router call 1"), (1, "load", "load english"),
        (0, "call", "router call 2"), (1, "run", "run 1"), (2, "run", "run 2"),
        (1, "load", "load multilingual"), (1, "run", "run 3"),
        (0, "call", "router call 3"), (1, "run", "route → english"),
        (0, "run", "run 4")], shape
    call, request, agent_run, _, second = rows[2:7]
    assert call["label"] == "router call 2 · 2 requests" and rows[7]["label"] == "router call 3 · 1 request"
    assert request["label"] == "run 1 · english · 1 state" and second["label"].startswith("run 3 · multilingual")
    assert [timeline.events[i]["event"] for i in request["marks"]] == ["on_route"]
    assert call["span"][0] <= request["span"][0] <= agent_run["span"][0] <= agent_run["span"][1] \
        <= request["span"][1] <= call["span"][1]
    parents = [e["parent_id"] for e in timeline.events]
    assert len(set(parents[:-2])) == 3 and None not in parents[:-2] and parents[-2:] == [None, None]


def test_a_failing_call_gets_an_on_error_event_with_the_error_text(agent: Any) -> None:
    """Lifecycle seed failure path: on_error runs before on_predict_end, both see ctx.error."""
    timeline = HookTimeline(throttle=0)

    def boom(ctx: Any) -> None:
        raise RuntimeError("<b>start hook failed</b>")

    with pytest.raises(RuntimeError):
        agent.predict_batch(["x"], triage_questions(), hooks=[timeline], on_predict_start=boom)
    (lane,) = timeline.lanes().values()
    assert [e["event"] for e in lane] == ["on_predict_start", "on_error", "on_predict_end"]
    assert lane[1]["error"] == "RuntimeError: <b>start hook failed</b>"


def test_concurrent_calls_from_threads_each_get_a_lane(agent: Any) -> None:
    timeline = HookTimeline(throttle=0.05)
    with agent.hooks_installed(timeline):
        threads = [threading.Thread(target=agent.predict_batch, args=(["s"], triage_questions()))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    lanes = timeline.lanes()
    assert len(lanes) == 6
    assert all([e["event"] for e in evs] == ["on_predict_start", "on_predict_end"]
               for evs in lanes.values())


def test_updates_are_throttled_but_never_lost(agent: Any) -> None:
    timeline = HookTimeline(throttle=60.0)
    for _ in range(5):
        agent.predict_batch(["s"], triage_questions(), hooks=[timeline])
    assert len(timeline.events) == 1  # the first event went out at once, the rest wait
    assert timeline._throttle.pushes == 1
    timeline.flush()
    assert len(timeline.events) == 10


def test_from_records_replays_an_event_recorder(agent: Any) -> None:
    recorder = EventRecorder()
    for _ in range(3):
        agent.predict_batch(["s"], triage_questions(), hooks=[recorder])
    timeline = HookTimeline.from_records(recorder.to_records())
    assert list(timeline.lanes()) == recorder.run_ids()
    assert timeline.events[0]["t_ms"] == 0.0
    with pytest.raises(ValueError, match=r"records\[0\]: needs 'event' and 't'"):
        HookTimeline.from_records([{"event": "on_route"}])
    with pytest.raises(ValueError, match="max_events=0"):
        HookTimeline(max_events=0)


def test_from_records_accepts_the_analysis_decisions_frame(router: Any) -> None:
    """Fed from the journal side: analysis.decision_events(recorder) (a DataFrame whose
    load/evict rows have no run_id) replays onto the same lanes."""
    from jevlaya_lab import analysis

    recorder = EventRecorder()
    router.predict_batch([{"state": "Где моя посылка?", "questions": triage_questions()}],
                         hooks=[recorder])
    frame = analysis.decision_events(recorder)
    timeline = HookTimeline.from_records(frame)
    lanes = timeline.lanes()
    assert [e["event"] for e in lanes["router"]] == ["on_load"]
    assert set(lanes) == {"router", *recorder.run_ids()}
    assert len(timeline.events) == len(frame)
    shape = [(r["depth"], r["kind"], r["label"]) for r in timeline.rows]
    assert shape == [(0, "call", "router call 1 · 1 request"), (1, "load", "load multilingual"),
                     (1, "run", "run 1 · multilingual · 1 state")]
    # records without parent_id (written before it existed) still nest under one router row
    older = HookTimeline.from_records(frame.drop(columns=["parent_id"]))
    assert [(r["depth"], r["label"].split(" · ")[0]) for r in older.rows] == [
        (0, "router"), (1, "load multilingual"), (1, "run 1")]
