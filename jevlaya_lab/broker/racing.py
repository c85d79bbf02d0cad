"""Races: ``fastest_of=N`` lanes on distinct models, the first complete answer wins.

:func:`route` is the routed non-streaming call (``ask``/``chat``): it starts up to ``lanes``
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
(spec §3). Attempts are bounded by :mod:`jevlaya_lab.broker.limits`.

:class:`RaceCore` is the same race for ``stream(fastest_of=N>1)``: every lane reads its answer to
the end in the background, whatever the reader does; the lane shown is picked by
``stream_selection_window``; when another lane completes first the next pull raises
``StreamReplacementError`` (the streaming page of the seed). :class:`HedgedCore` is a one-lane
stream with ``parallel_recovery``: the same two-lane race when it meets a recovering model,
except that the lane whose text is shown first is the answer (as with one lane).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from jevlaya_lab.broker.attempt import Attempt
from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import (
    LLMRequestError,
    LLMTimeoutError,
    NoLLMAvailableError,
    ProviderError,
    StreamReplacementError,
    closed_error,
    is_rejection,
)
from jevlaya_lab.broker.http import Failure, Reply, build_body
from jevlaya_lab.broker.keys import redact
from jevlaya_lab.broker.lanes import Lane
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import Caller, ModelState, Pick, Pool, utc
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.runtime import Runtime
from jevlaya_lab.broker.streaming import StreamCore
from jevlaya_lab.broker.validation import Call

log = logging.getLogger("jevlaya_lab.broker")


async def route(rt: Runtime, caller: Caller, call: Call) -> LLMResult:
    """The routed non-streaming call (see the module docstring)."""
    pool = await rt.ready()
    if rt.closed:  # closed while this call waited for the registry
        raise closed_error(rt.name)
    try:
        result = await rt.guarded(_Route(rt, pool, caller, call).run())
    except LLMRequestError:
        await rt.journal_settled()
        raise
    await rt.journal_settled()
    return result


class _Route:
    """The state of one routed call: lanes running, models ruled out, errors so far."""

    def __init__(self, rt: Runtime, pool: Pool, caller: Caller, call: Call) -> None:
        self.rt = rt
        self.pool = pool
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
                pick = self._start_lanes()
                if not self.running:
                    await self._queue(pick)
                    continue
                done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    attempt = self.running.pop(task)
                    exc = task.exception()
                    if exc is None:
                        won = True
                        return self.rt.result(attempt)
                    self.errors.append(exc)
                    if is_rejection(exc):
                        self.excluded.add(attempt.llm_name)
                        self.last_rejection = exc
        finally:
            for task, attempt in self.running.items():  # race losers, or the caller gave up
                attempt.cancel_status = "superseded" if won else "cancelled"
                task.cancel()
            if self.running:
                await asyncio.gather(*self.running, return_exceptions=True)

    def _start_lanes(self) -> Pick | None:
        """Start lanes on the best ready models up to ``fastest_of``; what the pool offered."""
        pick = None
        while len(self.running) < self.lanes:
            if self.limit.spent:
                if self.running:
                    break
                raise self._exhausted(self.last_rejection)
            busy = self.excluded | self.limit.used_up() | {
                a.llm_name for a in self.running.values()}
            try:
                pick = self.pool.pick(self.caller, busy, self.call.operation, self.budget.wait)
            except NoLLMAvailableError as exc:
                if self.running:
                    break
                if exc.reason in ("excluded", "no_keys") and self.last_rejection is not None:
                    raise self.last_rejection from None
                if exc.reason == "excluded" and self.limit.used_up():
                    raise self._exhausted(None) from None
                exc.errors = tuple(self.errors)
                raise
            if not pick.ready or self.budget.too_late_to_start():
                break
            if hedges(self.call, pick.ready[0]):
                self.lanes = 2  # race the recovering model with the next one (sticky)
            attempt = self.rt.attempt(pick.ready[0], self.caller, self.call, self.budget,
                                      self.limit)
            body = build_body(attempt.state.entry.model, self.call.messages, stream=False,
                              tools=self.call.tools, params=self.call.params)
            task = self.rt.lane_task(attempt, self.rt.run_lane(attempt, self.caller, body,
                                                               self.budget))
            self.running[task] = attempt
        return pick

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


class RaceCore(StreamCore):
    """``stream(fastest_of=N>1)``: N lanes read in the background; the first complete answer
    wins (see the module docstring and :mod:`jevlaya_lab.broker.streaming`)."""

    async def _read(self) -> str:
        """The next delta of the lane shown, or the replacement when another lane won."""
        if not self.lanes:
            self._fill_lanes()
        while True:
            if self.closed:  # aclose() while this pull waited: the stream is over
                raise StopAsyncIteration
            if self.winner is not None and self.shown is not None \
                    and self.winner is not self.shown and not self.sticky:
                self.final = self.winner.attempt
                self.ended = True
                self.budget.run_continuously()
                raise StreamReplacementError(
                    f"{self.winner.attempt.llm_name} finished first; replace the text shown "
                    f"from {self.shown.attempt.llm_name}", replacement=self.result(self.winner),
                    streamed_llm_name=self.shown.attempt.llm_name)
            if self.shown is None:
                self.shown = self._choose_shown()
            lane = self.shown
            if lane is not None:
                if self.delivered < len(lane.attempt.pieces):
                    self.delivered += 1
                    self.final = self.final if self.winner is not None else lane.attempt
                    return lane.attempt.pieces[self.delivered - 1]
                if lane.complete:
                    self.ended = True
                    self.budget.run_continuously()
                    raise StopAsyncIteration
                if self.sticky and lane.failure is not None:  # no other answer replaces it
                    self._supersede_others(lane)
                    raise self._after_first_delta_error(lane, lane.failure)
            if not any(la.alive for la in self.lanes) and self.winner is None:
                if lane is not None and lane.failure is not None:
                    raise self._after_first_delta_error(lane, lane.failure)
                if await self._race_waits_for_slots():
                    continue
                raise self._no_llm()
            timeout = self.budget.remaining()
            if self.shown is None and self._window_open():
                left = self.started_at + self.window - time.monotonic()  # type: ignore[operator]
                timeout = left if timeout is None else min(timeout, left)
            self.changed.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self.changed.wait()
            except TimeoutError:
                if self.winner is not None:
                    continue  # a lane completed in time, just as the clock ran out: it stands
                if self.budget.expired():
                    self._expire()
                    if self.shown is not None and self.delivered:
                        raise LLMTimeoutError(
                            f"wait={self.budget.wait:g} s ran out after {self.delivered} "
                            "delta(s); they stand") from None
                    raise self._no_llm() from None

    async def _race_waits_for_slots(self) -> bool:
        """No lane could start because every candidate is busy: wait for a slot, then fill."""
        if self.limit.spent:
            return False
        try:
            pick = self.rt.pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
        except NoLLMAvailableError as exc:
            raise self._no_llm(exc) from None
        if pick.ready:
            self._fill_lanes()
            return any(la.alive for la in self.lanes)
        if await self._wait_for_slot(pick):
            self._fill_lanes()
            return True
        return False

    def _window_open(self) -> bool:
        first = self.lanes[0] if self.lanes else None
        return (self.window > 0 and first is not None and first.alive
                and time.monotonic() < self.started_at + self.window)  # type: ignore[operator]

    def _choose_shown(self) -> Lane | None:
        if self.winner is not None:
            return self.winner
        if not self.lanes:
            return None
        first = self.lanes[0]
        if first.has_text and first.failure is None:
            return first
        if self._window_open():
            return None
        with_text = [la for la in self.lanes if la.has_text and la.failure is None]
        if not with_text:
            return None
        return min(with_text, key=lambda la: (la.attempt.first_token_ms or 0.0) + la.attempt.started)

    def _supersede_others(self, lane: Lane) -> None:
        """Cancel every lane but ``lane`` (journaled ``superseded``)."""
        for other in self.lanes:
            if other is not lane and other.alive and other.task is not None:
                other.attempt.cancel_status = "superseded"
                other.task.cancel()

    def _fill_lanes(self) -> None:
        """Start lanes on distinct untried models until ``fastest_of`` run (no waiting)."""
        pool = self.rt.pool
        while self.winner is None and not self.closed and not self.limit.spent and \
                not (self.sticky and self.shown is not None) and \
                sum(la.alive for la in self.lanes) < self.lanes_wanted:
            try:
                pick = pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
            except NoLLMAvailableError:
                return
            if not pick.ready or self.budget.too_late_to_start():
                return
            lane = self._start_lane(pick.ready[0])
            lane.task = self.rt.lane_task(lane.attempt, self._pump(lane))
            # a lane cancelled before it ran must still wake the reader waiting for it
            lane.task.add_done_callback(functools.partial(self._lane_ended, lane))

    def _lane_ended(self, lane: Lane, _task: asyncio.Task[None]) -> None:
        self._touch(lane)

    async def _pump(self, lane: Lane) -> None:
        """Read one race lane to its end, whatever the reader does."""
        try:
            await self._open(lane)
            while True:
                text = await self._pull(lane)
                if text is None:
                    break
            if not lane.attempt.started_answer:
                raise Failure("invalid", "the stream ended with neither text nor tool calls", 200)
        except asyncio.CancelledError:
            lane.attempt.finish(lane.attempt.cancel_status)
            await lane.close_response()
            self._touch(lane)
            raise
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, (Failure, TimeoutError)):
                # a lane that died of a surprise must not leave the reader waiting for it
                log.exception("stream lane %s failed", lane.attempt.llm_name)
                exc = Failure("invalid", redact(f"{type(exc).__name__}: {exc}", lane.key))
            self._lane_failed(lane, exc)
            if self.winner is None:
                self._fill_lanes()
            return
        await self._lane_complete(lane)



class _Hedge(Exception):
    """The next lane of a one-lane stream would be a recovering model: become a hedge."""


class HedgedCore(RaceCore):
    """``stream(parallel_recovery=True)`` with ``fastest_of=1``: one lane read on demand, like
    :class:`StreamCore`, until the next model to try is *recovering* (cooled down since its
    last success) and another model is ready too; from then on a race of two lanes, that
    model and the next one. The first lane to give a delta is shown and kept: it is the
    answer (``sticky``: no ``StreamReplacementError``, as with one lane). A failure of it after
    its first delta raises as with one lane and supersedes the other lane; when it completes,
    the other lane runs on like a race lane (kept for ``another()``; closing the stream
    supersedes it). A lane that fails before any delta is shown is refilled from untried
    models."""

    hedged = False

    async def _read(self) -> str:
        if not self.hedged:
            try:
                return await StreamCore._read(self)
            except _Hedge:
                self.hedged = self.sticky = True
                self.lanes_wanted, self.window = 2, 0.0
                self._fill_lanes()
        return await RaceCore._read(self)

    async def _open_next_lane(self) -> Lane:
        try:
            pick = self.rt.pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
        except NoLLMAvailableError:
            pick = None  # the one-lane path raises it with its own wording
        if pick is not None and len(pick.ready) > 1 and hedges(self.call, pick.ready[0]) \
                and not self.budget.too_late_to_start() and not self.limit.spent:
            raise _Hedge
        return await super()._open_next_lane()


def stream_core(rt: Runtime, caller: Caller, call: Call) -> StreamCore:
    """The state of a new ``stream()`` call: a race for ``fastest_of > 1``; else one lane,
    which with ``parallel_recovery`` becomes a hedge when it meets a recovering model."""
    if call.lanes > 1:
        return RaceCore(rt, caller, call)
    return HedgedCore(rt, caller, call) if call.parallel_recovery else StreamCore(rt, caller, call)
