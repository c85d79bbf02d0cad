"""``StreamView``: a Broker stream rendered as it arrives, with races, ``another()`` and ratings.

``StreamView(broker, prompt, fastest_of=2, operation="write")`` starts ``broker.stream(...)``
and shows the lane being read: its model, time to first token, tokens/s and the text, pushed
to the browser at most every ``throttle`` seconds. When a race is won by another lane
(``StreamReplacementError``) the shown lane is greyed as ``replaced`` and the winner's lane
shows the replacement text (chunks are never spliced). When the answer ends,
the journal rows of the call (``broker.calls(trace_id=...)``) add one lane per other model
that ran (``lost`` for superseded race lanes, ``failed`` for failover attempts) with its
latency and tokens. Race lanes that lose keep running to completion (their answers are kept
for ``another()``), so after a ``fastest_of=N`` stream a background refresh polls the journal
for up to ``settle`` seconds until all N lanes are there (``retained``: complete but not
shown; ``lost``: superseded or cancelled); ``wait(lanes=True)`` waits for that too. The lane
read here becomes ``cancelled`` when the view (or stream) is closed before its end. Buttons
call :meth:`another` (the next complete answer, listed in ``answers``) and :meth:`rate`
(``record_quality`` on the answer shown or on one of ``answers``).

Sync or async broker: over a ``Broker`` the stream is read on a worker thread. Over an
``AsyncBroker`` it is read by a task on the event loop running where the view is made (in
JupyterLab the kernel's loop), and the view pushes its traits from that loop; made where no
loop runs (a plain script) it is a ``TypeError`` saying to use the ``Broker`` or to make the
view inside the loop. The blocking helpers (``wait``, ``another``, ``rate``,
``refresh_lanes``) belong to a view over a ``Broker``; a view over an ``AsyncBroker`` has
awaitable twins (``wait_async``, ``another_async``, ``rate_async``, ``refresh_lanes_async``,
``aclose``), and calling the other kind is a ``TypeError`` naming the right one (blocking the
loop the stream needs would hang the kernel). ``close()`` and the buttons work for both.
Each operation is written once, as a coroutine: over an ``AsyncBroker`` it is awaited on the
loop; over a ``Broker`` every call it makes blocks, so it never suspends and runs to its end
in the calling thread (:func:`~jevlaya_lab.widgets.loops.run_blocking`).

State is in traits: ``status`` (``waiting``, ``streaming``, ``done``, ``error``), ``lanes``,
``answers``, ``error``, ``trace_id``, ``broker_closed``; the prompt and answers are text, never
markup. A lane read here counts the ``chunks`` it showed next to the ``tokens`` the model
generated (a replaced lane shows a few chunks of an answer that ran on). A failed lane shows
its error in the lane itself. Over a closed broker the buttons cannot work: the view says so
and disables them (checked whenever it is drawn and on every press).
Tokens/s of the lane read here count from its first token; lanes known only from the journal
(race losers, failovers, ``another()`` answers) count over the whole attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anywidget
import traitlets

from jevlaya_lab.widgets.assets import css, esm
from jevlaya_lab.widgets.lanes import apply_journal_rows, new_lane, tokens_per_s
from jevlaya_lab.widgets.loops import awaited, is_async_broker, run_blocking, running_loop_for, submit
from jevlaya_lab.widgets.throttle import Throttle

FINAL = ("done", "error")
SETTLE_POLL_S = 0.2  # how often the journal is read while race lanes are still running


class StreamView(anywidget.AnyWidget):
    """Watch one ``broker.stream(prompt, **stream_kwargs)`` of a ``Broker`` or an
    ``AsyncBroker``; see the module docstring."""

    _esm = esm("stream")
    _css = css()
    prompt = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("waiting").tag(sync=True)
    lanes = traitlets.List().tag(sync=True)
    answers = traitlets.List().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    trace_id = traitlets.Unicode("").tag(sync=True)
    ratings = traitlets.List().tag(sync=True)
    broker_closed = traitlets.Bool(False).tag(sync=True)

    def __init__(self, broker: Any, prompt: str, *, throttle: float = 0.05, start: bool = True,
                 settle: float = 10.0, **stream_kwargs: Any) -> None:
        is_async = is_async_broker(broker)
        loop = running_loop_for(broker) if is_async else None
        super().__init__(prompt=str(prompt))
        self.is_async = is_async
        self.broker = broker
        self._loop = loop
        self.stream = broker.stream(prompt, **stream_kwargs)  # validates arguments now
        self.trace_id = self.stream.trace_id
        self._lock = threading.Lock()
        self._lanes: list[dict[str, Any]] = []
        self._results: list[Any] = []
        self._done: asyncio.Event | threading.Event = \
            asyncio.Event() if is_async else threading.Event()
        self._settled: asyncio.Event | threading.Event = \
            asyncio.Event() if is_async else threading.Event()
        self._lanes_expected = stream_kwargs.get("fastest_of") or 1
        self.settle = settle
        self._throttle = Throttle(self._push, throttle, loop=loop)
        self._reader: threading.Thread | cf.Future[None] | None = None
        self._pending: set[cf.Future[Any]] = set()  # button presses running on the loop
        self.on_msg(self._on_button)
        if start:
            self.start()

    # -- reading the stream ----------------------------------------------------------------------
    def start(self) -> None:
        """Start reading (the constructor does, unless ``start=False``)."""
        if self._reader is not None:
            raise RuntimeError("this StreamView is already started; create a new one")
        if self._loop is not None:
            self._reader = submit(self._read(), self._loop)
            if self._reader is None:
                raise RuntimeError("the event loop this StreamView was made on is closed; "
                                   "create the view again inside a running loop")
        else:
            self._reader = threading.Thread(target=run_blocking, args=(self._read(),),
                                            name="jevlaya-stream-view", daemon=True)
            self._reader.start()

    def wait(self, timeout: float | None = None, *, lanes: bool = False) -> bool:
        """Block until the answer has ended (``True``) or ``timeout`` seconds passed; with
        ``lanes=True`` also until every race lane is in the journal (or ``settle`` ran out)."""
        self._require(False, "wait", "wait_async")
        event = self._settled if lanes else self._done
        assert isinstance(event, threading.Event)
        ended = event.wait(timeout)
        self._throttle.flush()
        # the reader pushed from its own thread; send the whole state once more from the caller's
        # (a notebook executor such as nbclient records widget state per cell, so a saved
        # notebook then holds the finished view, not the one it first displayed)
        self.send_state()
        return ended

    async def wait_async(self, timeout: float | None = None, *, lanes: bool = False) -> bool:
        """:meth:`wait` for a view over an ``AsyncBroker``: ``await view.wait_async()``."""
        self._require(True, "wait", "wait_async")
        event = self._settled if lanes else self._done
        assert isinstance(event, asyncio.Event)
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    async def _read(self) -> None:
        """Read the answer, then the journal rows of the call's other lanes."""
        try:
            try:
                await self._read_answer()
                rows = len(await self._refresh())
            finally:
                self._done.set()
            deadline = time.monotonic() + self.settle
            # race lanes that lost may still be running: poll until all N have a row
            while rows < self._lanes_expected and time.monotonic() < deadline \
                    and not self.broker.closed:
                await self._pause(SETTLE_POLL_S)
                rows = len(await self._refresh())
        finally:
            self._settled.set()

    async def _read_answer(self) -> None:
        from jevlaya_lab.broker.errors import LLMRequestError, StreamReplacementError

        started = time.perf_counter()
        lane = self._new_lane(None, "waiting")
        try:
            async for delta in self._deltas():
                self._on_delta(lane, delta, started)
            with self._lock:
                lane["state"] = "won"
                self._finish_lane(lane, started)
            self._set_status("done")
        except StreamReplacementError as exc:
            winner = exc.replacement
            with self._lock:
                lane["state"] = "replaced"
                self._finish_lane(lane, started)
                self._lanes.append(new_lane(winner.llm_name, "won", call_id=winner.call_id,
                                         text=winner.text))
            self._set_status("done")
        except LLMRequestError as exc:
            with self._lock:
                lane["state"] = "failed"  # after the first delta its text stands
                if lane["model"] is None:  # no text at all: the journal lanes tell the story
                    self._lanes.remove(lane)
            self._show_error(exc)
        except Exception as exc:  # surface anything else in the view, never in a dead reader
            self._show_error(exc)

    async def _deltas(self) -> AsyncIterator[str]:
        if self.is_async:
            async for delta in self.stream:
                yield delta
        else:
            for delta in self.stream:  # each pull blocks the reader's own thread
                yield delta

    async def _pause(self, seconds: float) -> None:
        if self.is_async:
            await asyncio.sleep(seconds)
        else:
            time.sleep(seconds)  # the reader's own thread

    def _on_delta(self, lane: dict[str, Any], delta: str, started: float) -> None:
        now = time.perf_counter()
        with self._lock:
            if lane["model"] is None:
                lane.update(model=self.stream.llm_name, call_id=self.stream.call_id,
                            state="streaming", ttft_ms=round((now - started) * 1000.0, 1))
                lane["_first"] = now
            lane["text"] += delta
            lane["chunks"] += 1
            lane["tokens"] += 1
            lane["tokens_per_s"] = tokens_per_s(lane["tokens"], now - lane["_first"])
        self._set_status("streaming")

    def _new_lane(self, model: str | None, state: str) -> dict[str, Any]:
        lane = new_lane(model, state)
        lane["chunks"] = 0  # read here: count what was shown
        with self._lock:
            self._lanes.append(lane)
        return lane

    def _finish_lane(self, lane: dict[str, Any], started: float) -> None:
        usage = self.stream.usage or {}
        if lane["call_id"] == self.stream.call_id and usage.get("completion_tokens"):
            lane["tokens"] = int(usage["completion_tokens"])
        if lane.get("_first") is not None:
            lane["tokens_per_s"] = tokens_per_s(lane["tokens"], time.perf_counter() - lane["_first"])
        lane["latency_ms"] = round((time.perf_counter() - started) * 1000.0, 1)

    def _show_error(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        self._set_status("error")

    def _set_status(self, status: str) -> None:
        self._pending_status = status
        self._throttle.mark() if status == "streaming" else self._throttle.flush()

    def _push(self) -> None:
        with self._lock:
            lanes = [{k: v for k, v in lane.items() if not k.startswith("_")}
                     for lane in self._lanes]
        self.lanes = lanes
        self.status = getattr(self, "_pending_status", self.status)

    # -- the journal's lanes ---------------------------------------------------------------------
    def refresh_lanes(self) -> list[dict[str, Any]]:
        """Add or update a lane per journal row of this call (other race lanes, failovers)."""
        self.refresh_lanes_rows()
        return self.lanes

    def refresh_lanes_rows(self) -> list[dict[str, Any]]:
        """:meth:`refresh_lanes`, returning the journal rows it read."""
        self._require(False, "refresh_lanes", "refresh_lanes_async")
        return run_blocking(self._refresh())

    async def refresh_lanes_async(self) -> list[dict[str, Any]]:
        """:meth:`refresh_lanes` for a view over an ``AsyncBroker``."""
        self._require(True, "refresh_lanes", "refresh_lanes_async")
        await self._refresh()
        return self.lanes

    async def _refresh(self) -> list[dict[str, Any]]:
        """Apply this call's journal rows to the lanes; none once the broker is closed."""
        try:
            rows = [] if self.broker.closed else \
                await awaited(self.broker.calls(trace_id=self.trace_id))
        except RuntimeError:  # the broker was closed meanwhile: nothing more to read
            rows = []
        if self.broker.closed and not self.broker_closed:
            self.broker_closed = True
        fetched = {a["call_id"] for a in self.answers}
        with self._lock:
            apply_journal_rows(self._lanes, rows, fetched)
        self._throttle.flush()
        return rows

    # -- buttons -------------------------------------------------------------------------------
    def another(self) -> Any:
        """The next complete answer (``stream.another()``), appended to ``answers``; ``None``
        when nothing more can be had."""
        self._require(False, "another", "another_async")
        return run_blocking(self._another())

    async def another_async(self) -> Any:
        """:meth:`another` for a view over an ``AsyncBroker``."""
        self._require(True, "another", "another_async")
        return await self._another()

    async def _another(self) -> Any:
        if self.status not in FINAL:
            hint = "await view.wait_async()" if self.is_async else "view.wait()"
            raise ValueError(f"status={self.status!r}: another() is available once the answer "
                             f"has ended; call {hint} first")
        result = await awaited(self.stream.another())
        if result is not None:
            self._results.append(result)
            self.answers = [*self.answers, {"model": result.llm_name, "text": result.text,
                                            "call_id": result.call_id}]
        await self._refresh()
        return result

    def rate(self, score: float, *, answer: int | None = None) -> None:
        """``record_quality(score)`` on the shown answer, or on ``answers[answer]``."""
        self._require(False, "rate", "rate_async")
        run_blocking(self._rate(score, answer))

    async def rate_async(self, score: float, *, answer: int | None = None) -> None:
        """:meth:`rate` for a view over an ``AsyncBroker``."""
        self._require(True, "rate", "rate_async")
        await self._rate(score, answer)

    async def _rate(self, score: float, answer: int | None) -> None:
        if answer is None:
            target = self.stream
        elif isinstance(answer, bool) or not isinstance(answer, int) or not \
                0 <= answer < len(self._results):
            raise ValueError(f"answer={answer!r}: must index view.answers "
                             f"(0..{len(self._results) - 1}), or be None for the shown one")
        else:
            target = self._results[answer]
        await awaited(target.record_quality(score))
        self.ratings = [*self.ratings, {"call_id": target.call_id, "score": float(score)}]

    def _on_button(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        press = self._press(content)
        if self._loop is None:
            run_blocking(press)
            return
        # a message may arrive on any thread; the work belongs on the stream's loop
        future = submit(press, self._loop)
        if future is None:
            self.error = "RuntimeError: the event loop of this view's AsyncBroker is closed"
            return
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    async def _press(self, content: dict[str, Any]) -> None:
        if self.broker.closed:  # say so once, and the front end disables the buttons
            if not self.broker_closed:
                self.broker_closed = True
            if content.get("action") != "sync":
                self.error = (f"{content.get('action')}: the broker of this view is closed, so "
                              "another() and ratings are unavailable; make a new Broker and view")
            return
        try:
            if content.get("action") == "sync":  # a view was (re)drawn: nothing else to do
                return
            if content.get("action") == "another":
                if await self._another() is None:
                    self.error = "another(): no further answer can be had"
            elif content.get("action") == "rate":
                await self._rate(float(content["score"]), content.get("answer"))
        except Exception as exc:  # a button's failure is shown in the view
            self.error = f"{type(exc).__name__}: {exc}"

    # -- closing -------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the stream (cancels running lanes) and the widget. Over an ``AsyncBroker``
        the stream's closing is scheduled on its loop (``await view.aclose()`` waits for it)."""
        stream = getattr(self, "stream", None)  # close() also runs from __del__
        if stream is not None and not getattr(self.broker, "closed", False):
            loop = getattr(self, "_loop", None)
            if loop is None:
                stream.close()
            else:  # if the loop is gone, the stream's own finalizer cleans up
                submit(stream.aclose(), loop)
        super().close()

    async def aclose(self) -> None:
        """Close the stream (cancels running lanes, journals them) and the widget."""
        self._require(True, "close", "aclose")
        if not self.broker.closed:
            await self.stream.aclose()
        super().close()

    def _require(self, asynchronous: bool, sync_name: str, async_name: str) -> None:
        """Refuse a blocking helper on an AsyncBroker's view, or an awaitable one on a
        Broker's, naming the one to use."""
        if self.is_async == asynchronous:
            return
        called, use = (sync_name, f"await view.{async_name}()") if self.is_async else \
            (async_name, f"view.{sync_name}()")
        kind = "an AsyncBroker" if self.is_async else "a Broker (the sync one)"
        raise TypeError(f"{called}(): this view reads {kind}; use {use}")

    def __repr__(self) -> str:
        lanes = "; ".join(f"{lane['model']} {lane['state']}: {lane['text'][:60]!r}"
                          for lane in self.lanes)
        return f"StreamView({self.status}; {lanes or 'no lanes yet'})"
