"""Parity with llmbroker 1.11: the behaviours a user porting code relies on, each
against the real local server (keys after a refusal: ``test_broker_keys.py``)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from jevlaya_lab.broker import Broker
from jevlaya_lab.broker.errors import (
    BrokerClosedError,
    LLMTimeoutError,
    ProviderError,
    StreamInterruptedError,
    UnknownCallError,
)
from jevlaya_lab.broker.quality import WINDOW
from jevlaya_lab.local import FaultProfile


# -- 2. calls(limit=N): the newest N, newest first, with their latest score ------------------
def test_calls_limit_gives_the_newest_rows_newest_first_with_their_latest_score(broker) -> None:
    b = broker("a")
    ids = [b.ask("x", trace_id=f"t{i}").call_id for i in range(3)]
    assert [r["trace_id"] for r in b.calls(limit=2)] == ["t2", "t1"]
    assert [r["trace_id"] for r in b.calls()] == ["t2", "t1", "t0"]
    b.record_quality(0.2, call_id=ids[1])
    b.record_quality(0.9, call_id=ids[1])  # the latest rating is the row's score
    assert [r["score"] for r in b.calls()] == [None, 0.9, None]
    assert b.calls(trace_id="t1", limit=1)[0]["score"] == 0.9
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="limit="):
            b.calls(limit=bad)


# -- 3. quality over the last 30 ratings; a re-rating replaces --------------------------------
def test_quality_follows_the_last_30_ratings_of_a_model(broker, cfg, db: Path) -> None:
    """50 good ratings and then 30 bad ones: only the bad ones count now, so the model falls
    behind one without ratings and is demoted (all 80 counted, it would still lead:
    (5 * 0.5 + 50) / 85 = 0.62 > 0.5). A new broker on the journal agrees."""
    b = broker(models=cfg("a", "b"))
    b.disable_llm("b")  # every answer comes from a
    for score in [1.0] * 50 + [0.0] * WINDOW:
        b.ask("x", operation="op").record_quality(score)
    b.enable_llm("b")
    assert b.stats(operation="op")["a"]["ratings"] == WINDOW
    assert b.snapshot()["a"]["demoted_for"] == ["op"]
    assert b.ask("x", operation="op").llm_name == "b"
    b.close()
    with Broker(db, models=cfg("a", "b"), catalog=[]) as again:
        assert again.ask("x", operation="op").llm_name == "b"


def test_rating_the_same_answer_again_replaces_its_rating(broker) -> None:
    b = broker("a", "b")
    answer = b.ask("x", operation="op")
    for _ in range(12):  # twelve 0.0 ratings of one answer would demote a if they all counted
        answer.record_quality(0.0)
    answer.record_quality(0.8)
    stats = b.stats(operation="op")["a"]
    assert stats["ratings"] == 1 and stats["mean_rating"] == 0.8
    assert b.snapshot()["a"]["demoted_for"] == []
    assert len(b.ratings()) == 13  # the journal keeps every rating row


# -- 4. wait=None waits for the pool without a bound; bad waits are ValueErrors ---------------
def test_wait_none_waits_for_a_model_cooling_longer_than_a_minute(broker, server) -> None:
    """Before: a cooldown beyond 60 s ended ``wait=None`` at once. Now the call waits (here
    until the broker is closed under it, the only way to end it quickly)."""
    server.set_fault("a", FaultProfile(status=429, retry_after=90))
    b = broker("a")
    with pytest.raises(Exception):  # noqa: B017 - the first call: a is rate limited
        b.ask("x", wait=0)
    server.set_fault("a", None)
    outcome: list[BaseException | str] = []

    def call() -> None:
        try:
            outcome.append(b.ask("x").llm_name)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)
    thread = threading.Thread(target=call)
    thread.start()
    thread.join(1.5)
    assert thread.is_alive() and not outcome  # still waiting for a's cooldown
    b.close()
    thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], BrokerClosedError)


@pytest.mark.parametrize("wait", [-1, -0.5, math.nan, -math.inf])
def test_negative_or_nan_wait_is_a_value_error(broker, wait: float) -> None:
    b = broker("a")
    for call in (lambda: b.ask("x", wait=wait), lambda: b.stream("x", wait=wait),
                 lambda: b.direct("a").ask("x", wait=wait)):
        with pytest.raises(ValueError, match="wait="):
            call()
    assert b.calls() == []


# -- 5. every keyword is validated; nothing unintended reaches a provider ---------------------
@pytest.mark.parametrize("kwargs", [{"fastestof": 2}, {"maxtokens": 5},
                                    {"wiat": 3}, {"timeout": 2}])
def test_unknown_keywords_are_type_errors_before_any_request(broker, server,
                                                             kwargs: dict) -> None:
    b = broker("a")
    before = server.request_count("a")
    for call in (lambda: b.ask("x", **kwargs), lambda: b.stream("x", **kwargs),
                 lambda: b.for_scope("s").ask("x", **kwargs),
                 lambda: b.direct("a").ask("x", **kwargs),
                 lambda: b.direct("a").stream("x", **kwargs)):
        with pytest.raises(TypeError, match=next(iter(kwargs))):
            call()
    assert server.request_count("a") == before and b.calls() == []


def test_response_format_and_extra_body_reach_the_provider_on_purpose(broker) -> None:
    """The local server validates what it gets: a field it does not know is a 400, so an
    answer proves the body carried only what was meant."""
    b = broker("a")
    answer = b.ask("x", response_format={"type": "text"}, max_tokens=3)
    assert answer.text
    with pytest.raises(ValueError, match="response_format="):
        b.ask("x", response_format="json")
    with pytest.raises(ValueError, match="extra_body"):
        b.ask("x", extra_body={"model": "other"})
    with pytest.raises(ValueError, match="extra_body"):
        b.ask("x", max_tokens=3, extra_body={"max_tokens": 4})


# -- 6. direct(): the same validation and timeouts --------------------------------------------
def test_direct_validates_like_the_pool_and_applies_wait(broker, server) -> None:
    b = broker("a", "b")
    with pytest.raises(ValueError, match="model="):
        b.direct("a").ask("x", model="x")  # no overriding the request's model
    with pytest.raises(ValueError, match="model="):
        b.direct("a").stream("x", model="x")
    server.set_fault("a", FaultProfile(first_token_delay=3.0))
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError, match="wait=0.5"):
        with b.direct("a").stream("x", wait=0.5) as stream:
            list(stream)
    assert time.monotonic() - started < 2.5
    with pytest.raises(LLMTimeoutError, match="wait=0.5"):
        b.direct("a").ask("x", wait=0.5)
    server.set_fault("b", FaultProfile(token_delay=0.05))  # a is still busy with its delay
    with b.direct("b").stream("x", wait=1.0, max_tokens=6) as stream:
        parts = []
        for part in stream:
            parts.append(part)
            time.sleep(0.3)  # the consumer's time is not the provider's: the clock pauses
    assert len(parts) >= 4 and stream.text == "".join(parts)  # >= 1.2 s held > wait=1.0
    assert b.calls() == []  # direct calls write no journal row


# -- 8. streams and errors: one reader at a time, llmbroker's attributes ----------------------
def test_two_concurrent_readers_of_one_stream_are_refused(abroker, server) -> None:
    import asyncio

    server.set_fault("a", FaultProfile(token_delay=0.05))

    async def main() -> None:
        async with abroker("a") as broker:
            stream = broker.stream("hi", max_tokens=6)

            async def read() -> str:
                return "".join([part async for part in stream])
            first, second = await asyncio.gather(read(), read(), return_exceptions=True)
            assert isinstance(second, RuntimeError) and "one place at a time" in str(second)
            assert first == stream.text and first
            assert (await broker.calls())[0]["status"] == "ok"  # the answer was read whole
    asyncio.run(main())


def test_errors_carry_the_provider_detail_and_the_models_involved(broker, server) -> None:
    b = broker("a", "b")
    server.set_fault("a", FaultProfile(status=400))
    server.set_fault("b", FaultProfile(status=400))
    with pytest.raises(ProviderError) as info:
        b.ask("x")
    assert info.value.status == 400 and "simulated HTTP 400" in info.value.detail
    server.set_fault("a", FaultProfile(cut_after=2))
    server.set_fault("b", None)
    with pytest.raises(StreamInterruptedError) as broken:
        with b.stream("x") as stream:
            list(stream)
    assert broken.value.llm_name == "a"
    with pytest.raises(UnknownCallError, match="no journaled answer"):
        b.record_quality(0.5, call_id="no-such-call")
    assert issubclass(UnknownCallError, ValueError)  # what older code caught


# -- 7. pool administration: count() and the degraded flag -------------------------------------
def test_snapshot_says_when_the_pool_is_degraded(broker, server) -> None:
    """The pool is degraded when no model could take a call now (cooling, refused, disabled)."""
    b = broker("a", "b")
    assert b.count() == 2
    snap = b.snapshot()
    assert snap.usable == ["a", "b"] and not snap.degraded
    server.set_fault("a", FaultProfile(status=429, retry_after=30))
    server.set_fault("b", FaultProfile(status=403))
    with pytest.raises(Exception):  # noqa: B017 - a cools, b's key is refused
        b.ask("x", wait=0)
    snap = b.snapshot()
    assert snap.usable == [] and snap.degraded
    assert snap["a"]["cooldown_until"] is not None and b.count() == 2
