"""Closing a broker with calls in flight: every started attempt keeps exactly one journal row
(leaving closes owned streams, waits for journal writes, then closes HTTP and storage;
one row per attempt), callers get ``BrokerClosedError``, nothing hangs. Also: no attempt is
started with almost none of ``wait`` left (it could only time out and cool its model)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker, Broker, BrokerClosedError
from jevlaya_lab.broker.errors import NoLLMAvailableError
from jevlaya_lab.journal import open_store
from jevlaya_lab.local import FaultProfile

SLOW = FaultProfile(latency=3.0)  # long enough that a call is surely in flight at close


def requests(server: Any, *names: str) -> int:
    return sum(server.request_count(n) for n in names)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def rows_in_file(db: Path) -> list[dict[str, Any]]:
    store = open_store(db)
    try:
        return store.attempts()
    finally:
        store.close()


def test_aclose_cancels_calls_in_flight_and_journals_each_attempt_once(abroker, server, db,
                                                                       cfg):
    """aclose() cancels asks, chats and races in flight (each attempt journaled
    'cancelled' before the writer closes), their callers get BrokerClosedError, new calls are
    refused, and closing does not wait for the slow provider."""
    before = requests(server, "a", "b")

    async def main() -> tuple[list[BaseException | Any], float]:
        broker: AsyncBroker = abroker(models=cfg("a", "b", parallel=4))
        async with broker:
            server.set_fault("a", SLOW)
            server.set_fault("b", SLOW)
            calls = [asyncio.ensure_future(broker.ask("one", operation="close")),
                     asyncio.ensure_future(broker.chat([{"role": "user", "content": "two"}])),
                     asyncio.ensure_future(broker.ask("race", fastest_of=2))]
            await until(lambda: requests(server, "a", "b") - before == 4)
            started = time.monotonic()
            await broker.aclose()
            took = time.monotonic() - started
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            with pytest.raises(BrokerClosedError, match="is closed; it takes no new calls"):
                await broker.ask("after")
        return outcomes, took

    outcomes, took = asyncio.run(main())
    assert took < 2.0  # the 3 s provider latency was not waited for
    assert all(isinstance(o, BrokerClosedError) and "closed while this call was in flight"
               in str(o) for o in outcomes)
    assert all(isinstance(o, RuntimeError) for o in outcomes)  # a usage error, too
    rows = rows_in_file(db)
    assert len(rows) == 4 == requests(server, "a", "b") - before
    assert len({r["call_id"] for r in rows}) == 4
    assert {r["status"] for r in rows} == {"cancelled"}


def test_aclose_with_grace_lets_calls_in_flight_finish(abroker, server, db, cfg):
    """aclose(grace=s): calls that finish within the grace period return their answers and
    journal 'ok'; an invalid grace is refused with a message naming it."""
    async def main() -> list[Any]:
        broker = abroker(models=cfg("a", parallel=4))
        async with broker:
            server.set_fault("a", FaultProfile(latency=0.3))
            calls = [asyncio.ensure_future(broker.ask(f"q{i}", max_tokens=3)) for i in range(3)]
            await until(lambda: broker._rt.built
                        and broker._rt.pool.states["a"].in_flight == 3)
            with pytest.raises(ValueError, match="grace=-1"):
                await broker.aclose(grace=-1)
            await broker.aclose(grace=10)
            return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert all(r.text for r in results)
    rows = rows_in_file(db)
    assert sorted(r["call_id"] for r in rows) == sorted(r.call_id for r in results)
    assert {r["status"] for r in rows} == {"ok"}


def test_a_caller_cancelling_its_own_call_still_gets_cancelled_error(abroker, server, db):
    """Only a cancellation by closing becomes BrokerClosedError; the caller's own timeout stays
    a TimeoutError, and its attempt is journaled 'cancelled' once."""
    async def main() -> None:
        async with abroker("a") as broker:
            server.set_fault("a", SLOW)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await broker.ask("x")

    asyncio.run(main())
    assert [r["status"] for r in rows_in_file(db)] == ["cancelled"]


def test_concurrent_aclose_calls_return_after_the_journal_is_written(abroker, server, db):
    """Idempotent close: a second aclose() running at the same time returns only once the first
    has flushed the journal, so both see every row in the file."""
    async def main() -> list[int]:
        broker = abroker("a")
        await broker.__aenter__()
        server.set_fault("a", SLOW)
        call = asyncio.ensure_future(broker.ask("x"))
        await until(lambda: broker._rt.pool.states["a"].in_flight == 1)  # type: ignore[union-attr]
        seen: list[int] = []

        async def close_and_count() -> None:
            await broker.aclose()
            seen.append(len(rows_in_file(db)))
        await asyncio.gather(close_and_count(), close_and_count())
        with pytest.raises(BrokerClosedError):
            await call
        return seen

    assert asyncio.run(main()) == [1, 1]


def test_sync_close_from_another_thread_while_many_threads_call(server, db, cfg):
    """Many threads may call at once: eight threads each get one answer, then
    start a slow call; Broker.close() from two other threads at once: every thread ends (none
    hangs), each slow call raises BrokerClosedError, and each attempt the server received has
    exactly one row in the SQLite file."""
    before = requests(server, "a", "b")
    broker = Broker(db, models=cfg("a", "b", parallel=8), catalog=[])
    answered, slow_now = threading.Barrier(9), threading.Barrier(9)
    answers: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def ask_twice(i: int) -> None:
        result = broker.ask(f"thread {i}", max_tokens=2)
        with lock:
            answers.append(result.call_id)
        answered.wait()
        slow_now.wait()
        try:
            broker.ask(f"slow {i}", max_tokens=2)
        except BaseException as exc:  # noqa: BLE001 - recorded and checked below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=ask_twice, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    answered.wait(timeout=10)
    server.set_fault("a", SLOW)
    server.set_fault("b", SLOW)
    slow_now.wait(timeout=10)
    deadline = time.monotonic() + 5
    while requests(server, "a", "b") - before < 16:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    closers = [threading.Thread(target=broker.close) for _ in range(2)]
    for t in closers:
        t.start()
    for t in threads + closers:
        t.join(timeout=15)
    assert not any(t.is_alive() for t in threads + closers)
    assert len(errors) == 8 and all(isinstance(e, BrokerClosedError) for e in errors)
    rows = rows_in_file(db)
    assert len(rows) == len({r["call_id"] for r in rows}) == 16
    assert requests(server, "a", "b") - before == 16
    assert {r["call_id"] for r in rows if r["status"] == "ok"} == set(answers)
    assert [r["status"] for r in rows].count("cancelled") == 8
    with pytest.raises(BrokerClosedError, match="no new calls"):
        broker.ask("after")


def test_sync_close_with_a_stream_and_an_ask_in_flight(server, db, cfg):
    """Closing with a stream mid-answer and an ask in flight on another thread: both attempts
    are journaled, the asking thread gets BrokerClosedError."""
    broker = Broker(db, models=cfg("a", "b"), catalog=[])
    stream = broker.stream("tell me", max_tokens=50)
    first = next(iter(stream))
    server.set_fault("b", SLOW)
    server.set_fault("a", SLOW)
    outcome: list[BaseException | Any] = []

    def ask() -> None:
        try:
            outcome.append(broker.ask("slow"))
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)
    thread = threading.Thread(target=ask)
    thread.start()
    deadline = time.monotonic() + 5
    while sum(s["in_flight"] for s in broker.snapshot().values()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    broker.close()
    thread.join(timeout=10)
    assert not thread.is_alive() and first
    assert isinstance(outcome[0], BrokerClosedError)
    assert sorted(r["status"] for r in rows_in_file(db)) == ["cancelled", "cancelled"]


@pytest.mark.parametrize("kind", ["ask", "stream"])
def test_no_attempt_starts_with_almost_no_wait_left(abroker, server, db, cfg, kind):
    """Known gap, fixed: a call that waited for a free slot until `wait` had nearly run out does
    not start an attempt that could only time out (and cool the model unfairly); it reports
    NoLLMAvailableError(reason="timeout"), journals nothing, and the model stays usable."""
    wait = 1.0

    async def main() -> None:
        async with abroker(models=cfg("a", parallel=1)) as broker:
            holder = broker.stream("hold the only slot", max_tokens=50)
            await holder.__anext__()
            server.set_fault("a", FaultProfile(first_token_delay=0.5, latency=0.5))
            loop = asyncio.get_running_loop()
            # free the slot when only 0.03 s of the waiting call's budget is left
            loop.call_later(wait - 0.03, lambda: asyncio.ensure_future(holder.aclose()))
            with pytest.raises(NoLLMAvailableError) as caught:
                if kind == "ask":
                    await broker.ask("late", wait=wait)
                else:
                    async for _ in broker.stream("late", wait=wait):
                        pass
            assert caught.value.reason == "timeout"
            state = (await broker.snapshot())["a"]
            assert state["cooldown_until"] is None and state["in_flight"] == 0
            server.set_fault("a", None)
            assert (await broker.ask("still usable", max_tokens=2)).llm_name == "a"

    asyncio.run(main())
    rows = rows_in_file(db)
    assert [r["status"] for r in rows] == ["cancelled", "ok"]  # the holder, the last ask


def test_a_stream_waiting_for_a_slot_when_the_broker_closes_raises_and_adds_no_row(
        abroker, server, db, cfg, caplog):
    """A stream queued behind a busy model when aclose() runs starts no attempt afterwards (it
    could not be journaled): its reader gets BrokerClosedError; only the holder's row exists."""
    async def main() -> None:
        async with abroker(models=cfg("a", parallel=1)) as broker:
            holder = broker.stream("hold the only slot", max_tokens=50)
            await holder.__anext__()
            waiting = asyncio.ensure_future(broker.stream("queued", wait=30).__anext__())
            await asyncio.sleep(0.1)
            assert not waiting.done()
            await broker.aclose()
            with pytest.raises(BrokerClosedError):
                await asyncio.wait_for(waiting, 5)

    asyncio.run(main())
    assert [r["status"] for r in rows_in_file(db)] == ["cancelled"]
    assert "not journaled" not in caplog.text
