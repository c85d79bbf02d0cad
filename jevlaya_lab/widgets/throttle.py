"""``Throttle``: coalesce many updates into at most one push per interval.

A stream can produce hundreds of deltas a second and a busy Router hundreds of hook events;
sending each one to the browser would flood the kernel's comm channel. ``mark()`` pushes at
once when the interval has passed, otherwise it arms one timer for the rest of the interval,
so the last update is never lost; ``flush()`` pushes now (call it when the work ends).

The timer is a ``threading.Timer`` (updates from worker threads), or with ``loop=`` a
``loop.call_later``, so that views fed by a task on an event loop also push from that loop's
thread; ``mark()`` must then be called on that loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable


class Throttle:
    def __init__(self, push: Callable[[], None], interval: float = 0.05, *,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
            raise ValueError(f"throttle={interval!r}: must be a number of seconds >= 0 "
                             "(0 pushes every update)")
        self._push = push
        self.interval = float(interval)
        self._loop = loop
        self._lock = threading.RLock()  # push() may mark() again
        self._last = 0.0
        self._timer: threading.Timer | asyncio.TimerHandle | None = None
        self.pushes = 0

    def mark(self) -> None:
        """Something changed: push now or within ``interval`` seconds."""
        with self._lock:
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                if self._timer is None:
                    self._timer = self._arm(wait)
                return
        self.flush()

    def _arm(self, wait: float) -> threading.Timer | asyncio.TimerHandle:
        if self._loop is not None:
            return self._loop.call_later(wait, self.flush)
        timer = threading.Timer(wait, self.flush)
        timer.daemon = True
        timer.start()
        return timer

    def flush(self) -> None:
        """Push now and cancel any pending timer."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._last = time.monotonic()
            self.pushes += 1
            self._push()
