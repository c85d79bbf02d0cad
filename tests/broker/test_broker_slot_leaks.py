"""No pool slot outlives its attempt: a stream closed before its race lanes ever ran, a
stream cancelled while it opens a lane, or one dropped after a delta must give every slot back
(``in_flight`` 0 on every model) and journal one row per attempt, so later calls still find
the pool free."""

from __future__ import annotations

import asyncio

from jevlaya_lab.broker import AsyncBroker


def _in_flight(b: AsyncBroker) -> dict[str, int]:
    return {name: s.in_flight for name, s in b._rt.pool.states.items()}


def test_a_race_stream_closed_before_its_lanes_start_frees_every_slot(cfg, db) -> None:
    async def main() -> None:
        async with AsyncBroker(db, models=cfg("a", "b", parallel=2), catalog=[]) as b:
            await b.ask("warm", max_tokens=2)  # the pool is built: a pull starts lanes at once
            for closer in ("awaited", "task", "awaited", "task"):
                s = b.stream("hi", fastest_of=2, max_tokens=4)
                t = asyncio.ensure_future(s.__anext__())
                await asyncio.sleep(0)
                if closer == "awaited":
                    await s.aclose()
                else:  # the close runs right after the pull has started its lanes
                    await asyncio.wait_for(s.aclose(), 5)
                # the pull ends (it must not wait forever for lanes that never ran)
                done, _ = await asyncio.wait([t], timeout=5)
                assert done, "the pending pull hung after aclose()"
                assert _in_flight(b) == {"a": 0, "b": 0}, closer
            reply = await b.ask("still free?", wait=5, max_tokens=4)  # not NoLLMAvailableError
            assert reply.text
            await b._rt.flush()
            rows = b._rt.store.attempts()
            closed = [r for r in rows if r["status"] in ("cancelled", "superseded")]
            assert len(closed) == 8  # one row per lane started, none lost
            assert len(rows) == 10  # and the two answers
    asyncio.run(main())


def test_a_cancelled_pull_or_ask_frees_its_slot_at_once(cfg, db) -> None:
    """A reader cancelled while its lane opens never reads that lane again: its row is written
    and its slot freed when the pull ends, not only when the stream is closed or collected;
    an ask cancelled right after it started its lane frees the slot too."""
    async def main() -> None:
        async with AsyncBroker(db, models=cfg("a", parallel=1), catalog=[]) as b:
            await b.ask("warm", max_tokens=2)
            kept = []
            for delay in (0, 0.001, 0.002, 0.004):
                s = b.stream("hi", max_tokens=4, parallel_recovery=False)
                kept.append(s)  # still referenced: no garbage collection closes it
                t = asyncio.ensure_future(s.__anext__())
                await asyncio.sleep(delay)
                if t.done():  # a delta came already: the answer is in the reader's hands
                    await s.aclose()
                t.cancel()
                await asyncio.gather(t, return_exceptions=True)
                assert _in_flight(b) == {"a": 0}, delay
                a = asyncio.ensure_future(b.ask("hi", max_tokens=4))
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                a.cancel()
                await asyncio.gather(a, return_exceptions=True)
                assert _in_flight(b) == {"a": 0}, delay
            assert (await b.ask("free", wait=5, max_tokens=4)).text
            await b._rt.flush()
            statuses = [r["status"] for r in b._rt.store.attempts()]
            assert statuses.count("ok") == 2, statuses  # the warm-up and the last ask
            assert set(statuses) == {"ok", "cancelled"}, statuses
    asyncio.run(main())
