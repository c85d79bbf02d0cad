"""``StreamCore``: one ``stream()`` call with one lane, read on demand (rules:
:mod:`jevlaya_lab.broker.streaming`). Each lane is an :class:`~jevlaya_lab.broker.attempt.Attempt`
that reads its own wire and ends itself; this module decides which lane comes next and what the
reader sees, plus the bookkeeping the races share (a lane's end, the clock after the first
answer, ``another()``, closing); :mod:`jevlaya_lab.broker.stream_race` adds background lanes.

The core never references the user-facing stream, so that object can be garbage collected
(which closes the core). It gets the broker's :class:`~jevlaya_lab.broker.gate.Gate` and a
``ready`` coroutine function giving the call's parts on the first pull: nothing is sent before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from jevlaya_lab.broker.attempt import Attempt, Attempts, Parts
from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import LLMRequestError, NoLLMAvailableError, ProviderError
from jevlaya_lab.broker.gate import Gate
from jevlaya_lab.broker.http import Failure, build_body
from jevlaya_lab.broker.journaling import CallJournal
from jevlaya_lab.broker.lanes import Lane, LaneView
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import Caller, ModelState, Pick, Pool
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.stream_errors import after_first_delta, no_first_delta
from jevlaya_lab.broker.validation import Call

log = logging.getLogger("jevlaya_lab.broker")


class StreamCore:
    """The state of one ``stream()`` call; it never references the user-facing object, so that
    object can be garbage collected (which closes the core)."""

    sticky = False  # the lane shown is the answer whatever other lanes do (a hedge)

    def __init__(self, gate: Gate, ready: Callable[[], Awaitable[Parts]], caller: Caller,
                 call: Call) -> None:
        self.gate = gate
        self._ready = ready
        self.pool: Pool  # these three are set by the first pull (the broker is ready then)
        self.attempts: Attempts
        self.journal: CallJournal
        self.caller = caller
        self.call = call
        self.messages = call.messages
        self.operation = call.operation
        self.trace_id = call.trace_id
        self.budget = Budget(call.wait, paused=True)
        self.lanes_wanted = call.lanes
        self.limit = AttemptLimit(call)
        self.window = call.window
        self.params = call.params
        self.lanes: list[Lane] = []
        self.tried: set[str] = set()
        self.errors: list[BaseException] = []
        self.shown: Lane | None = None
        self.delivered = 0
        self.winner: Lane | None = None
        self.final: Attempt | None = None  # what llm_name / call_id / rating name
        self.returned: set[str] = set()  # call_ids handed to the application
        self.ended = False  # iteration over
        self.closed = False
        self.no_more = False  # another() returns None from now on
        self.started_at: float | None = None
        self.changed = asyncio.Event()
        self.reading = False  # a pull or another() is in progress
        self.listeners: list[Callable[[LaneView], None]] = []
        self._expiry: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        gate.streams.add(self)

    # iteration ---------------------------------------------------------------------------------
    async def next(self) -> str:
        """The next delta; one reader at a time (a second concurrent pull is a RuntimeError,
        as two readers would split one answer between them)."""
        self._enter("read the next delta")
        try:
            return await self._next()
        finally:
            self.reading = False

    def _enter(self, what: str) -> None:
        if self.reading:
            raise RuntimeError(f"cannot {what}: this stream is being read elsewhere (another "
                               "task or thread waits for its next delta); read one stream "
                               "from one place at a time")
        self.reading = True

    async def _next(self) -> str:
        if self.ended or self.closed:
            raise StopAsyncIteration
        if self.started_at is None:
            self.pool, self.attempts, self.journal = await self._ready()
            self._loop = asyncio.get_running_loop()
            self.started_at = time.monotonic()
        self.budget.resume()
        try:
            piece = await self._read()
        except BaseException as exc:
            self.ended = True
            self.budget.run_continuously()
            self._settle_unread(exc)
            if isinstance(exc, Exception):  # the end, an error: bound what a crash may lose
                await self.journal.settled()
            raise
        self.budget.pause()
        return piece

    def _settle_unread(self, exc: BaseException) -> None:
        """The pull ended by ``exc``: an open lane read on demand (no task of its own) is never
        read again: journal it and free its slot now (a cancelled reader: ``cancelled``)."""
        for lane in self.lanes:
            if lane.task is None and lane.attempt.status is None:
                if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                    lane.attempt.cancel_status = "cancelled"
                lane.attempt.cancel()
                if lane.attempt.response is not None:
                    asyncio.ensure_future(lane.close_response())

    async def _read(self) -> str:
        """The next delta of the answer: one lane, read on demand (a race overrides this)."""
        while True:
            lane = self.shown or await self._open_next_lane()
            try:
                text = await self._pull(lane)
            except (Failure, TimeoutError) as exc:
                self._lane_failed(lane, exc)
                if lane.attempt.started_answer:
                    raise self._after_first_delta_error(lane, exc) from None
                self.shown = None
                if self.budget.too_late_to_start():
                    raise self._no_llm() from None
                continue
            if text is None:  # the answer ended
                if not lane.attempt.started_answer:
                    self._lane_failed(lane, Failure("invalid", "the stream ended with neither "
                                                    "text nor tool calls", 200))
                    self.shown = None
                    continue
                await self._lane_complete(lane)
                self.ended = True
                self.budget.run_continuously()
                raise StopAsyncIteration
            if text:
                self.final = lane.attempt
                self.delivered += 1
                return text

    async def _open_next_lane(self) -> Lane:
        """Open a stream on the best untried model (waiting only for a free slot)."""
        pool = self.pool
        while True:
            if self.gate.closed:  # closed while this stream waited for a slot
                raise self.gate.refused(in_flight=True)
            if self.limit.spent:
                raise self._no_llm()
            try:
                pick = pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
            except NoLLMAvailableError as exc:
                raise self._no_llm(exc) from None
            if pick.ready and self.budget.too_late_to_start():
                raise self._no_llm()  # a lane now could only time out and cool its model
            if pick.ready:
                lane = self._start_lane(pick.ready[0])
                try:
                    await self._open(lane)
                except (Failure, TimeoutError) as exc:
                    self._lane_failed(lane, exc)
                    if self.budget.too_late_to_start():
                        raise self._no_llm() from None
                    continue
                self.shown = lane
                return lane
            if not await self._wait_for_slot(pick):
                raise self._no_llm()

    async def _wait_for_slot(self, pick: Pick) -> bool:
        """Wait (within the budget) while candidates are only busy, not cooling; False when
        waiting cannot help. ``wait=0`` never queues: all-busy is then a ``timeout``."""
        busy = [s for s in pick.waiting if not s.cooling(time.time())]
        if not busy or self.budget.too_late_to_start():
            return False
        if not self.budget.queues:
            raise NoLLMAvailableError(
                f"every candidate is at its parallel limit ({', '.join(s.entry.name for s in busy)})"
                " and wait=0 does not queue", reason="timeout", errors=tuple(self.errors))
        await self.pool.changed(self.budget.remaining())
        return True

    def _start_lane(self, state: ModelState) -> Lane:
        self.tried.add(state.entry.name)
        attempt = self.attempts.start(state, self.caller, self.call, self.budget, self.limit)
        lane = Lane(attempt, len(self.lanes))
        self.lanes.append(lane)
        return lane

    async def _open(self, lane: Lane) -> None:
        """Send the lane's streaming request (raises ``Failure`` or ``TimeoutError``)."""
        attempt = lane.attempt
        await attempt.open(build_body(attempt.state.entry.model, self.messages, stream=True,
                                      params=self.params))

    async def _pull(self, lane: Lane) -> str | None:
        """The next text piece ("" for tool-call progress), or None at the end of the answer."""
        text = await lane.attempt.pull()
        if text is not None:
            self._touch(lane)
        return text

    # bookkeeping shared by both modes -------------------------------------------------------
    def _lane_failed(self, lane: Lane, exc: BaseException) -> None:
        if lane.attempt.status is None:
            if isinstance(exc, TimeoutError):
                lane.timed_out = True
                exc = lane.attempt.time_out()
            elif isinstance(exc, Failure):
                lane.attempt.fail(exc)
        lane.failure = exc
        self.errors.append(exc.to_error(lane.attempt.llm_name) if isinstance(exc, Failure)
                           else exc)
        if lane.attempt.response is not None:
            asyncio.ensure_future(lane.close_response())
        self._touch(lane)

    async def _lane_complete(self, lane: Lane) -> None:
        lane.complete = True
        lane.attempt.complete()
        if self.winner is None and not (self.sticky and self.shown not in (None, lane)):
            self.winner = lane
            self.returned.add(lane.attempt.call_id)
            if self.shown is None or self.shown is lane or self.lanes_wanted == 1:
                self.final = lane.attempt
            self._arm_expiry()
        self._touch(lane)
        await lane.close_response()  # the body was read to its end: the connection is reused

    def _after_first_delta_error(self, lane: Lane, exc: BaseException) -> LLMRequestError:
        self.final = lane.attempt
        return after_first_delta(lane, exc, self.delivered)

    def _no_llm(self, cause: NoLLMAvailableError | None = None) -> LLMRequestError:
        return no_first_delta(self.pool, self.caller, self.tried, self.errors, self.limit,
                              self.budget, cause)

    def _arm_expiry(self) -> None:
        """After the first complete answer the clock runs on its own: stop lanes at the end."""
        left = self.budget.remaining()
        if left is not None and self._loop is not None:
            self._expiry = self._loop.call_later(left, self._expire)

    def _expire(self) -> None:
        """``wait`` ran out: every unfinished lane is timed out (journaled, cooled if it sent
        nothing, the missed wait remembered) and its request cancelled."""
        for lane in self.lanes:
            if lane.alive:
                self._lane_failed(lane, TimeoutError())
                if lane.task is not None:
                    lane.task.cancel()

    # another() ---------------------------------------------------------------------------------
    async def another(self) -> LLMResult | None:
        self._enter("ask for another answer")
        try:
            result = await self._another()
            if self.started_at is not None:  # else the broker was never ready: no rows
                await self.journal.settled()
            return result
        finally:
            self.reading = False

    async def _another(self) -> LLMResult | None:
        if not self.ended and not self.closed:
            raise ValueError("another() asks for a replacement of a complete answer: read the "
                             "stream to its end (or catch its error) first")
        if self.no_more or self.closed or self.gate.closed:
            self.no_more = True
            return None
        self.budget.run_continuously()
        while True:
            done = [la for la in self.lanes if la.complete
                    and la.attempt.call_id not in self.returned]
            if done:
                self.returned.add(done[0].attempt.call_id)
                return self.result(done[0])
            if any(la.alive and la.task is not None for la in self.lanes):
                self.changed.clear()
                try:
                    async with asyncio.timeout(self.budget.remaining()):
                        await self.changed.wait()
                except TimeoutError:
                    self._expire()
                continue
            result = await self._fresh_answer()
            if result is None:
                self.no_more = True
            return result

    async def _fresh_answer(self) -> LLMResult | None:
        """A complete answer from a model this call has not tried, or None."""
        pool = self.pool
        while not self.budget.too_late_to_start() and not self.closed and not self.limit.spent:
            try:
                pick = pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
            except NoLLMAvailableError:
                return None
            if not pick.ready:
                return None
            state = pick.ready[0]
            self.tried.add(state.entry.name)
            attempt = self.attempts.start(state, self.caller, self.call, self.budget,
                                          self.limit)
            body = build_body(state.entry.model, self.messages, stream=False,
                              params=self.params)
            try:  # guarded: closing the broker waits for (or cancels) this lane
                await self.gate.guarded(attempt.send(body))
            except ProviderError as exc:
                self.errors.append(exc)
                continue
            self.returned.add(attempt.call_id)
            return attempt.result()
        return None

    # views -------------------------------------------------------------------------------------
    def view(self, lane: Lane) -> LaneView:
        attempt = lane.attempt
        state = "complete" if lane.complete else (attempt.status or "running")
        return LaneView(attempt.llm_name, attempt.call_id, lane.rank, attempt.text, state,
                        lane is self.shown, lane is self.winner, attempt.first_token_ms,
                        (time.perf_counter() - attempt.started) * 1000.0, dict(attempt.usage))

    def _touch(self, lane: Lane) -> None:
        """A lane changed: wake the reader and tell the listeners (their errors are logged,
        never raised into the stream)."""
        self.changed.set()
        for listener in self.listeners:
            try:
                listener(self.view(lane))
            except Exception:  # noqa: BLE001
                log.exception("stream listener %r failed", listener)

    # results, rating, closing -------------------------------------------------------------------
    def result(self, lane: Lane) -> LLMResult:
        return lane.attempt.result()

    def rate(self, score: float) -> None:
        attempt = self.final
        if attempt is None or attempt.status is None:
            raise ValueError("record_quality: this stream's answer has not ended and been "
                             "journaled yet; rate it after the loop (or after closing it)")
        if any(la.timed_out and la.attempt is attempt for la in self.lanes):
            limit = f"wait={self.budget.wait:g} s" if self.budget.limited else "the time allowed"
            raise ValueError(f"record_quality: the answer of {attempt.llm_name} did not complete "
                             f"within {limit}, and an unfinished answer "
                             "cannot be rated (the missed wait already steers short requests "
                             "away); rate a complete answer, e.g. one from another()")
        self.journal.rate(attempt.call_id, score)

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.ended = True
        if self._expiry is not None:
            self._expiry.cancel()
        tasks = []
        for lane in self.lanes:
            lane.attempt.cancel_status = "cancelled" if lane is self.shown else "superseded"
            if lane.task is not None and not lane.task.done():
                lane.task.cancel()
                tasks.append(lane.task)
            elif lane.attempt.status is None:
                lane.attempt.cancel()
                await lane.close_response()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.gate.streams.discard(self)
        if not all(self.journal.is_written(la.attempt.journal_seq) for la in self.lanes):
            await self.journal.flush()  # close returns once its rows are written

    def abort_soon(self) -> None:
        """Close from a garbage-collector callback, on any thread, without blocking."""
        loop = self._loop
        if self.ended and not any(la.alive for la in self.lanes):
            self.closed = True  # nothing left to cancel
            self.gate.streams.discard(self)
            return
        if self.closed or loop is None or loop.is_closed():
            self.closed = self.closed or loop is None
            if loop is None:
                self.gate.streams.discard(self)
            return
        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(self.aclose()))
        except RuntimeError:  # the loop stopped meanwhile
            pass
