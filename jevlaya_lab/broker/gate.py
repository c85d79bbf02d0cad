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


class Gate:
    """See the module docstring; ``name`` says which broker in errors."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.streams: set[OpenStream] = set()  # open stream cores, closed with the broker
        self._calls: set[asyncio.Task[Any]] = set()  # calls in flight, settled by close()

    def refused(self, *, in_flight: bool = False) -> BrokerClosedError:
        """The error of a call that meets a closed broker."""
        return closed_error(self.name, in_flight=in_flight)

    def check(self) -> None:
        """Raise ``BrokerClosedError`` when the broker no longer takes calls."""
        if self.closed:
            raise closed_error(self.name)

    async def guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (a call or lane that journals rows) as a task that closing waits for
        and may cancel; a cancellation by closing reaches the caller as
        ``BrokerClosedError``, a cancellation of the caller itself stays ``CancelledError``."""
        task = asyncio.ensure_future(coro)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if self.closed and task.cancelled() and (me is None or not me.cancelling()):
                raise closed_error(self.name, in_flight=True) from None
            raise

    async def close_streams(self) -> None:
        for core in list(self.streams):
            await core.aclose()

    async def settle(self, grace: float) -> None:
        """Wait up to ``grace`` for calls in flight, then cancel them and wait for their rows."""
        calls = set(self._calls)
        if not calls:
            return
        if grace > 0:
            await asyncio.wait(calls, timeout=grace)
        for call in calls:
            call.cancel()
        _, stuck = await asyncio.wait(calls, timeout=SETTLE_TIMEOUT_S)
        if stuck:
            log.warning("%d call(s) did not end within %g s of closing the broker",
                        len(stuck), SETTLE_TIMEOUT_S)
