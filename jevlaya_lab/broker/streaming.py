"""``stream()``: text deltas with failover before the first delta, races, ``another()`` and a
paused clock. The rules are the streaming page of the Broker's seed:

- Before the first delta the stream may fail over (provider error, rate limit, an answer with
  neither text nor tool calls); it never tries the same model twice, and when only cooling models
  are left it ends with ``NoLLMAvailableError(reason="timeout", retry_at=...)``; when every
  model rejected the request (4xx other than 408/429) it raises the last provider error, as
  ``ask`` does. After the first delta a broken answer raises ``StreamInterruptedError``; the
  delivered deltas stand.
- ``fastest_of=1`` (:class:`StreamCore`, this module): nothing is read ahead of the consumer
  (each pull reads the wire). ``fastest_of=N>1`` (:class:`~jevlaya_lab.broker.racing.RaceCore`):
  N lanes read their answers to completion in the background, whatever the reader does; the
  first *complete* answer wins; if the lane shown is not the winner the next pull raises
  ``StreamReplacementError``; chunks of different lanes are never spliced.
  With ``parallel_recovery`` (default) a one-lane stream that meets a model back from a
  cooldown races it with the next model, keeping the lane shown first
  (:class:`~jevlaya_lab.broker.racing.HedgedCore`).
  ``stream_selection_window`` only picks the lane shown first.
- ``wait`` bounds the whole answer; the clock pauses while a delta is in the application's hands
  and runs continuously after the first complete answer (validation and ``another()``).
  Running out before the first delta is ``NoLLMAvailableError``, after it ``LLMTimeoutError``.
- ``another()``: retained complete answers, then lanes still running, then untried models;
  ``None`` forever once nothing more can be had or the stream is closed.
- ``record_quality`` raises ``ValueError`` before the answer has ended and been journaled, and
  for an answer that ``wait`` cut off (the seed: an unfinished answer cannot be rated); a
  partial answer the application closed itself, or one the provider broke, can be rated.
- ``aclose()``, the optional context, leaving the broker, and garbage collection cancel the
  provider requests, journal the attempts (``cancelled`` for the lane shown, ``superseded`` for
  the others) and release the slots. A ``break`` alone does not close the stream.

With ``wait=None`` a model that sends nothing for 60 s (``ATTEMPT_TIMEOUT_S``) counts as failed.
``another()`` before the stream has ended raises ``ValueError``. In a notebook a stream displays
itself (model, state, text so far, lanes) from a snapshot, without starting or waiting on it
(:func:`stream_mimebundle`; the seed says nothing about display).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from jevlaya_lab import display
from jevlaya_lab.broker.attempt import Attempt
from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import (
    LLMRequestError,
    LLMTimeoutError,
    NoLLMAvailableError,
    ProviderError,
    StreamInterruptedError,
    closed_error,
    is_rejection,
)
from jevlaya_lab.broker.http import Failure, build_body, open_stream, read_deltas
from jevlaya_lab.broker.keys import redact
from jevlaya_lab.broker.lanes import Lane, LaneView
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import Caller, ModelState, Pick, utc
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.runtime import Runtime
from jevlaya_lab.broker.validation import Call

log = logging.getLogger("jevlaya_lab.broker")


class StreamCore:
    """The state of one ``stream()`` call; it never references the user-facing object, so that
    object can be garbage collected (which closes the core)."""

    sticky = False  # the lane shown is the answer whatever other lanes do (a hedge)

    def __init__(self, rt: Runtime, caller: Caller, call: Call) -> None:
        self.rt = rt
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
        rt.streams.add(self)

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
            await self.rt.ready()
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
                await self.rt.journal_settled()
            raise
        self.budget.pause()
        return piece

    def _settle_unread(self, exc: BaseException) -> None:
        """The pull ended by ``exc``: a lane read on demand (no task of its own) that is still
        open will never be read again, so journal it and free its slot now, not at
        ``aclose()`` or garbage collection (a cancelled or closed reader: ``cancelled``)."""
        for lane in self.lanes:
            if lane.task is None and lane.attempt.status is None:
                if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                    lane.attempt.cancel_status = "cancelled"
                lane.attempt.finish(lane.attempt.cancel_status)
                if lane.response is not None:
                    asyncio.ensure_future(lane.close_response())

    # one lane, read on demand -------------------------------------------------------------------
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
        pool = self.rt.pool
        while True:
            if self.rt.closed:  # closed while this stream waited for a slot
                raise closed_error(self.rt.name, in_flight=True)
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
        await self.rt.pool.changed(self.budget.remaining())
        return True

    def _start_lane(self, state: ModelState) -> Lane:
        self.tried.add(state.entry.name)
        attempt = self.rt.attempt(state, self.caller, self.call, self.budget, self.limit)
        lane = Lane(attempt, len(self.lanes))
        self.lanes.append(lane)
        return lane

    async def _open(self, lane: Lane) -> None:
        attempt = lane.attempt
        url, key = await self.rt.endpoint(attempt.state, self.caller)
        lane.key = key
        body = build_body(attempt.state.entry.model, self.messages, stream=True,
                          params=self.params)
        try:
            async with asyncio.timeout(self.budget.attempt_timeout()):
                lane.response = await open_stream(self.rt.client, url, key, body)
        except (Failure, TimeoutError):
            raise
        except Exception as exc:  # noqa: BLE001 - a surprise fails this lane, as in run_lane
            log.exception("opening a stream on %s failed", attempt.llm_name)
            raise Failure("invalid", redact(f"{type(exc).__name__}: {exc}", key)) from None
        lane.deltas = read_deltas(lane.response, key)

    async def _pull(self, lane: Lane) -> str | None:
        """The next text piece ("" for tool-call progress), or None at the end of the answer."""
        assert lane.deltas is not None
        while True:
            try:
                async with asyncio.timeout(self.budget.attempt_timeout()):
                    delta = await lane.deltas.__anext__()
            except StopAsyncIteration:
                return None
            if delta.usage:
                lane.attempt.usage = delta.usage
            if delta.finish_reason:
                lane.attempt.finish_reason = delta.finish_reason
            if delta.text or delta.tool_calls:
                lane.attempt.add(delta.text, delta.tool_calls)
                self._touch(lane)
                return delta.text

    # bookkeeping shared by both modes -------------------------------------------------------
    def _lane_failed(self, lane: Lane, exc: BaseException) -> None:
        if lane.attempt.status is None:
            if isinstance(exc, TimeoutError):
                lane.timed_out = True
                exc = self.rt.timed_out(lane.attempt, self.budget)
            elif isinstance(exc, Failure):
                self.rt.failed(lane.attempt, self.caller, exc)
        lane.failure = exc
        self.errors.append(exc.to_error(lane.attempt.llm_name) if isinstance(exc, Failure)
                           else exc)
        if lane.response is not None:
            asyncio.ensure_future(lane.close_response())
        self._touch(lane)

    async def _lane_complete(self, lane: Lane) -> None:
        lane.complete = True
        self.rt.pool.succeeded(lane.attempt.llm_name)
        lane.attempt.succeed()
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
        if lane.timed_out:
            return LLMTimeoutError(f"{lane.attempt.llm_name}: {exc}; the {self.delivered} "
                                   "delta(s) delivered stand")
        name = lane.attempt.llm_name
        return StreamInterruptedError(f"{name}: the answer broke after {self.delivered} "
                                      f"delta(s) ({exc}); they stand", llm_name=name)

    def _no_llm(self, cause: NoLLMAvailableError | None = None) -> LLMRequestError:
        """Why no first delta came: the pool's own reason when nothing was tried; ``timeout``
        (with ``retry_at``) when the models are only cooling or time ran out; else the last
        provider rejection when there was one (as ``ask``, spec §3), or ``excluded``."""
        errors = tuple(self.errors)
        if cause is not None and cause.reason != "excluded" and not self.tried:
            cause.errors = errors
            return cause
        pool = self.rt.pool
        now = time.time()
        cooling = [s.cooldown_until for s in pool.members(self.caller)  # its candidates
                   if s.cooling(now) and not s.disabled and pool.key_for(s, self.caller)[0]]
        retry_at = min(cooling) if cooling else None
        tried = ", ".join(sorted(self.tried)) or "none"
        tried += self.limit.note()
        if retry_at is not None or self.budget.too_late_to_start():
            return NoLLMAvailableError(
                f"no model gave a first delta (tried: {tried})"
                + (f"; the first cooling model returns at {utc(retry_at):%H:%M:%S} UTC"
                   if retry_at else f"; wait={self.budget.wait:g} s ran out"),
                reason="timeout", retry_at=utc(retry_at), errors=errors)
        rejections = [e for e in errors if isinstance(e, ProviderError) and is_rejection(e)]
        if rejections:
            return rejections[-1]
        last = f"; last error: {errors[-1]}" if errors else ""
        return NoLLMAvailableError(f"no model can serve this stream (tried: {tried}){last}",
                                   reason="excluded", errors=errors)

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
            await self.rt.journal_settled()
            return result
        finally:
            self.reading = False

    async def _another(self) -> LLMResult | None:
        if not self.ended and not self.closed:
            raise ValueError("another() asks for a replacement of a complete answer: read the "
                             "stream to its end (or catch its error) first")
        if self.no_more or self.closed or self.rt.closed:
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
        pool = self.rt.pool
        while not self.budget.too_late_to_start() and not self.closed and not self.limit.spent:
            try:
                pick = pool.pick(self.caller, self.tried, self.operation, self.budget.wait)
            except NoLLMAvailableError:
                return None
            if not pick.ready:
                return None
            state = pick.ready[0]
            self.tried.add(state.entry.name)
            attempt = self.rt.attempt(state, self.caller, self.call, self.budget, self.limit)
            body = build_body(state.entry.model, self.messages, stream=False,
                              params=self.params)
            try:  # guarded: closing the broker waits for (or cancels) this lane
                await self.rt.guarded(
                    self.rt.run_lane(attempt, self.caller, body, self.budget), attempt)
            except ProviderError as exc:
                self.errors.append(exc)
                continue
            self.returned.add(attempt.call_id)
            return self.rt.result(attempt)
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
        return self.rt.result(lane.attempt)

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
        self.rt.rate(attempt.call_id, score)

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
                lane.attempt.finish(lane.attempt.cancel_status)
                await lane.close_response()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.rt.streams.discard(self)
        writer = self.rt.writer
        if writer.written < max((la.attempt.journal_seq for la in self.lanes), default=0):
            await asyncio.to_thread(writer.flush)  # close returns once its rows are written

    def abort_soon(self) -> None:
        """Close from a garbage-collector callback, on any thread, without blocking."""
        loop = self._loop
        if self.ended and not any(la.alive for la in self.lanes):
            self.closed = True  # nothing left to cancel
            self.rt.streams.discard(self)
            return
        if self.closed or loop is None or loop.is_closed():
            self.closed = self.closed or loop is None
            if loop is None:
                self.rt.streams.discard(self)
            return
        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(self.aclose()))
        except RuntimeError:  # the loop stopped meanwhile
            pass


class AsyncStream:
    """What ``AsyncBroker.stream()`` returns: ``async for delta in stream`` (it implements
    :class:`~jevlaya_lab.broker.results.StreamProtocol`, plus ``lanes`` and ``add_listener``)."""

    def __init__(self, core: StreamCore) -> None:
        self._core = core
        self._finalizer = weakref.finalize(self, core.abort_soon)

    @property
    def llm_name(self) -> str | None:
        """The model whose answer this is; ``None`` until the first delta."""
        final = self._core.final
        return final.llm_name if final is not None else None

    @property
    def call_id(self) -> str | None:
        final = self._core.final
        return final.call_id if final is not None else None

    @property
    def trace_id(self) -> str:
        return self._core.trace_id

    @property
    def usage(self) -> dict[str, int] | None:
        """Token usage of the answer; ``None`` until it has ended."""
        final = self._core.final
        return dict(final.usage) if final is not None and final.status is not None else None

    @property
    def text(self) -> str:
        """The text of the answer this stream names (after a replacement: the winner's)."""
        final = self._core.final
        return final.text if final is not None else ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        final = self._core.final
        return list(final.tool_calls) if final is not None else []

    @property
    def closed(self) -> bool:
        """Closed (by ``aclose()``, the context, the broker or garbage collection)."""
        return self._core.closed

    @property
    def lanes(self) -> list[LaneView]:
        """Every attempt of this call so far (one per model), as snapshots."""
        return [self._core.view(lane) for lane in self._core.lanes]

    def add_listener(self, listener: Callable[[LaneView], None]) -> None:
        """Call ``listener(LaneView)`` on every new piece, completion or failure of any lane
        (on the broker's event loop; keep it quick). Views use it to draw races live."""
        self._core.listeners.append(listener)

    def __aiter__(self) -> AsyncStream:
        return self

    async def __anext__(self) -> str:
        return await self._core.next()

    async def another(self) -> LLMResult | None:
        return await self._core.another()

    async def record_quality(self, score: float) -> None:
        self._core.rate(score)

    async def aclose(self) -> None:
        await self._core.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._core.closed else ("ended" if self._core.ended else "open")
        return f"<AsyncStream {self.llm_name or '?'} {state}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display (see :func:`stream_mimebundle`)."""
        return stream_mimebundle(self)




# display ---------------------------------------------------------------------------------------
DISPLAY_HTML_CHARS = 2000
DISPLAY_TEXT_CHARS = 300


def stream_mimebundle(stream: AsyncStream, label: str = "AsyncStream") -> dict[str, Any]:
    """A stream's notebook display: model, state, the text so far and every lane's status.

    It reads a snapshot of what the stream already holds: it never starts the stream, never
    waits on the broker's loop (so a sync stream shows from any thread, even mid-pull) and
    never raises (a stream that cannot be described shows a one-line note saying why).
    ``state`` is ``open`` (before or during reading), ``finished`` (the answer ended),
    ``failed`` (an error ended it) or ``cancelled`` (closed before its answer ended). The text
    is escaped and, past ``DISPLAY_HTML_CHARS`` (plain text: ``DISPLAY_TEXT_CHARS``), shown as
    its start and its end around a note of how much is left out (:mod:`jevlaya_lab.display`).
    """
    try:
        data = stream_card(stream._core)
        return {"text/plain": display.stream_plain(data, label, DISPLAY_TEXT_CHARS),
                "text/html": display.stream_html(data, label, DISPLAY_HTML_CHARS),
                display.MIME: {"kind": "stream", "data": display.jsonable(data)}}
    except Exception as exc:  # noqa: BLE001 - a display must never raise
        return {"text/plain": f"<{label}: cannot be displayed ({type(exc).__name__}: {exc})>"}


def stream_state(core: StreamCore) -> str:
    """``open``, ``finished``, ``failed`` or ``cancelled`` (see :func:`stream_mimebundle`)."""
    final = core.final
    if core.closed and (final is None or final.status in (None, "cancelled", "superseded")):
        return "cancelled"
    if core.ended:
        return "finished" if final is not None and final.status == "ok" else "failed"
    return "open"


def stream_card(core: StreamCore) -> dict[str, Any]:
    """A plain-data snapshot of the stream (lists are copied: another thread may append)."""
    final = core.final
    lanes = [core.view(lane) for lane in list(core.lanes)]
    return {
        "llm_name": final.llm_name if final is not None else None,
        "state": stream_state(core), "started": core.started_at is not None,
        "deltas": core.delivered, "trace_id": core.trace_id,
        "call_id": final.call_id if final is not None else None,
        "text": final.text if final is not None else "",
        "lanes": [{"llm_name": v.llm_name, "state": v.state, "shown": v.shown,
                   "winner": v.winner, "first_token_ms": v.first_token_ms,
                   "chars": len(v.text)} for v in lanes],
    }
