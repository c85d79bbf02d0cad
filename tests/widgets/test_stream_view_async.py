"""StreamView over an AsyncBroker: the stream is read by a task on the running event loop
(``asyncio.run`` here, the kernel's loop in JupyterLab), against the real local server; the
same lanes, answers, ratings and throttling as over the sync Broker, awaited instead of
blocking."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from jevlaya_lab.local import FaultProfile
from jevlaya_lab.widgets import StreamView

from .conftest import XSS


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 60))


async def until(check: Callable[[], Any], timeout: float = 15.0) -> None:
    """Yield to the loop (never block it) until ``check()`` holds."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def test_a_stream_is_read_by_a_task_on_the_running_loop(async_broker: Any) -> None:
    async def main() -> None:
        async with async_broker("a") as b:
            pushed_from: set[int] = set()
            view = StreamView(b, XSS, max_tokens=8)
            view.observe(lambda _change: pushed_from.add(threading.get_ident()),
                         names=["lanes", "status"])
            # the constructor returned without reading: the loop does it once we yield
            assert view.status == "waiting" and view.lanes == []
            assert await view.wait_async(30)
            state = view.get_state()
            assert state["status"] == "done" and state["prompt"] == XSS
            (lane,) = state["lanes"]
            assert lane["model"] == "a" and lane["state"] == "won"
            assert lane["text"] == view.stream.text and lane["text"]
            assert lane["ttft_ms"] is not None
            assert lane["tokens"] == view.stream.usage["completion_tokens"]
            assert lane["call_id"] == view.stream.call_id
            assert pushed_from == {threading.get_ident()}  # every push came from the loop
    run(main)


def test_failover_before_the_first_delta_shows_the_failed_lane(async_broker: Any,
                                                               server: Any) -> None:
    """Seed: before the first delta the stream may fail over to another model."""
    async def main() -> None:
        server.set_fault("a", FaultProfile(status=503))
        async with async_broker("a", "b") as b:
            view = StreamView(b, "hello", max_tokens=4)
            assert await view.wait_async(30)
            states = {lane["model"]: lane["state"] for lane in view.lanes}
            assert states == {"b": "won", "a": "failed"}
            failed = next(lane for lane in view.lanes if lane["model"] == "a")
            assert "503" in failed["detail"]
    run(main)


def test_race_replacement_greys_the_shown_lane_and_shows_the_winner(async_broker: Any,
                                                                    server: Any) -> None:
    """Seed: fastest_of=2, the first complete answer wins; when it is not the lane shown the
    application replaces everything shown (StreamReplacementError.replacement)."""
    async def main() -> None:
        server.set_fault("a", FaultProfile(token_delay=0.08))  # shown first, finishes late
        server.set_fault("b", FaultProfile(first_token_delay=0.15))  # later, finishes first
        async with async_broker("a", "b") as b:
            view = StreamView(b, "write", fastest_of=2, max_tokens=8)
            assert await view.wait_async(30)
            lanes = {lane["model"]: lane for lane in view.lanes}
            assert lanes["a"]["state"] == "replaced" and lanes["b"]["state"] == "won"
            assert lanes["b"]["text"] == view.stream.text
            assert view.stream.llm_name == "b"
    run(main)


def test_a_race_keeps_the_loser_for_another(async_broker: Any, server: Any) -> None:
    """Seed: fastest_of=N runs N distinct models; the first complete answer wins and is shown;
    the other lane finishes in the background and another() returns it."""
    async def main() -> None:
        server.set_fault("b", FaultProfile(latency=0.4))
        async with async_broker("a", "b") as b:
            view = StreamView(b, "hello", fastest_of=2, max_tokens=6,
                              stream_selection_window=0)
            assert await view.wait_async(30, lanes=True)
            states = {lane["model"]: lane["state"] for lane in view.lanes}
            assert states["a"] == "won" and states["b"] in ("retained", "lost")
            other = await view.another_async()
            assert other is not None and other.llm_name == "b"
            assert {lane["model"]: lane["state"] for lane in view.lanes}["b"] == "another"
    run(main)


def test_another_and_rating_buttons_run_on_the_loop(async_broker: Any) -> None:
    """Seed: another() gives the next complete answer, None once nothing more can be had;
    record_quality after the end is journaled."""
    async def main() -> None:
        async with async_broker("a", "b") as b:
            view = StreamView(b, "hello", max_tokens=4)
            assert await view.wait_async(30)
            view._on_button(view, {"action": "rate", "score": 1.0}, [])
            view._on_button(view, {"action": "another"}, [])
            await until(lambda: view.answers and view.ratings)
            assert [a["model"] for a in view.answers] == ["b"]
            await view.rate_async(0.0, answer=0)
            ratings = {r["call_id"]: r["score"] for r in await b.ratings()}
            assert ratings == {view.stream.call_id: 1.0, view.answers[0]["call_id"]: 0.0}
            assert await view.another_async() is None
            with pytest.raises(ValueError, match="answer=5: must index view.answers"):
                await view.rate_async(1.0, answer=5)
            view._on_button(view, {"action": "rate"}, [])
            await until(lambda: "KeyError" in view.error)
            await view.aclose()
    run(main)


def test_the_wrong_kind_of_helper_and_no_running_loop_are_clear_errors(
        async_broker: Any, broker: Any, server: Any) -> None:
    server.set_fault("a", FaultProfile(first_token_delay=0.3))

    async def main() -> None:
        async with async_broker("a") as b:
            view = StreamView(b, "slow", max_tokens=2)
            with pytest.raises(ValueError, match=r"status='waiting'.*await view.wait_async\(\)"):
                await view.another_async()
            for blocking, twin in ((view.wait, "wait_async"), (view.another, "another_async"),
                                   (lambda: view.rate(1.0), "rate_async"),
                                   (view.refresh_lanes, "refresh_lanes_async")):
                with pytest.raises(TypeError, match=rf"reads an AsyncBroker; use await "
                                                    rf"view\.{twin}\(\)"):
                    blocking()
            assert await view.wait_async(30)
            assert [lane["model"] for lane in await view.refresh_lanes_async()] == ["a"]
    run(main)

    sync_view = StreamView(broker("a"), "x", max_tokens=2)
    assert sync_view.wait(30)
    with pytest.raises(TypeError, match=r"wait_async\(\): this view reads a Broker.*view\.wait"):
        asyncio.run(sync_view.wait_async())
    with pytest.raises(TypeError, match=r"aclose\(\): .*use view\.close\(\)"):
        asyncio.run(sync_view.aclose())

    outside = async_broker("a")
    try:
        with pytest.raises(TypeError, match="broker=AsyncBroker: .*no loop is running here.*"
                                            "sync jevlaya_lab.Broker"):
            StreamView(outside, "x")
    finally:
        asyncio.run(outside.aclose())


def test_throttled_updates_arrive_in_full_at_the_end(async_broker: Any, server: Any) -> None:
    async def main() -> None:
        server.set_fault("a", FaultProfile(token_delay=0.01))
        async with async_broker("a") as b:
            view = StreamView(b, "hello", max_tokens=16, throttle=10.0)
            assert await view.wait_async(30)
            assert view.lanes[0]["text"] == view.stream.text
            assert view._throttle.pushes < 16
    run(main)


def test_when_every_model_fails_the_view_shows_the_error_and_the_failed_attempts(
        async_broker: Any, server: Any) -> None:
    async def main() -> None:
        server.set_fault("a", FaultProfile(status=500))
        server.set_fault("b", FaultProfile(status=429, retry_after=30))
        async with async_broker("a", "b") as b:
            view = StreamView(b, "hello", max_tokens=4)
            assert await view.wait_async(30)
            assert view.status == "error" and view.error.startswith("NoLLMAvailableError")
            assert sorted((lane["model"], lane["state"]) for lane in view.lanes) == [
                ("a", "failed"), ("b", "failed")]
            assert {lane["detail"].split()[0] for lane in view.lanes} == {"unavailable",
                                                                         "rate_limited"}
    run(main)


def test_a_stream_cut_after_the_first_delta_keeps_the_delivered_text(async_broker: Any,
                                                                     server: Any) -> None:
    """Seed: after the first delta a broken answer raises StreamInterruptedError and the
    delivered deltas stand."""
    async def main() -> None:
        server.set_fault("a", FaultProfile(cut_after=2))
        async with async_broker("a", "b") as b:
            view = StreamView(b, "hello", max_tokens=8)
            assert await view.wait_async(30)
            assert view.status == "error" and "StreamInterruptedError" in view.error
            shown = view.lanes[0]
            assert shown["model"] == "a" and shown["state"] == "failed" and shown["text"]
    run(main)


def test_closing_the_view_mid_stream_cancels_and_journals_the_attempt(async_broker: Any,
                                                                      server: Any) -> None:
    """Seed: aclose() cancels the provider request and journals the lane shown as
    cancelled."""
    async def main() -> None:
        server.set_fault("a", FaultProfile(token_delay=0.2))
        async with async_broker("a") as b:
            view = StreamView(b, "hello", max_tokens=32)
            await until(lambda: view.lanes and view.lanes[0]["text"])
            await view.aclose()
            assert await view.wait_async(30, lanes=True)
            (row,) = await b.calls(trace_id=view.trace_id)
            assert row["status"] == "cancelled" and view.lanes[0]["state"] == "cancelled"
            assert 0 < view.lanes[0]["tokens"] < 32  # cut well before the whole answer
    run(main)
