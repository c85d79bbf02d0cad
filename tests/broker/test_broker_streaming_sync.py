"""Streaming in synchronous code (seed: "Потоковая выдача в синхронном коде"): the same rules
through ``Broker.stream`` and ``for_scope(...).stream``, read with a plain ``for``."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import time

import pytest

from jevlaya_lab.broker import Broker, SyncLLMResult
from jevlaya_lab.broker.errors import (
    LLMTimeoutError,
    StreamInterruptedError,
    StreamReplacementError,
)
from jevlaya_lab.local import FaultProfile


def assert_generation_stopped(b: Broker, server, name: str) -> None:
    """The provider stopped the abandoned answer: the model (one answer at a time) serves the
    next request at once instead of after the ~3 s the rest of the answer would take."""
    server.set_fault(name, None)
    started = time.monotonic()
    assert b.ask("next").llm_name == name
    assert time.monotonic() - started < 2.0


def test_seed_sync_stream_reads_with_for_and_rates_after_the_context(broker) -> None:
    """Rule: with broker.stream(...) as stream: for delta in stream; then record_quality."""
    b = broker("a")
    with b.stream("write", operation="write") as stream:
        parts = [delta for delta in stream]
    assert parts and stream.llm_name == "a" and stream.usage is not None
    stream.record_quality(0.9)
    assert b.ratings()[0]["call_id"] == stream.call_id


def test_seed_sync_exceptions_arise_on_the_same_delta(broker, server) -> None:
    """Rule: each exception is raised at the same part as in async code."""
    server.set_fault("a", FaultProfile(cut_after=4))
    b = broker("a")
    parts = []
    with pytest.raises(StreamInterruptedError):
        for delta in b.stream("write"):
            parts.append(delta)
    assert len(parts) == 4


def test_seed_sync_failover_before_the_first_delta_and_wait_work_unchanged(broker,
                                                                           server) -> None:
    """Rule: everything holds unchanged in sync code: failover before the first part (here a
    429), the wait clock paused while the loop body runs, LLMTimeoutError after the first part
    with the parts kept, and nothing read ahead of the loop."""
    server.set_fault("a", FaultProfile(status=429))
    server.set_fault("c", FaultProfile(token_delay=0.01))
    b = broker("a", "c")
    with b.stream("write", wait=1.0) as stream:
        parts = []
        for delta in stream:
            parts.append(delta)
            time.sleep(0.1)  # the application's time: not counted against wait
            # nothing read ahead: the server had time to send more, the broker took one piece
            assert len(stream._stream._core.final.pieces) == len(parts)
    assert len(parts) > 10 and stream.llm_name == "c"
    assert [r["status"] for r in b.calls()] == ["ok", "rate_limited"]
    server.set_fault("c", FaultProfile(token_delay=0.1))
    parts = []
    with pytest.raises(LLMTimeoutError):
        for delta in b.stream("write", wait=0.5):
            parts.append(delta)
    assert 1 <= len(parts) < 16


def test_seed_sync_replacement_is_rated_through_the_stream(broker, server) -> None:
    """Rule: exc.replacement has text, llm_name, call_id; its record_quality is a coroutine, so
    sync code rates the final answer via stream.record_quality: after the replacement the
    stream names the replacing answer; another() returns a sync result with its own rating."""
    server.set_fault("a", FaultProfile(token_delay=0.08))
    server.set_fault("b", FaultProfile(first_token_delay=0.15))
    b = broker("a", "b")
    stream = b.stream("write", fastest_of=2)
    with pytest.raises(StreamReplacementError) as info:
        for _ in stream:
            pass
    replacement = info.value.replacement
    assert replacement.llm_name == "b" and stream.llm_name == "b"
    assert stream.call_id == replacement.call_id and stream.text == replacement.text
    stream.record_quality(1.0)
    assert b.ratings()[-1]["call_id"] == replacement.call_id
    other = stream.another()
    assert isinstance(other, SyncLLMResult) and other.llm_name == "a"
    other.record_quality(0.0)
    assert stream.another() is None
    stream.close()


def test_seed_sync_stream_closes_when_no_longer_referenced(broker, server) -> None:
    """Rule: the stream is closed on leaving with, on close(), and when nothing refers to it."""
    server.set_fault("a", FaultProfile(token_delay=0.2))
    b = broker("a")
    stream = b.stream("write")
    next(iter(stream))
    assert b.snapshot()["a"]["in_flight"] == 1
    started = time.monotonic()
    del stream  # the last reference: the finalizer runs here
    assert time.monotonic() - started < 0.1  # without blocking
    gc.collect()
    for _ in range(100):
        if b.snapshot()["a"]["in_flight"] == 0:
            break
        time.sleep(0.02)
    assert b.snapshot()["a"]["in_flight"] == 0
    assert [r["status"] for r in b.calls()] == ["cancelled"]
    assert_generation_stopped(b, server, "a")


def test_seed_wsgi_generator_closed_early_cancels_the_request(broker, server) -> None:
    """Rule: a sync web server closing the response body (client gone) closes the generator,
    whose with-block closes the stream and so stops generation."""
    server.set_fault("a", FaultProfile(token_delay=0.2))
    b = broker("a")

    def answer_body(llms, prompt):
        with llms.stream(prompt) as stream:
            for delta in stream:
                yield delta

    body = answer_body(b, "write")
    assert next(body)
    body.close()  # what Django does with StreamingHttpResponse when the client leaves
    assert b.snapshot()["a"]["in_flight"] == 0
    assert [r["status"] for r in b.calls()] == ["cancelled"]
    assert_generation_stopped(b, server, "a")


def test_seed_stream_and_scope_hold_their_broker(server, db, cfg) -> None:
    """Rule: a stream, like a for_scope(...) object, keeps its broker alive until done."""
    stream = Broker(db, models=cfg("a"), catalog=[]).stream("write")
    gc.collect()
    assert "".join(stream) and stream.llm_name == "a"
    scoped = Broker(db, models=cfg("a"), catalog=[]).for_scope("team")
    gc.collect()
    with scoped.stream("write") as s:
        assert "".join(s)
    assert scoped.ask("x").llm_name == "a"


def test_seed_twelve_threads_streaming_through_one_broker(broker) -> None:
    """Rule: many threads may read answers through one broker at the same time."""
    b = broker("a", "b", "c")

    def read(i: int) -> tuple[str, str]:
        with b.stream(f"question {i}") as stream:
            text = "".join(stream)
        return text, stream.call_id

    with cf.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(read, range(12)))
    assert all(text for text, _ in results) and len({c for _, c in results}) == 12
    rows = b.calls()
    assert len(rows) == 12 and {r["status"] for r in rows} == {"ok"}
    assert all(s["in_flight"] == 0 for s in b.snapshot().values())


def test_lanes_and_listeners_show_a_race_as_it_happens(broker, server) -> None:
    """For views (StreamView): every lane is observable, with the shown lane and the winner."""
    server.set_fault("a", FaultProfile(token_delay=0.05))
    server.set_fault("b", FaultProfile(first_token_delay=0.1))
    b = broker("a", "b")
    events = []
    stream = b.stream("write", fastest_of=2)
    stream.add_listener(lambda view: events.append(view))
    stream.add_listener(lambda view: 1 / 0)  # a broken listener never breaks the stream
    with pytest.raises(StreamReplacementError):
        for _ in stream:
            pass
    lanes = {v.llm_name: v for v in stream.lanes}
    assert lanes["a"].shown and not lanes["a"].winner
    assert lanes["b"].winner and lanes["b"].state == "complete"
    assert lanes["b"].text == stream.text
    assert {e.llm_name for e in events} == {"a", "b"}
    assert any(e.state == "complete" and e.llm_name == "b" for e in events)
    stream.close()
    assert {v.llm_name: v.state for v in stream.lanes}["a"] in ("complete", "cancelled")


def test_stream_takes_a_conversation_like_chat(broker) -> None:
    b = broker("a")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    with b.stream(messages) as stream:
        assert "".join(stream) and stream.llm_name == "a"
    with b.for_scope("team").stream(messages) as scoped:
        assert "".join(scoped)
    with pytest.raises(ValueError, match="messages="):
        b.stream([])
