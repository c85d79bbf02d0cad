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

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait for our turn; False if ``timeout`` seconds pass first (we then leave the queue)."""
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            turn = threading.Event()
            self._waiters.append(turn)
        try:
            granted = turn.wait(timeout)  # release() hands the lock over directly: no barging in
        except BaseException:  # e.g. KeyboardInterrupt in a notebook: never strand the lock
            if self._leave(turn):
                self.release()
            raise
        return granted or self._leave(turn)

    def _leave(self, turn: threading.Event) -> bool:
        """Leave the queue; True if the lock was handed to us in the meantime (we now hold it)."""
        with self._mutex:
            if turn in self._waiters:
                self._waiters.remove(turn)
                return False
        return True

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
