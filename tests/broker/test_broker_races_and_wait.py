"""``fastest_of`` races for ask/chat, ``wait`` semantics and ``NoLLMAvailableError`` reasons."""

from __future__ import annotations

import asyncio
import time

import pytest

from jevlaya_lab.broker import LLMConfig
from jevlaya_lab.broker.errors import NoLLMAvailableError
from jevlaya_lab.local import FaultProfile


def test_fastest_of_first_complete_answer_wins_losers_are_superseded(broker, server) -> None:
    server.set_fault("a", FaultProfile(latency=2.0))
    b = broker("a", "b")
    started = time.monotonic()
    result = b.ask("hello", fastest_of=2)
    assert result.llm_name == "b" and time.monotonic() - started < 1.8
    rows = {r["llm_name"]: r for r in b.calls()}
    assert rows["a"]["status"] == "superseded" and rows["b"]["status"] == "ok"
    assert rows["a"]["trace_id"] == rows["b"]["trace_id"] == result.trace_id
    assert b.snapshot()["a"]["cooldown_until"] is None  # a superseded lane is neutral
    assert b.snapshot()["a"]["in_flight"] == 0


def test_fastest_of_refills_a_failed_lane_from_an_untried_model(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=500))
    server.set_fault("b", FaultProfile(latency=1.0))
    b = broker("a", "b", "c")
    result = b.ask("hello", fastest_of=2)
    assert result.llm_name == "c"
    assert {r["llm_name"]: r["status"] for r in b.calls()} == {
        "a": "unavailable", "b": "superseded", "c": "ok"}


def test_fastest_of_chat_shares_one_deadline(broker, server) -> None:
    server.set_fault("a", FaultProfile(latency=2.0))
    server.set_fault("b", FaultProfile(latency=2.0))
    b = broker("a", "b")
    started = time.monotonic()
    with pytest.raises(NoLLMAvailableError) as info:
        b.chat([{"role": "user", "content": "hi"}], fastest_of=2, wait=0.4)
    assert info.value.reason == "timeout"
    assert time.monotonic() - started < 1.2
    assert sorted(r["budget_ms"] for r in b.calls()) == [400.0, 400.0]


def test_fastest_of_is_validated(broker) -> None:
    b = broker("a")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="fastest_of"):
            b.ask("x", fastest_of=bad)


def test_wait_positive_bounds_queueing_and_answering(broker, server) -> None:
    server.set_fault("a", FaultProfile(latency=2.0))
    b = broker("a")
    started = time.monotonic()
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("hello", wait=0.3)
    assert info.value.reason == "timeout"
    assert 0.25 < time.monotonic() - started < 1.0
    row = b.calls()[0]
    assert row["status"] == "unavailable" and row["budget_ms"] == 300.0
    assert row["cooldown_until"] is not None  # it sent nothing within wait: cooled


def test_wait_zero_never_queues(broker, server) -> None:
    server.set_fault("a", FaultProfile(latency=1.5))
    b = broker(models=[LLMConfig(name="a", base_url=server.base_url, model="a", parallel=1)])

    def slow() -> None:
        b.ask("first")

    import threading
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.2)  # the only slot is taken
    started = time.monotonic()
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("second", wait=0)
    assert info.value.reason == "timeout" and time.monotonic() - started < 0.6
    t.join()
    assert b.ask("third", wait=0).llm_name == "a"  # no deadline once it may start


def test_wait_none_queues_for_a_free_slot(broker, server) -> None:
    server.set_fault("a", FaultProfile(latency=0.3))
    b = broker(models=[LLMConfig(name="a", base_url=server.base_url, model="a", parallel=1)])
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda i: b.ask(f"q{i}"), range(3)))
    assert [r.llm_name for r in results] == ["a"] * 3
    assert len(b.calls()) == 3


def test_negative_or_non_numeric_wait_is_rejected(broker) -> None:
    b = broker("a")
    with pytest.raises(ValueError, match=r"wait=-1"):
        b.ask("x", wait=-1)
    with pytest.raises(TypeError, match="wait='5'"):
        b.ask("x", wait="5")


def test_ask_does_not_wait_for_a_cooldown_beyond_wait(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=429, retry_after=30))
    b = broker("a")
    started = time.monotonic()
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("hello", wait=2)
    assert time.monotonic() - started < 1.0  # it cannot come back in time: raise at once
    assert info.value.reason == "timeout"
    assert info.value.retry_at is not None and info.value.retry_at.timestamp() > time.time() + 25


def test_no_llm_reasons(broker, server, db) -> None:
    with pytest.raises(NoLLMAvailableError) as info:
        broker(models=[]).ask("x")
    assert info.value.reason == "empty_pool"
    b = broker("a", "b")
    b.disable_llm("a")
    b.disable_llm("b")
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("x")
    assert info.value.reason == "all_disabled"
    b.enable_llm("b")
    assert b.ask("x").llm_name == "b"
    with pytest.raises(KeyError, match="'zzz' is not in the registry"):
        b.disable_llm("zzz")


def test_no_keys_reason(broker, server, monkeypatch) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    keyed = LLMConfig(name="k", base_url=server.base_url, model="a", api_key_ref="NOPE_KEY")
    with pytest.raises(NoLLMAvailableError) as info:
        broker(models=[keyed]).ask("x")
    assert info.value.reason == "no_keys" and "NOPE_KEY" in str(info.value)


def test_async_ask_and_cancellation_release_the_slot(abroker, server) -> None:
    server.set_fault("a", FaultProfile(latency=1.0))

    async def main() -> None:
        async with abroker("a") as b:
            task = asyncio.create_task(b.ask("hello"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await b.snapshot())["a"]["in_flight"] == 0
            rows = await b.calls()
            assert [r["status"] for r in rows] == ["cancelled"]
    asyncio.run(main())


def test_a_race_stream_reports_the_pool_reason(broker) -> None:
    with pytest.raises(NoLLMAvailableError) as info:
        for _ in broker(models=[]).stream("x", fastest_of=2):
            pass
    assert info.value.reason == "empty_pool"
