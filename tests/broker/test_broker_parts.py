"""The broker's parts, each used alone: the transport against the real local server, the call
journal over a real SQLite store, one attempt given a pool, a journal and a transport, the gate
closing calls in flight, and a cooldown book shared by two pools."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import LLMConfig
from jevlaya_lab.broker.attempt import Attempts
from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import BrokerClosedError, ProviderError, UnknownCallError
from jevlaya_lab.broker.gate import Gate
from jevlaya_lab.broker.http import Failure, build_body, read_deltas
from jevlaya_lab.broker.journaling import CallJournal
from jevlaya_lab.broker.keys import KeyResolver
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import Caller, MemoryCooldowns, Pool
from jevlaya_lab.broker.quality import Quality
from jevlaya_lab.broker.transport import Transport
from jevlaya_lab.broker.validation import check_call, check_prompt
from jevlaya_lab.journal import JournalWriter, open_store
from jevlaya_lab.local import FaultProfile

HELLO = [{"role": "user", "content": "hello"}]


def test_the_transport_alone_answers_streams_and_classifies_failures(server: Any) -> None:
    entry = LLMConfig(name="a", base_url=server.base_url + "/", model="a")

    async def main() -> tuple[str, list[str], Failure]:
        transport = Transport()
        try:
            url = await transport.base_url(entry)
            reply = await transport.post(url, None, build_body("a", HELLO, stream=False))
            response = await transport.open_stream(url, None, build_body("a", HELLO, stream=True))
            pieces = [d.text async for d in read_deltas(response, None) if d.text]
            await response.aclose()
            server.set_fault("a", FaultProfile(status=503))
            with pytest.raises(Failure) as failed:
                await transport.post(url, None, build_body("a", HELLO, stream=False))
            return reply.text, pieces, failed.value
        finally:
            await transport.aclose()
    text, pieces, failure = asyncio.run(main())
    assert text and pieces
    assert (failure.kind, failure.status) == ("unavailable", 503)


def test_the_call_journal_alone_records_rates_and_refuses_unknown_calls(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    writer = JournalWriter(store)
    journal = CallJournal(writer, store)
    journal.quality = Quality()
    row = {"call_id": "c1", "trace_id": "t1", "llm_name": "a", "operation": "op",
           "scope": None, "status": "ok", "called_at": "2026-01-01T00:00:00+00:00",
           "latency_ms": 1.0}
    assert journal.attempt(row) == 1
    journal.rate("c1", 0.25)
    with pytest.raises(UnknownCallError, match="c2"):
        journal.rate("c2", 0.5)
    writer.close()
    assert [r["call_id"] for r in store.attempts()] == ["c1"]
    assert [(r["call_id"], r["score"], r["operation"]) for r in store.ratings()] == \
        [("c1", 0.25, "op")]
    assert journal.quality.counts("a", "op") == (1, 0.25)
    store.close()


def _parts(server: Any, tmp_path: Path) -> tuple[Pool, CallJournal, Attempts, Any]:
    store = open_store(tmp_path / "j.db")
    entries = [LLMConfig(name=n, base_url=server.base_url, model=n) for n in ("a", "b")]
    pool = Pool(entries, KeyResolver(store), Quality())
    journal = CallJournal(JournalWriter(store), store)
    return pool, journal, Attempts(pool, journal, Transport(), store_text=False), store


def test_one_attempt_ends_itself_once_with_its_slot_and_row(server: Any, tmp_path: Path) -> None:
    pool, journal, attempts, store = _parts(server, tmp_path)
    call = check_call(check_prompt("hello"))
    budget, limit, caller = Budget(call.wait), AttemptLimit(call), Caller()

    async def main() -> list[str]:
        seen = []
        ok = attempts.start(pool.states["a"], caller, call, budget, limit)
        assert pool.states["a"].in_flight == 1  # making it took the slot
        await ok.send(build_body("a", call.messages, stream=False))
        seen.append(ok.status)
        server.set_fault("b", FaultProfile(status=500))
        bad = attempts.start(pool.states["b"], caller, call, budget, limit)
        with pytest.raises(ProviderError):
            await bad.send(build_body("b", call.messages, stream=False))
        bad.cancel()  # a later ending is ignored: one row, one release
        seen.append(bad.status)
        server.set_fault("a", FaultProfile(latency=5.0))
        slow = attempts.start(pool.states["a"], caller, call, budget, limit)
        task = asyncio.ensure_future(slow.send(build_body("a", call.messages, stream=False)))
        await asyncio.sleep(0.2)
        slow.cancel_status = "cancelled"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        seen.append(slow.status)
        await attempts._transport.aclose()
        assert not journal.is_written(slow.journal_seq)  # taken, handed over within HANDOFF_S
        await journal.flush()
        assert journal.is_written(slow.journal_seq)
        return seen
    assert asyncio.run(main()) == ["ok", "unavailable", "cancelled"]
    assert pool.states["a"].in_flight == pool.states["b"].in_flight == 0
    assert pool.states["b"].cooling(time.time()) and not pool.states["a"].cooling(time.time())
    assert limit.made == 3
    journal.writer.close()
    rows = store.attempts()
    assert sorted(r["status"] for r in rows) == ["cancelled", "ok", "unavailable"]
    assert next(r for r in rows if r["status"] == "unavailable")["cooldown_until"]
    store.close()


def test_the_gate_alone_cancels_calls_in_flight_as_broker_closed() -> None:
    async def main() -> tuple[BaseException | None, int]:
        gate = Gate("the test broker")
        call = asyncio.ensure_future(gate.guarded(asyncio.sleep(30)))
        await asyncio.sleep(0.05)
        gate.closed = True
        await gate.settle(0.0)
        try:
            await call
        except BaseException as exc:  # noqa: BLE001 - the outcome is the point
            return exc, len(gate._calls)
        return None, len(gate._calls)
    error, left = asyncio.run(main())
    assert isinstance(error, BrokerClosedError) and left == 0
    with pytest.raises(BrokerClosedError, match="test broker"):
        gate = Gate("the test broker")
        gate.closed = True
        gate.check()


def test_a_cooldown_book_shares_cooldowns_between_pools(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    entries = [LLMConfig(name=n, base_url="http://127.0.0.1:9/v1", model=n) for n in ("a", "b")]
    book = MemoryCooldowns()
    here = Pool(entries, KeyResolver(store), Quality(), cooldowns=book)
    there = Pool(entries, KeyResolver(store), Quality(), cooldowns=book)
    alone = Pool(entries, KeyResolver(store), Quality())
    until = here.failed("a", Failure("rate_limited", "slow down", 429, 30.0), Caller())
    assert until is not None and book.until("a") == until
    pick = there.pick(Caller(), set(), None, None)
    assert [s.entry.name for s in pick.ready] == ["b"] and pick.retry_at == until
    assert there.states["a"].recovering  # raced once its cooldown ends (parallel_recovery)
    assert [s.entry.name for s in alone.pick(Caller(), set(), None, None).ready] == ["a", "b"]
    assert book.extend("a", until - 10) == until  # a shorter cooldown never shortens one held
    store.close()
