"""The routed call (``ask``/``chat``): failover, ``fastest_of=N`` races, ``parallel_recovery``.

:func:`route` starts up to ``lanes``
attempts on the best ready models, refills a failed lane from models this call has not ruled
out, waits for a cooling or busy model while ``wait`` allows, and returns the first complete
answer; the other lanes are cancelled and journaled ``superseded``. With ``fastest_of=1`` this
is plain failover, except with ``parallel_recovery`` (the default, as llmbroker 1.11): when the
model a lane is about to try is *recovering* (it was cooled down and has not answered since),
the call becomes a race of two from then on, that model and the next best one, so a model
that may still be broken or slow costs the caller nothing; its first success ends its
recovery, and a model that keeps losing such races stays recovering (every call races it).
``parallel_recovery=False`` tries it alone. A model that rejects the request (4xx other than
408/429) is ruled out for the call; when every candidate is, the last provider error is raised
(as for a stream). Attempts are bounded by :mod:`jevlaya_lab.broker.limits`.

The call's control stays here from start to end: this module picks models from the pool,
makes each :class:`~jevlaya_lab.broker.attempt.Attempt` and awaits its ``send``; an attempt
ends itself (pool outcome, slot, journal row) and calls nothing back. The same races for
streams are in :mod:`jevlaya_lab.broker.stream_race`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from jevlaya_lab.broker.attempt import Attempt, Attempts, Parts, lane_task
from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import (
    LLMRequestError,
    NoLLMAvailableError,
    ProviderError,
    is_rejection,
)
from jevlaya_lab.broker.gate import Gate
from jevlaya_lab.broker.http import Reply, build_body
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import Caller, ModelState, Pick, Pool, utc
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.validation import Call

log = logging.getLogger("jevlaya_lab.broker")


async def route(parts: Parts, gate: Gate, caller: Caller, call: Call) -> LLMResult:
    """The routed non-streaming call (see the module docstring), which closing may cancel
    (:meth:`~jevlaya_lab.broker.gate.Gate.guarded`); it returns once the journal has settled
    its rows (:meth:`~jevlaya_lab.broker.journaling.CallJournal.settled`)."""
    pool, attempts, journal = parts
    gate.check()  # closed while this call waited for the registry
    try:
        if not attempts.observers:
            result = await gate.guarded(_Route(pool, attempts, caller, call).run())
        else:
            with contextlib.ExitStack() as scopes:  # observers' call scopes (a tracer's call span)
                for observer in list(attempts.observers):
                    opener = getattr(observer, "call_scope", None)
                    if opener is not None:
                        scopes.enter_context(opener(call))
                result = await gate.guarded(_Route(pool, attempts, caller, call).run())
    except LLMRequestError:
        if journal.must_settle():
            await journal.settled()
        raise
    if journal.must_settle():
        await journal.settled()
    return result


class _Route:
    """The state of one routed call: lanes running, models ruled out, errors so far."""

    def __init__(self, pool: Pool, attempts: Attempts, caller: Caller, call: Call) -> None:
        self.pool = pool
        self.attempts = attempts
        self.caller = caller
        self.call = call
        self.budget = Budget(call.wait)
        self.limit = AttemptLimit(call)
        self.excluded: set[str] = set()
        self.errors: list[BaseException] = []
        self.last_rejection: ProviderError | None = None
        self.running: dict[asyncio.Task[Reply], Attempt] = {}
        self.lanes = call.lanes  # 2 from the moment a recovering model is tried (hedged)
        self.waited = 0.0  # seconds spent queueing for cooling or busy models

    async def run(self) -> LLMResult:
        won = False
        try:
            while True:
                if self.lanes == 1 and not self.running:
                    pick, attempt = self._next_lane()
                    if attempt is None:
                        await self._queue(pick)
                        continue
                    if self.lanes == 1:  # plain failover: the lane runs in this task
                        attempt.cancel_status = "cancelled"  # only the caller can stop it
                        try:
                            await attempt.send(self._body(attempt))
                        except Exception as exc:  # noqa: BLE001 - a ProviderError, journaled
                            self._lost(attempt, exc)
                            continue
                        won = True
                        return attempt.result()
                    self._run_lane(attempt)  # it met a recovering model: a race from now on
                pick = self._start_lanes()
                if not self.running:
                    await self._queue(pick)
                    continue
                done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    attempt = self.running.pop(task)
                    error = task.exception()
                    if error is None:
                        won = True
                        return attempt.result()
                    self._lost(attempt, error)
        finally:
            for task, attempt in self.running.items():  # race losers, or the caller gave up
                attempt.cancel_status = "superseded" if won else "cancelled"
                task.cancel()
            if self.running:
                await asyncio.gather(*self.running, return_exceptions=True)

    def _lost(self, attempt: Attempt, exc: BaseException) -> None:
        """A lane failed (already journaled and applied to the pool by the attempt)."""
        self.errors.append(exc)
        if is_rejection(exc):
            self.excluded.add(attempt.llm_name)
            self.last_rejection = exc

    def _body(self, attempt: Attempt) -> dict[str, Any]:
        return build_body(attempt.state.entry.model, self.call.messages, stream=False,
                          tools=self.call.tools, params=self.call.params)

    def _run_lane(self, attempt: Attempt) -> None:
        self.running[lane_task(attempt, attempt.send(self._body(attempt)))] = attempt

    def _start_lanes(self) -> Pick | None:
        """Start lanes on the best ready models up to ``fastest_of``; what the pool offered."""
        pick = None
        while len(self.running) < self.lanes:
            offered, attempt = self._next_lane()
            pick = offered or pick
            if attempt is None:
                break
            self._run_lane(attempt)
        return pick

    def _next_lane(self) -> tuple[Pick | None, Attempt | None]:
        """What the pool offers and a new attempt on its best model, or no attempt when none
        can start now (the call's end is raised when none ever can)."""
        if self.limit.spent:
            if self.running:
                return None, None
            raise self._exhausted(self.last_rejection)
        # before the first attempt nothing is excluded, used up or running
        busy = (self.excluded | self.limit.used_up() | {a.llm_name for a in self.running.values()}
                if self.limit.made else set())
        try:
            pick = self.pool.pick(self.caller, busy, self.call.operation, self.budget.wait)
        except NoLLMAvailableError as exc:
            if self.running:
                return None, None
            if exc.reason in ("excluded", "no_keys") and self.last_rejection is not None:
                raise self.last_rejection from None
            if exc.reason == "excluded" and self.limit.used_up():
                raise self._exhausted(None) from None
            exc.errors = tuple(self.errors)
            raise
        if not pick.ready or self.budget.too_late_to_start():
            return pick, None
        if hedges(self.call, pick.ready[0]):
            self.lanes = 2  # race the recovering model with the next one (sticky)
        return pick, self.attempts.start(pick.ready[0], self.caller, self.call, self.budget,
                                         self.limit)

    def _exhausted(self, last_rejection: ProviderError | None) -> LLMRequestError:
        """The call reached an attempt ceiling: end it as when every candidate is ruled out."""
        if last_rejection is not None:
            return last_rejection
        now = time.time()
        cooling = [s.cooldown_until for s in self.pool.members(self.caller) if s.cooling(now)]
        retry_at = min(cooling) if cooling else None
        last = f"; last error: {self.errors[-1]}" if self.errors else ""
        waited = f"; waited {self.waited:.1f} s for cooling models" if self.waited else ""
        return NoLLMAvailableError(
            f"no model answered this call{self.limit.note()}{waited}{last}",
            reason="timeout" if retry_at else "excluded", retry_at=utc(retry_at),
            errors=tuple(self.errors))

    async def _queue(self, pick: Pick | None) -> None:
        """Nothing can start now: wait for a slot or a cooldown within the budget, or raise."""
        budget = self.budget
        retry_at = pick.retry_at if pick is not None else None
        coming = (retry_at - time.time()) if retry_at else 0.0
        if budget.wait is None:  # no caller deadline: wait for the pool, cooldowns included
            # bounded all the same: at most max_attempts requests, each model cooled at most
            # max_attempts_per_model - 1 times in between for its Retry-After (doubling, capped
            # at MAX_COOLDOWN_S); said in the log, so a long wait is never silent
            if coming > 0:
                log.info("call %s waits %.1f s for a cooling model (wait=None: bounded by "
                         "max_attempts=%d, max_attempts_per_model=%d and the providers' "
                         "Retry-After; %d attempt(s) so far)", self.call.trace_id, coming,
                         self.limit.max_attempts, self.limit.max_per_model, self.limit.made)
            started = time.monotonic()
            await self.pool.changed(coming if coming > 0 else None)
            self.waited += time.monotonic() - started
            return
        left = budget.remaining()
        if not budget.queues or left is None or left <= 0 or coming > left \
                or budget.too_late_to_start():
            raise NoLLMAvailableError(
                "no model could answer in time"
                + (f"; the first cooling model returns at {utc(retry_at):%H:%M:%S} UTC"
                   if retry_at else "")
                + (f" (wait={budget.wait:g})" if budget.wait is not None else ""),
                reason="timeout", retry_at=utc(retry_at), errors=tuple(self.errors))
        await self.pool.changed(min(left, coming) if coming > 0 else left)


def hedges(call: Call, state: ModelState) -> bool:
    """Does starting ``state`` for this call make it a race of two (``parallel_recovery``)?"""
    return call.parallel_recovery and call.lanes == 1 and state.recovering


