"""What a stream raises when its answer does not come: before or after the first delta.

Before the first delta (:func:`no_first_delta`): the pool's own reason when nothing was tried
(an empty pool, every model disabled, no key); ``NoLLMAvailableError(reason="timeout")`` with
``retry_at`` when the models that could serve this caller are only cooling, or when ``wait``
ran out; else the last provider rejection when there was one (as ``ask`` raises it), or
``reason="excluded"``. After it (:func:`after_first_delta`): ``LLMTimeoutError`` when ``wait``
cut the answer, ``StreamInterruptedError`` when the provider broke it; the delivered deltas
stand either way.
"""

from __future__ import annotations

import time

from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import (
    LLMRequestError,
    LLMTimeoutError,
    NoLLMAvailableError,
    ProviderError,
    StreamInterruptedError,
    is_rejection,
)
from jevlaya_lab.broker.lanes import Lane
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import Caller, Pool, utc


def after_first_delta(lane: Lane, exc: BaseException, delivered: int) -> LLMRequestError:
    """The error of an answer that ended after ``delivered`` deltas were shown."""
    if lane.timed_out:
        return LLMTimeoutError(f"{lane.attempt.llm_name}: {exc}; the {delivered} "
                               "delta(s) delivered stand")
    name = lane.attempt.llm_name
    return StreamInterruptedError(f"{name}: the answer broke after {delivered} "
                                  f"delta(s) ({exc}); they stand", llm_name=name)


def no_first_delta(pool: Pool, caller: Caller, tried: set[str], errors_so_far: list[BaseException],
                   limit: AttemptLimit, budget: Budget,
                   cause: NoLLMAvailableError | None = None) -> LLMRequestError:
    """Why no first delta came (see the module docstring)."""
    errors = tuple(errors_so_far)
    if cause is not None and cause.reason != "excluded" and not tried:
        cause.errors = errors
        return cause
    now = time.time()
    cooling = [s.cooldown_until for s in pool.members(caller)  # its candidates
               if s.cooling(now) and not s.disabled and pool.key_for(s, caller)[0]]
    retry_at = min(cooling) if cooling else None
    names = (", ".join(sorted(tried)) or "none") + limit.note()
    if retry_at is not None or budget.too_late_to_start():
        return NoLLMAvailableError(
            f"no model gave a first delta (tried: {names})"
            + (f"; the first cooling model returns at {utc(retry_at):%H:%M:%S} UTC"
               if retry_at else f"; wait={budget.wait:g} s ran out"),
            reason="timeout", retry_at=utc(retry_at), errors=errors)
    rejections = [e for e in errors if isinstance(e, ProviderError) and is_rejection(e)]
    if rejections:
        return rejections[-1]
    last = f"; last error: {errors[-1]}" if errors else ""
    return NoLLMAvailableError(f"no model can serve this stream (tried: {names}){last}",
                               reason="excluded", errors=errors)
