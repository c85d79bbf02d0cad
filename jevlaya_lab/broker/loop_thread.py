"""``LoopThread``: the event loop of a sync ``Broker``, on its own daemon thread.

Every blocking method of the sync facade submits a coroutine to this loop and waits for it, so
many threads may call one broker at once. A call from the loop's own thread is refused (it
would wait for itself), and a call that a stopped loop will never finish gets
``BrokerClosedError`` instead of hanging its thread.

How a sync Broker ends when nobody closes it is here too: dropped, its finalizer closes it on its
loop without waiting (:func:`close_in_background`); still open at interpreter exit, an exit step
closes it and waits (:func:`close_at_exit`), so the journal rows of its answers are written.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import contextvars
import logging
import os
import threading
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from jevlaya_lab.broker.errors import closed_error
from jevlaya_lab.errors import JevlayaError

if TYPE_CHECKING:
    from jevlaya_lab.broker.engine import AsyncBroker

T = TypeVar("T")
log = logging.getLogger("jevlaya_lab.broker")


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
            # the call runs in a copy of the caller's context variables, so what the caller
            # set (an open tracing span, a hook's call scope) is seen on the loop too
            future = contextvars.copy_context().run(asyncio.run_coroutine_threadsafe, coro, self.loop)
            self._pending.add(future)
        try:
            return future.result()
        except JevlayaError as exc:
            # a documented error is the caller's to read: its traceback starts at the caller's
            # line, not in the loop thread's internals (a bug elsewhere keeps its full trace)
            raise exc.with_traceback(None) from exc.__cause__  # its cause, if any, still shows
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


_OPEN: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""Every sync Broker not yet closed, with the process it was made in (weakly: a dropped one is its
finalizer's)."""


def close_at_exit(broker: Any) -> None:
    """Close ``broker`` (a sync Broker) at interpreter exit if it is still open then."""
    _OPEN[broker] = os.getpid()


def closed_before_exit(broker: Any) -> None:
    """``broker`` is closing: nothing is left for the exit step."""
    _OPEN.pop(broker, None)


@atexit.register
def _close_open_brokers() -> None:
    """At interpreter exit, close every sync Broker still open and wait for it: its journal's last
    rows are written (they were lost with the process). Runs after the exit steps registered after
    this module was imported, such as a script's ``atexit.register(broker.close)``; a failure is
    logged, never raised, so every broker gets its turn. A forked child that ends normally leaves the
    brokers it inherited alone: their loop threads run in the parent only (waiting on them hung it)."""
    for broker, pid in list(_OPEN.items()):
        if pid != os.getpid():
            continue
        try:
            broker.close()
        except Exception as exc:  # noqa: BLE001 - logged: exit has no caller to raise to
            log.warning("closing a Broker still open at interpreter exit: %s: %s", type(exc).__name__, exc)
