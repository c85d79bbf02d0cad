"""StreamView through its traits, reading real Broker streams from the local server."""

from __future__ import annotations

from typing import Any

import pytest

from jevlaya_lab.local import FaultProfile
from jevlaya_lab.widgets import StreamView

from .conftest import XSS


def test_a_single_stream_is_shown_with_model_ttft_and_tokens(broker: Any) -> None:
    b = broker("a")
    view = StreamView(b, XSS, max_tokens=8)
    assert view.wait(30)
    state = view.get_state()
    assert state["status"] == "done" and state["prompt"] == XSS
    (lane,) = state["lanes"]
    assert lane["model"] == "a" and lane["state"] == "won"
    assert lane["text"] == view.stream.text and lane["text"]
    assert lane["ttft_ms"] is not None and lane["tokens"] == view.stream.usage["completion_tokens"]
    assert lane["call_id"] == view.stream.call_id


def test_failover_before_the_first_delta_shows_the_failed_lane(broker: Any, server: Any) -> None:
    """Seed: before the first delta the stream may fail over to another model."""
    server.set_fault("a", FaultProfile(status=503))
    view = StreamView(broker("a", "b"), "hello", max_tokens=4)
    assert view.wait(30)
    states = {lane["model"]: lane["state"] for lane in view.lanes}
    assert states == {"b": "won", "a": "failed"}
    failed = next(lane for lane in view.lanes if lane["model"] == "a")
    assert "503" in failed["detail"]


def test_race_replacement_greys_the_shown_lane_and_shows_the_winner(broker: Any,
                                                                    server: Any) -> None:
    """Seed: fastest_of=2, the first complete answer wins; when it is not the lane shown the
    application replaces everything shown (StreamReplacementError.replacement)."""
    server.set_fault("a", FaultProfile(token_delay=0.08))  # shown first, finishes late
    server.set_fault("b", FaultProfile(first_token_delay=0.15))  # later text, finishes first
    view = StreamView(broker("a", "b"), "write", fastest_of=2, max_tokens=8)
    assert view.wait(30)
    lanes = {lane["model"]: lane for lane in view.lanes}
    assert lanes["a"]["state"] == "replaced" and lanes["b"]["state"] == "won"
    assert lanes["b"]["text"] == view.stream.text
    assert view.stream.llm_name == "b"


def test_another_and_rating_buttons(broker: Any) -> None:
    """Seed: another() gives the next complete answer, None once nothing more can be had;
    record_quality after the end is journaled."""
    b = broker("a", "b")
    view = StreamView(b, "hello", max_tokens=4)
    assert view.wait(30)
    view._on_button(view, {"action": "rate", "score": 1.0}, [])
    view._on_button(view, {"action": "another"}, [])
    assert [a["model"] for a in view.answers] == ["b"]
    view.rate(0.0, answer=0)
    ratings = {r["call_id"]: r["score"] for r in b.ratings()}
    assert ratings == {view.stream.call_id: 1.0, view.answers[0]["call_id"]: 0.0}
    assert view.another() is None
    with pytest.raises(ValueError, match="answer=5: must index view.answers"):
        view.rate(1.0, answer=5)
    view._on_button(view, {"action": "rate"}, [])
    assert "KeyError" in view.error
    view.close()


def test_another_before_the_end_and_bad_broker_are_clear_errors(broker: Any, server: Any) -> None:
    server.set_fault("a", FaultProfile(first_token_delay=0.3))
    view = StreamView(broker("a"), "slow", max_tokens=2)
    with pytest.raises(ValueError, match="status='(waiting|streaming)'.*view.wait"):
        view.another()
    assert view.wait(30)
    with pytest.raises(TypeError, match="broker=str"):
        StreamView("not a broker", "x")


def test_throttled_updates_arrive_in_full_at_the_end(broker: Any, server: Any) -> None:
    server.set_fault("a", FaultProfile(token_delay=0.01))
    view = StreamView(broker("a"), "hello", max_tokens=16, throttle=10.0)
    assert view.wait(30)
    assert view.lanes[0]["text"] == view.stream.text
    assert view._throttle.pushes < 16


def test_when_every_model_fails_the_view_shows_the_error_and_the_failed_attempts(
        broker: Any, server: Any) -> None:
    server.set_fault("a", FaultProfile(status=500))
    server.set_fault("b", FaultProfile(status=429, retry_after=30))
    view = StreamView(broker("a", "b"), "hello", max_tokens=4)
    assert view.wait(30)
    assert view.status == "error" and view.error.split(":")[0].endswith("Error")
    assert sorted((lane["model"], lane["state"]) for lane in view.lanes) == [
        ("a", "failed"), ("b", "failed")]
    assert {lane["detail"].split()[0] for lane in view.lanes} == {"unavailable", "rate_limited"}


def test_a_stream_cut_after_the_first_delta_keeps_the_delivered_text(broker: Any,
                                                                     server: Any) -> None:
    """Seed: after the first delta a broken answer raises StreamInterruptedError and the
    delivered deltas stand."""
    server.set_fault("a", FaultProfile(cut_after=2))
    view = StreamView(broker("a", "b"), "hello", max_tokens=8)
    assert view.wait(30)
    assert view.status == "error" and "StreamInterruptedError" in view.error
    shown = view.lanes[0]
    assert shown["model"] == "a" and shown["state"] == "failed" and shown["text"]


def test_a_race_shows_one_lane_per_model_with_the_loser_greyed(broker: Any, server: Any) -> None:
    """Seed: fastest_of=N runs N distinct models; the first complete answer wins and is shown
    (no replacement); the other lane finishes in the background and is kept for another()."""
    server.set_fault("b", FaultProfile(latency=0.4))
    view = StreamView(broker("a", "b"), "hello", fastest_of=2, max_tokens=6,
                      stream_selection_window=0)
    assert view.wait(30, lanes=True)
    states = {lane["model"]: lane["state"] for lane in view.lanes}
    assert states["a"] == "won" and states["b"] in ("retained", "lost")
    other = view.another()
    assert other is not None and other.llm_name == "b"
    assert {lane["model"]: lane["state"] for lane in view.lanes}["b"] == "another"


def test_a_view_over_a_closed_broker_says_so_and_its_buttons_do_nothing(broker: Any) -> None:
    """The buttons of a view whose broker was closed must not answer
    BrokerClosedError; the view flags the broker as closed (the front end disables them)."""
    b = broker("a", "b")
    view = StreamView(b, "hello", max_tokens=4)
    assert view.wait(30)
    view._on_button(view, {"action": "sync"}, [])  # what a freshly drawn view sends
    assert view.broker_closed is False and view.error == ""
    b.close()
    view._on_button(view, {"action": "sync"}, [])
    assert view.broker_closed is True and view.error == ""
    view._on_button(view, {"action": "another"}, [])
    assert "broker of this view is closed" in view.error and view.answers == []
    view._on_button(view, {"action": "rate", "score": 1}, [])
    assert view.ratings == [] and "closed" in view.error


def test_a_lane_read_here_counts_the_chunks_it_showed(broker: Any) -> None:
    view = StreamView(broker("a"), "hello", max_tokens=6)
    assert view.wait(30)
    (lane,) = view.lanes
    assert lane["chunks"] >= 1 and lane["tokens"] >= 1
    assert lane["chunks"] <= len(lane["text"])
