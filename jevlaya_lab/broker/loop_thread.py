"""``LoopThread``: the event loop of a sync ``Broker``, on its own daemon thread.

Every blocking method of the sync facade submits a coroutine to this loop and waits for it, so
many threads may call one broker at once. A call from the loop's own thread is refused (it
would wait for itself), and a call that a stopped loop will never finish gets
``BrokerClosedError`` instead of hanging its thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from jevlaya_lab.broker.errors import closed_error

if TYPE_CHECKING:
    from jevlaya_lab.broker.engine import AsyncBroker

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._pending: set[cf.Future[Any]] = set()  # calls submitted from other threads
        self._lock = threading.Lock()
        self._finished = False
        self.thread = threading.Thread(target=self._main, name="jevlaya-broker-loop", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
        finally:
            with self._lock:  # a call the stopped loop will never finish must not hang its thread
                self._finished = True
                pending, self._pending = self._pending, set()
            for future in pending:
                if not future.done():
                    try:
                        future.set_exception(closed_error("this broker", in_flight=True))
                    except cf.InvalidStateError:
                        pass

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync Broker method was called from the broker's own event "
                               "loop; use the AsyncBroker (await) there")
        with self._lock:
            if self._finished or self.loop.is_closed():
                coro.close()
                raise closed_error("this broker")
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            self._pending.add(future)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the caller cancels the call
            raise
        finally:
            with self._lock:
                self._pending.discard(future)

    def stop(self, *, join: bool = True) -> None:
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:
                return
        if join and threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)


def close_in_background(runner: LoopThread, engine: AsyncBroker) -> None:
    """Finalizer of a dropped Broker: close it on its own loop, then stop the loop."""
    async def close_then_stop() -> None:
        try:
            await engine.aclose()
        finally:
            runner.loop.stop()

    try:
        runner.loop.call_soon_threadsafe(lambda: runner.loop.create_task(close_then_stop()))
    except RuntimeError:  # loop already closed
        pass
