"""Chaos run (spec quality.md): many calls through faulty models; every call ends with an answer
or a documented error, one journal row per attempt, no leaked slot, no stuck stream."""

from __future__ import annotations

import asyncio
import random

from jevlaya_lab.broker.errors import LLMRequestError
from jevlaya_lab.local import FaultProfile

FAULTS = {
    "a": FaultProfile(status=500, probability=0.3, seed=1),
    "b": FaultProfile(status=429, retry_after=0.05, probability=0.3, seed=2),
    "c": FaultProfile(cut_after=2, probability=0.3, seed=3),
    "d": FaultProfile(empty=True, probability=0.2, seed=4, first_token_delay=0.01),
}


def test_chaos_every_call_ends_and_every_attempt_is_journaled(abroker, server) -> None:
    for name, fault in FAULTS.items():
        server.set_fault(name, fault)
    before = {n: server.request_count(n) for n in FAULTS}
    rng = random.Random(0)

    async def one(broker, i: int) -> str:
        kind = rng.choice(["ask", "stream", "race"])
        try:
            if kind == "ask":
                await broker.ask(f"q{i}", wait=rng.choice([None, 2.0]), max_tokens=4)
            else:
                stream = broker.stream(f"q{i}", fastest_of=2 if kind == "race" else None,
                                       stream_selection_window=0, max_tokens=4)
                async with stream:
                    async for _ in stream:
                        pass
            return "answer"
        except LLMRequestError as exc:
            return type(exc).__name__

    async def main() -> tuple[list[str], list[dict], dict]:
        async with abroker("a", "b", "c", "d") as broker:
            outcomes = []
            for start in range(0, 120, 12):
                outcomes += await asyncio.wait_for(
                    asyncio.gather(*(one(broker, i) for i in range(start, start + 12))), 60)
            return outcomes, await broker.calls(), await broker.snapshot()

    outcomes, rows, snapshot = asyncio.run(main())
    assert len(outcomes) == 120 and outcomes.count("answer") > 60
    assert set(outcomes) <= {"answer", "NoLLMAvailableError", "StreamInterruptedError",
                             "StreamReplacementError", "ProviderError", "RateLimitError"}
    assert all(s["in_flight"] == 0 for s in snapshot.values())  # no leaked slot
    assert all(r["status"] in ("ok", "rate_limited", "unavailable", "error", "superseded",
                               "cancelled") for r in rows)
    assert len({r["call_id"] for r in rows}) == len(rows)
    requests = sum(server.request_count(n) - before[n] for n in FAULTS)
    # every request the server saw has its row; a race lane cancelled before it connected has a
    # row the server never saw
    assert requests <= len(rows) <= requests + outcomes.count("answer")
