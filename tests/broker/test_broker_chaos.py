"""Chaos run: a few hundred calls of every kind (ask, ask races,
streams, stream races, another(), early close, a break that leaves the stream to the broker)
through local models with mixed faults. Checks: every call ends, with an answer or a documented
error; one journal row per attempt (every lane a stream reports, every answer handed out, no row
without a request or request without a row); no leaked slot, waiter or open stream."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker, LLMConfig
from jevlaya_lab.broker import errors as E
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model

FAULTS = {
    "err500": FaultProfile(status=500, probability=0.1, seed=1),
    "busy429": FaultProfile(status=429, retry_after=0.05, probability=0.3, seed=2),
    "over503": FaultProfile(status=503, retry_after=0.05, probability=0.3, seed=3),
    "cut": FaultProfile(cut_after=2, probability=0.15, seed=4),
    "slow": FaultProfile(first_token_delay=0.4, probability=0.2, seed=5),
    "crawl": FaultProfile(token_delay=0.1, probability=0.2, seed=6),
    "empty": FaultProfile(empty=True, probability=0.1, seed=7),
    "garbage": FaultProfile(garbage=True, probability=0.1, seed=8),
}
DOCUMENTED = (E.NoLLMAvailableError, E.LLMTimeoutError, E.StreamInterruptedError,
              E.ProviderError)
ROUNDS, CALLS = 10, 30  # a fresh broker (fresh cooldowns) per round, one journal file
KINDS = ["ask", "ask-race", "stream", "race", "another", "close-early", "break"]
NEUTRAL = ("superseded", "cancelled")


@pytest.fixture(scope="module")
def chaos_server() -> Iterator[Any]:
    models = {name: tiny_chat_model(seed=i, name=name) for i, name in enumerate(FAULTS)}
    with serve(models, faults=FAULTS) as srv:
        yield srv


async def one_call(broker: AsyncBroker, i: int, rng: random.Random,
                   kept: list[Any]) -> dict[str, Any]:
    """One call of a random kind; what it handed out and which attempts it saw."""
    kind = rng.choice(KINDS)
    # bounded waits only: wait=None waits for cooling models without a time bound (as
    # llmbroker), and the faults here cool models for 60 s
    wait = rng.choice([2.0, 2.0, 0, 1.0, 0.3])
    trace = f"t{i}"
    seen: dict[str, Any] = {"trace": trace, "kind": kind, "answers": [], "lanes": None}
    stream = None
    try:
        if kind in ("ask", "ask-race"):
            result = await broker.ask(f"q{i}", trace_id=trace, wait=wait, max_tokens=4,
                                      fastest_of=2 if kind == "ask-race" else None)
            seen["answers"].append(result.call_id)
        else:
            stream = broker.stream(f"q{i}", trace_id=trace, wait=wait, max_tokens=4,
                                   fastest_of=2 if kind in ("race", "another") else None,
                                   stream_selection_window=rng.choice([0, 0.1]))
            if kind == "break":
                kept.append(stream)  # left open: leaving the broker closes it
                async for _ in stream:
                    break
                seen["outcome"] = "answer"
                return seen
            try:
                async for _ in stream:
                    if kind == "close-early":
                        break
            except E.StreamReplacementError as exc:
                seen["answers"].append(exc.replacement.call_id)
            else:
                if stream.call_id and kind != "close-early":
                    seen["answers"].append(stream.call_id)
            if kind == "another":
                extra = await stream.another()
                if extra is not None:
                    seen["answers"].append(extra.call_id)
            await stream.aclose()
        seen["outcome"] = "answer"
    except E.StreamReplacementError:
        raise  # handled above: never an outcome of its own
    except DOCUMENTED as exc:
        seen["outcome"] = type(exc).__name__
        if isinstance(exc, E.NoLLMAvailableError):
            assert exc.reason in ("timeout", "excluded"), exc
        if stream is not None:
            await stream.aclose()
    if stream is not None:
        seen["lanes"] = [lane.call_id for lane in stream.lanes]
    return seen


def test_chaos_every_call_ends_and_every_attempt_is_journaled(chaos_server, db) -> None:
    before = {n: chaos_server.request_count(n) for n in FAULTS}
    rng = random.Random(0)
    models = [LLMConfig(name=n, base_url=chaos_server.base_url, model=n, parallel=3)
              for n in FAULTS]

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        calls: list[dict[str, Any]] = []
        for r in range(ROUNDS):
            kept: list[Any] = []
            shuffled = rng.sample(models, len(models))  # vary who ranks first
            broker = AsyncBroker(db, models=shuffled, catalog=[])
            async with broker:
                calls += await asyncio.wait_for(asyncio.gather(
                    *(one_call(broker, r * CALLS + i, rng, kept) for i in range(CALLS))), 20)
            for stream in kept:  # closed by the broker's exit: every lane has ended
                calls[[c["trace"] for c in calls].index(stream.trace_id)]["lanes"] = \
                    [lane.call_id for lane in stream.lanes]
                assert all(lane.state != "running" for lane in stream.lanes)
            pool = broker._rt.pool
            assert all(s.in_flight == 0 for s in pool.states.values()), r  # no leaked slot
            assert not pool._waiters and not broker._rt.streams, r  # nobody left waiting
        async with AsyncBroker(db, models=models, catalog=[]) as reader:
            return calls, await reader.calls()

    calls, rows = asyncio.run(main())
    outcomes = Counter(c["outcome"] for c in calls)
    assert sum(outcomes.values()) == ROUNDS * CALLS and outcomes["answer"] > ROUNDS * CALLS // 3
    assert len({r["call_id"] for r in rows}) == len(rows)  # one row per attempt
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_trace.setdefault(row["trace_id"], []).append(row)
    for call in calls:
        mine = {r["call_id"]: r for r in by_trace.get(call["trace"], [])}
        for answer in call["answers"]:  # every answer handed out is an ok row
            assert mine[answer]["status"] == "ok", call
        if call["lanes"] is not None and call["kind"] != "another":
            assert set(call["lanes"]) == set(mine), call  # a stream's attempts = its rows
        if call["outcome"] != "answer":
            assert not any(r["status"] == "ok" for r in mine.values()) or \
                call["kind"] == "another", call
    # each request the server saw has a row; each row but a lane cancelled early had a request
    for name in FAULTS:
        requests = chaos_server.request_count(name) - before[name]
        mine = [r for r in rows if r["llm_name"] == name]
        assert sum(r["status"] not in NEUTRAL for r in mine) <= requests <= len(mine), name
    statuses = Counter(r["status"] for r in rows)
    assert {"ok", "rate_limited", "unavailable", "error", "superseded"} <= set(statuses)
