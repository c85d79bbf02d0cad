"""``parallel_recovery`` (default True, as llmbroker 1.11): a model back from a
cooldown that has not answered since is raced with the next model, for ask/chat and streams;
``False`` tries it alone. Against the real local server; a 429 with ``Retry-After: 1`` puts a
model into recovery one second later."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker
from jevlaya_lab.broker.errors import StreamInterruptedError
from jevlaya_lab.local import FaultProfile


def recovering(b: Any, server: Any, name: str = "a", then: FaultProfile | None = None) -> None:
    """Cool ``name`` for one second with a 429 (the call fails over), then let it return
    behaving as ``then``."""
    server.set_fault(name, FaultProfile(status=429, retry_after=1))
    assert b.ask("cool it", trace_id="cool").llm_name != name
    assert (name, "rate_limited") in rows(b, "cool")
    server.set_fault(name, then)
    time.sleep(1.1)
    state = b.get(name).state()
    assert state["phase"] == "available" and state["recovering"]


def rows(b: Any, trace_id: str) -> list[tuple[str, str]]:
    return sorted((r["llm_name"], r["status"]) for r in b.calls(trace_id=trace_id))


def test_a_recovering_slow_model_is_raced_and_loses(broker, server) -> None:
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(latency=1.0))
    started = time.monotonic()
    assert b.ask("x", trace_id="t1").llm_name == "b"
    assert time.monotonic() - started < 0.9  # b answered; the caller did not wait for a
    assert rows(b, "t1") == [("a", "superseded"), ("b", "ok")]
    assert b.ask("y", trace_id="t2").llm_name == "b"  # a has not answered: still raced
    assert rows(b, "t2") == [("a", "superseded"), ("b", "ok")]


def test_without_parallel_recovery_the_model_is_tried_alone(broker, server) -> None:
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(latency=0.5))
    assert b.ask("x", trace_id="t1", parallel_recovery=False).llm_name == "a"
    assert rows(b, "t1") == [("a", "ok")]


def test_a_recovered_model_that_wins_is_asked_alone_again(broker, server) -> None:
    b = broker("a", "b")
    recovering(b, server)
    server.set_fault("b", FaultProfile(latency=1.0))
    assert b.ask("x", trace_id="t1").llm_name == "a"
    assert rows(b, "t1") == [("a", "ok"), ("b", "superseded")]
    assert b.ask("y", trace_id="t2").llm_name == "a"
    assert rows(b, "t2") == [("a", "ok")]  # its success ended the recovery
    assert not b.snapshot()["a"]["recovering"]


def test_a_recovering_model_that_fails_is_refilled_and_the_race_goes_on(broker, server) -> None:
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(status=500))
    server.set_fault("b", FaultProfile(latency=0.5))
    server.set_fault("c", FaultProfile(latency=3.0))
    assert b.ask("x", trace_id="t1").llm_name == "b"
    assert rows(b, "t1") == [("a", "unavailable"), ("b", "ok"), ("c", "superseded")]


def test_a_recovering_model_met_on_failover_is_raced_too(broker, server, cfg) -> None:
    b = broker(models=cfg("b", "a", "c"))
    server.set_fault("b", FaultProfile(status=400))  # rejected, no cooldown: a is asked
    recovering(b, server, then=FaultProfile(latency=1.0))
    server.set_fault("b", FaultProfile(status=500))  # b first, fails; a next, recovering
    assert b.ask("x", trace_id="t1").llm_name == "c"
    assert rows(b, "t1") == [("a", "superseded"), ("b", "unavailable"), ("c", "ok")]


def test_a_stream_shows_the_first_lane_with_text_and_keeps_it(broker, server) -> None:
    """A recovering model whose text comes first stays the answer however slowly it streams (no
    replacement, as with one lane); the other lane's complete answer is kept for another()."""
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(token_delay=0.1))
    # b's text comes half a second later, so "a shows text first" does not hang on which of two
    # lanes started at the same instant the scheduler ran first (flaky on a loaded machine)
    server.set_fault("b", FaultProfile(first_token_delay=0.5))
    with b.stream("x", trace_id="s1") as stream:
        text = "".join(stream)
        assert stream.llm_name == "a" and text == stream.text
        before = server.request_count("b") + server.request_count("c")
        other = stream.another()
        assert other is not None and other.llm_name == "b"
        assert server.request_count("b") + server.request_count("c") == before  # retained
    assert rows(b, "s1") == [("a", "ok"), ("b", "ok")]


def test_a_stream_shows_the_other_lane_when_the_recovering_one_is_silent(broker, server) -> None:
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(first_token_delay=1.0))
    started = time.monotonic()
    with b.stream("x", trace_id="s1") as stream:
        assert "".join(stream) and stream.llm_name == "b"
    assert time.monotonic() - started < 0.9
    assert rows(b, "s1") == [("a", "superseded"), ("b", "ok")]  # closing ended a's lane


def test_a_shown_recovering_lane_that_breaks_raises_and_supersedes_the_other(broker,
                                                                             server) -> None:
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(cut_after=6))
    server.set_fault("b", FaultProfile(first_token_delay=0.5))
    parts: list[str] = []
    with pytest.raises(StreamInterruptedError) as broken:
        with b.stream("x", trace_id="s1") as stream:
            for part in stream:
                parts.append(part)
    assert broken.value.llm_name == "a" and parts  # the delivered deltas stand
    assert rows(b, "s1") == [("a", "unavailable"), ("b", "superseded")]


def test_a_stream_without_parallel_recovery_keeps_one_lane(broker, server) -> None:
    b = broker("a", "b", "c")
    recovering(b, server, then=FaultProfile(first_token_delay=0.5))
    with b.stream("x", trace_id="s1", parallel_recovery=False) as stream:
        assert "".join(stream) and stream.llm_name == "a"
    assert rows(b, "s1") == [("a", "ok")]


def test_a_recovering_model_alone_is_streamed_as_one_lane(broker, server) -> None:
    b = broker("a", "b")
    recovering(b, server, then=FaultProfile(token_delay=0.05))
    b.disable_llm("b")  # no partner for the recovering model
    with b.stream("x", trace_id="s1") as stream:
        assert "".join(stream) and stream.llm_name == "a" and len(stream.lanes) == 1
    assert rows(b, "s1") == [("a", "ok")]


@pytest.mark.parametrize("bad", ["yes", None, 1, 0])
def test_parallel_recovery_must_be_a_bool(broker, server, bad) -> None:
    b = broker("a")
    before = server.request_count("a")
    for call in (lambda: b.ask("x", parallel_recovery=bad),
                 lambda: b.chat([{"role": "user", "content": "x"}], parallel_recovery=bad),
                 lambda: b.stream("x", parallel_recovery=bad)):
        with pytest.raises(ValueError, match="parallel_recovery=.*must be True or False"):
            call()
    assert server.request_count("a") == before


def test_async_chat_races_a_recovering_model(server, cfg, tmp_path: Path) -> None:
    async def main() -> tuple[str, list[tuple[str, str]]]:
        async with AsyncBroker(tmp_path / "j.db", models=cfg("a", "b"), catalog=[]) as b:
            server.set_fault("a", FaultProfile(status=429, retry_after=1))
            await b.ask("cool it")
            server.set_fault("a", FaultProfile(latency=1.0))
            await asyncio.sleep(1.1)
            reply = await b.chat([{"role": "user", "content": "x"}], trace_id="t1")
            got = sorted((r["llm_name"], r["status"]) for r in await b.calls(trace_id="t1"))
            return reply.llm_name, got
    assert asyncio.run(main()) == ("b", [("a", "superseded"), ("b", "ok")])
