"""Where a view's coroutines run: over an ``AsyncBroker`` on the running event loop, over a
``Broker`` to their end in the calling thread (every call they make blocks, so they never
suspend). :class:`~jevlaya_lab.widgets.stream.StreamView` writes each operation once, as a
coroutine, and these helpers run it for either kind of broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["awaited", "is_async_broker", "run_blocking", "running_loop_for", "submit"]

T = TypeVar("T")


def is_async_broker(broker: Any) -> bool:
    """``True`` for an ``AsyncBroker`` (its ``calls`` is a coroutine function), ``False`` for
    a ``Broker``; anything else is a ``TypeError``."""
    if not callable(getattr(broker, "stream", None)) or not callable(
            getattr(broker, "calls", None)):
        raise TypeError(f"broker={type(broker).__name__}: expected a jevlaya_lab Broker or "
                        "AsyncBroker (something with stream() and calls())")
    return inspect.iscoroutinefunction(broker.calls)


def running_loop_for(broker: Any) -> asyncio.AbstractEventLoop:
    """The running event loop an ``AsyncBroker``'s view reads its stream on."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise TypeError(
            f"broker={type(broker).__name__}: an AsyncBroker's stream is read by a task on the "
            "running event loop, and no loop is running here; create the StreamView inside "
            "one (a JupyterLab cell, or a coroutine run by asyncio.run), or pass the sync "
            "jevlaya_lab.Broker instead") from None


async def awaited(value: Any) -> Any:
    """``value``, awaited when it is awaitable (an AsyncBroker's methods return coroutines,
    a Broker's return values)."""
    return await value if inspect.isawaitable(value) else value


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (every call it makes blocks, as over a sync
    ``Broker``) to its end in this thread and return its value."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a StreamView operation over a sync Broker waited on an event loop; "
                       "this is a bug in jevlaya_lab.widgets.stream")


def submit(coro: Coroutine[Any, Any, T],
           loop: asyncio.AbstractEventLoop) -> cf.Future[T] | None:
    """Schedule ``coro`` on ``loop`` from any thread; ``None`` (and ``coro`` closed) when the
    loop is closed."""
    try:
        return asyncio.run_coroutine_threadsafe(coro, loop)
    except RuntimeError:
        coro.close()
        return None
