"""Streams of several lanes: ``stream(fastest_of=N>1)`` races and ``parallel_recovery`` hedges.

:class:`RaceCore`: N lanes on distinct models, each read to the end in the background by its
own task whatever the reader does; the lane shown is picked by ``stream_selection_window``
(the first ranked model's text if it comes within the window, else the first text of any lane);
the first *complete* answer wins, and when it is not the lane shown the next pull raises
``StreamReplacementError``. Chunks of different lanes are never spliced. A failed lane is
refilled from untried models.

:class:`HedgedCore`: a one-lane stream with ``parallel_recovery`` (the default). It reads one
lane on demand like :class:`~jevlaya_lab.broker.stream_core.StreamCore` until the next model to
try is *recovering* (cooled down since its last success) and another model is ready too; from
then on it is a race of two lanes, that model and the next one, except that the lane whose text
is shown first is the answer (``sticky``: no replacement, as with one lane).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from jevlaya_lab.broker.attempt import Parts, lane_task
from jevlaya_lab.broker.errors import LLMTimeoutError, NoLLMAvailableError, StreamReplacementError
from jevlaya_lab.broker.gate import Gate
from jevlaya_lab.broker.http import Failure
from jevlaya_lab.broker.keys import redact
from jevlaya_lab.broker.lanes import Lane
from jevlaya_lab.broker.pool import Caller
from jevlaya_lab.broker.racing import hedges
from jevlaya_lab.broker.stream_core import StreamCore
from jevlaya_lab.broker.validation import Call

log = logging.getLogger("jevlaya_lab.broker")


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
            pick = self.pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
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
        pool = self.pool
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
            lane.task = lane_task(lane.attempt, self._pump(lane))
            lane.task.add_done_callback(self._waker(lane))

    def _waker(self, lane: Lane) -> Callable[[asyncio.Task[None]], None]:
        """A done callback: a lane cancelled before it ran must still wake the reader."""
        return lambda _task: self._touch(lane)

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
            lane.attempt.cancel()
            await lane.close_response()
            self._touch(lane)
            raise
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, (Failure, TimeoutError)):
                # a lane that died of a surprise must not leave the reader waiting for it
                log.exception("stream lane %s failed", lane.attempt.llm_name)
                exc = Failure("invalid", redact(f"{type(exc).__name__}: {exc}", lane.attempt.key))
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
            pick = self.pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
        except NoLLMAvailableError:
            pick = None  # the one-lane path raises it with its own wording
        if pick is not None and len(pick.ready) > 1 and hedges(self.call, pick.ready[0]) \
                and not self.budget.too_late_to_start() and not self.limit.spent:
            raise _Hedge
        return await super()._open_next_lane()


def stream_core(gate: Gate, ready: Callable[[], Awaitable[Parts]], caller: Caller,
                call: Call) -> StreamCore:
    """The state of a new ``stream()`` call: a race for ``fastest_of > 1``; else one lane,
    which with ``parallel_recovery`` becomes a hedge when it meets a recovering model."""
    kind = RaceCore if call.lanes > 1 else HedgedCore if call.parallel_recovery else StreamCore
    return kind(gate, ready, caller, call)
