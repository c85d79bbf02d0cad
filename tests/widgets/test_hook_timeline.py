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
    on_predict_start → on_predict_end per checkpoint group (each with its own run_id)."""
    timeline = HookTimeline(throttle=0)
    router.add_hook(timeline)
    requests = [{"state": "Where is my parcel? It is late again.", "questions": triage_questions()},
                {"state": "Где моя посылка?", "questions": triage_questions()}]
    router.predict_batch(requests)
    lanes = timeline.lanes()
    assert [e["event"] for e in lanes["router"]] == ["on_load", "on_load"]
    predict_lanes = [evs for lane, evs in lanes.items()
                     if lane != "router" and any(e["event"] == "on_predict_start" for e in evs)]
    assert len(predict_lanes) == 2
    for evs in predict_lanes:
        names = [e["event"] for e in evs]
        assert names == ["on_predict_start", "on_predict_end"]
        assert evs[1]["elapsed_ms"] > 0 and evs[1]["t_ms"] >= evs[0]["t_ms"]
        assert evs[1]["usage"]["input_tokens"] > 0
    routed = [e for evs in lanes.values() for e in evs if e["event"] == "on_route"]
    assert sorted(e["model"] for e in routed) == ["english", "multilingual"]
    assert timeline.get_state()["events"] == timeline.events


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
