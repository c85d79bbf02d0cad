"""``FairLock``: a mutex that hands itself to waiters in arrival order.

``threading.Lock`` makes no ordering promise, so under load one client could starve; a model
served to many clients generates for them first come, first served.
"""

from __future__ import annotations

import threading
from collections import deque
from types import TracebackType


class FairLock:
    """A first-in, first-out lock; ``waiting`` tells how many callers are queued."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: deque[threading.Event] = deque()
        self._held = False

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def acquire(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            turn = threading.Event()
            self._waiters.append(turn)
        turn.wait()  # release() hands the lock over directly, so nobody can barge in

    def release(self) -> None:
        with self._mutex:
            if not self._held:
                raise RuntimeError("FairLock.release() called on an unlocked lock")
            if self._waiters:
                self._waiters.popleft().set()
            else:
                self._held = False

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
