"""``Gate``: whether a broker still takes calls, and what closing must settle.

One per broker. Calls and lanes that journal rows run through :meth:`Gate.guarded` (a task
closing may wait for, then cancel); open streams register in ``streams``. Closing
(:meth:`close_streams`, then :meth:`settle`) ends both in the order the engine documents, so
no row is lost and no caller is left waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from jevlaya_lab.broker.errors import BrokerClosedError, closed_error

log = logging.getLogger("jevlaya_lab.broker")
SETTLE_TIMEOUT_S = 10.0  # how long closing waits for cancelled calls to journal their rows
T = TypeVar("T")


class OpenStream(Protocol):
    """What closing the broker needs of an open stream."""

    async def aclose(self) -> None: ...


class _Guard:
    """One guarded call: the task running it and what closing did to it. ``done`` is made
    only when closing waits for the call (:meth:`Gate.settle`), so a call that ends while the
    broker is open costs no future."""

    __slots__ = ("task", "done", "cancelled_by_close")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.done: asyncio.Future[None] | None = None
        self.cancelled_by_close = False


class Gate:
    """See the module docstring; ``name`` says which broker in errors."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.streams: set[OpenStream] = set()  # open stream cores, closed with the broker
        self._calls: set[_Guard] = set()  # calls in flight, settled by close()

    def refused(self, *, in_flight: bool = False) -> BrokerClosedError:
        """The error of a call that meets a closed broker."""
        return closed_error(self.name, in_flight=in_flight)

    def check(self) -> None:
        """Raise ``BrokerClosedError`` when the broker no longer takes calls."""
        if self.closed:
            raise closed_error(self.name)

    async def guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (a call or lane that journals rows) in the current task, so that
        closing may wait for it and then cancel it; a cancellation by closing reaches the
        caller as ``BrokerClosedError``, a cancellation of the caller itself stays
        ``CancelledError``. (No task of its own: a call costs no extra scheduling.)"""
        task = asyncio.current_task()
        assert task is not None, "guarded() runs inside a task"
        guard = _Guard(task)
        self._calls.add(guard)
        try:
            return await coro
        except asyncio.CancelledError:
            # closing cancelled this task and nobody else did: the call ends as closed
            if guard.cancelled_by_close and task.cancelling() == 1:
                task.uncancel()
                raise closed_error(self.name, in_flight=True) from None
            raise
        finally:
            self._calls.discard(guard)
            if guard.done is not None:
                guard.done.set_result(None)

    async def close_streams(self) -> None:
        for core in list(self.streams):
            await core.aclose()

    async def settle(self, grace: float) -> None:
        """Wait up to ``grace`` for calls in flight, then cancel them and wait for their rows."""
        calls = set(self._calls)
        if not calls:
            return
        loop = asyncio.get_running_loop()
        done: list[asyncio.Future[None]] = []
        for guard in calls:  # each still in flight: its end sets this future
            guard.done = loop.create_future()
            done.append(guard.done)
        if grace > 0:
            await asyncio.wait(done, timeout=grace)
        for guard, ended in zip(calls, done):
            if not ended.done():
                guard.cancelled_by_close = guard.task.cancelling() == 0
                guard.task.cancel()
        _, stuck = await asyncio.wait(done, timeout=SETTLE_TIMEOUT_S)
        if stuck:
            log.warning("%d call(s) did not end within %g s of closing the broker",
                        len(stuck), SETTLE_TIMEOUT_S)
