"""``wait`` as a pausable clock shared by every attempt of one call.

``wait=None``: no caller deadline (``ask`` waits for cooling models however long; each attempt
still gets ``ATTEMPT_TIMEOUT_S``); ``wait=0``: no
queueing and no deadline; ``wait>0``: total seconds for queueing and answering. A stream pauses
the clock while a delta is in the application's hands and resumes it on the next pull; after the
first complete answer the clock runs continuously (``run_continuously``).

A new attempt is not started once ``too_late_to_start()``: with almost nothing of ``wait`` left
it could only time out, and a timeout cools its model for a slowness that was the queue's; the
call reports ``NoLLMAvailableError(reason="timeout")`` instead.
"""

from __future__ import annotations

import time

from jevlaya_lab.broker.validation import check_wait

ATTEMPT_TIMEOUT_S = 60.0
MIN_START_S = 0.1  # an attempt needs at least this much of wait (or a quarter of a tiny wait)


class Budget:
    def __init__(self, wait: float | None, *, paused: bool = False) -> None:
        self.wait = check_wait(wait)  # already checked for calls; Budget is also used alone
        self._used = 0.0
        self._since: float | None = None if paused else time.monotonic()
        self._continuous = False

    @property
    def limited(self) -> bool:
        return bool(self.wait)

    @property
    def queues(self) -> bool:
        """May this call wait for a cooling or busy model?"""
        return self.wait != 0

    def used(self) -> float:
        extra = time.monotonic() - self._since if self._since is not None else 0.0
        return self._used + extra

    def remaining(self) -> float | None:
        """Seconds left (never negative), or ``None`` when there is no caller deadline."""
        if not self.limited:
            return None
        return max(0.0, self.wait - self.used())  # type: ignore[operator]

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0.0

    def too_late_to_start(self) -> bool:
        """Is too little of ``wait`` left for a new attempt to have a fair chance?"""
        left = self.remaining()
        return left is not None and left < min(MIN_START_S, 0.25 * self.wait)  # type: ignore

    def attempt_timeout(self) -> float:
        left = self.remaining()
        return ATTEMPT_TIMEOUT_S if left is None else left

    def pause(self) -> None:
        if self._since is not None and not self._continuous:
            self._used += time.monotonic() - self._since
            self._since = None

    def resume(self) -> None:
        if self._since is None:
            self._since = time.monotonic()

    def run_continuously(self) -> None:
        self.resume()
        self._continuous = True

    @property
    def budget_ms(self) -> float | None:
        return self.wait * 1000.0 if self.wait is not None else None
