"""``StreamView``: a Broker stream rendered as it arrives, with races, ``another()`` and ratings.

``StreamView(broker, prompt, fastest_of=2, operation="write")`` starts ``broker.stream(...)``
on a worker thread and shows the lane being read: its model, time to first token, tokens/s and
the text, pushed to the browser at most every ``throttle`` seconds. When a race is won by
another lane (``StreamReplacementError``) the shown lane is greyed as ``replaced`` and the
winner's lane shows the replacement text, as the seed asks (chunks are never spliced). When
the answer ends, the journal rows of the call (``broker.calls(trace_id=...)``) add one lane per
other model that ran (``lost`` for superseded race lanes, ``failed`` for failover attempts) with
its latency and tokens. Race lanes that lose keep running to completion (their answers are
kept for ``another()``), so after a ``fastest_of=N`` stream a background refresh polls the
journal for up to ``settle`` seconds until all N lanes are there (``retained``: complete but
not shown; ``lost``: superseded or cancelled); ``wait(lanes=True)`` waits for that too. Buttons call :meth:`another` (the next complete answer, listed in ``answers``) and
:meth:`rate` (``record_quality`` on the answer shown or on one of ``answers``).

State is in traits: ``status`` (``waiting``, ``streaming``, ``done``, ``error``), ``lanes``,
``answers``, ``error``, ``trace_id``; the prompt and answers are text, never markup.
Tokens/s of the lane read here count from its first token; lanes known only from the journal
(race losers, failovers, ``another()`` answers) count over the whole attempt.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anywidget
import traitlets

from jevlaya_lab.widgets.assets import css, esm
from jevlaya_lab.widgets.throttle import Throttle

FINAL = ("done", "error")
JOURNAL_STATES = {"ok": "retained", "superseded": "lost", "cancelled": "lost"}


class StreamView(anywidget.AnyWidget):
    """Watch one ``broker.stream(prompt, **stream_kwargs)``; see the module docstring."""

    _esm = esm("stream")
    _css = css()
    prompt = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("waiting").tag(sync=True)
    lanes = traitlets.List().tag(sync=True)
    answers = traitlets.List().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    trace_id = traitlets.Unicode("").tag(sync=True)
    ratings = traitlets.List().tag(sync=True)

    def __init__(self, broker: Any, prompt: str, *, throttle: float = 0.05, start: bool = True,
                 settle: float = 10.0, **stream_kwargs: Any) -> None:
        if not callable(getattr(broker, "stream", None)) or not callable(
                getattr(broker, "calls", None)):
            raise TypeError(f"broker={type(broker).__name__}: expected a jevlaya_lab Broker "
                            "(the synchronous one; StreamView reads it from a worker thread)")
        super().__init__(prompt=str(prompt))
        self.broker = broker
        self.stream = broker.stream(prompt, **stream_kwargs)  # validates arguments now
        self.trace_id = self.stream.trace_id
        self._lock = threading.Lock()
        self._lanes: list[dict[str, Any]] = []
        self._results: list[Any] = []
        self._done = threading.Event()
        self._settled = threading.Event()
        self._lanes_expected = stream_kwargs.get("fastest_of") or 1
        self.settle = settle
        self._throttle = Throttle(self._push, throttle)
        self._thread: threading.Thread | None = None
        self.on_msg(self._on_button)
        if start:
            self.start()

    # -- reading the stream ----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("this StreamView is already started; create a new one")
        self._thread = threading.Thread(target=self._read, name="jevlaya-stream-view",
                                        daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None, *, lanes: bool = False) -> bool:
        """Block until the answer has ended (``True``) or ``timeout`` seconds passed; with
        ``lanes=True`` also until every race lane is in the journal (or ``settle`` ran out)."""
        return (self._settled if lanes else self._done).wait(timeout)

    def _read(self) -> None:
        from jevlaya_lab.broker.errors import LLMRequestError, StreamReplacementError

        started = time.perf_counter()
        lane = self._new_lane(None, "waiting")
        try:
            for delta in self.stream:
                now = time.perf_counter()
                with self._lock:
                    if lane["model"] is None:
                        lane.update(model=self.stream.llm_name, call_id=self.stream.call_id,
                                    state="streaming",
                                    ttft_ms=round((now - started) * 1000.0, 1))
                        lane["_first"] = now
                    lane["text"] += delta
                    lane["tokens"] += 1
                    lane["tokens_per_s"] = _rate(lane["tokens"], now - lane["_first"])
                self._set_status("streaming")
            with self._lock:
                lane["state"] = "won"
                self._finish_lane(lane, started)
            self._set_status("done")
        except StreamReplacementError as exc:
            winner = exc.replacement
            with self._lock:
                lane["state"] = "replaced"
                self._finish_lane(lane, started)
                self._lanes.append(_lane(winner.llm_name, "won", call_id=winner.call_id,
                                         text=winner.text))
            self._set_status("done")
        except LLMRequestError as exc:
            with self._lock:
                lane["state"] = "failed"  # after the first delta its text stands
                if lane["model"] is None:  # no text at all: the journal lanes tell the story
                    self._lanes.remove(lane)
            self.error = f"{type(exc).__name__}: {exc}"
            self._set_status("error")
        except Exception as exc:  # surface anything else in the view, never in a dead thread
            self.error = f"{type(exc).__name__}: {exc}"
            self._set_status("error")
        finally:
            try:
                rows = len(self.refresh_lanes_rows())
            finally:
                self._done.set()
            self._settle(rows)

    def _settle(self, rows: int) -> None:
        """Poll the journal until every race lane has a row (losers may still be running)."""
        deadline = time.monotonic() + self.settle
        try:
            while rows < self._lanes_expected and time.monotonic() < deadline:
                time.sleep(0.2)
                rows = len(self.refresh_lanes_rows())
        except RuntimeError:  # the broker was closed meanwhile: nothing more to read
            pass
        finally:
            self._settled.set()

    def _new_lane(self, model: str | None, state: str) -> dict[str, Any]:
        lane = _lane(model, state)
        with self._lock:
            self._lanes.append(lane)
        return lane

    def _finish_lane(self, lane: dict[str, Any], started: float) -> None:
        usage = self.stream.usage or {}
        if lane["call_id"] == self.stream.call_id and usage.get("completion_tokens"):
            lane["tokens"] = int(usage["completion_tokens"])
        if lane.get("_first") is not None:
            lane["tokens_per_s"] = _rate(lane["tokens"], time.perf_counter() - lane["_first"])
        lane["latency_ms"] = round((time.perf_counter() - started) * 1000.0, 1)

    def _set_status(self, status: str) -> None:
        self._pending_status = status
        self._throttle.mark() if status == "streaming" else self._throttle.flush()

    def _push(self) -> None:
        with self._lock:
            lanes = [{k: v for k, v in lane.items() if not k.startswith("_")}
                     for lane in self._lanes]
        self.lanes = lanes
        self.status = getattr(self, "_pending_status", self.status)

    def refresh_lanes(self) -> list[dict[str, Any]]:
        """Add or update a lane per journal row of this call (other race lanes, failovers)."""
        self.refresh_lanes_rows()
        return self.lanes

    def refresh_lanes_rows(self) -> list[dict[str, Any]]:
        """:meth:`refresh_lanes`, returning the journal rows it read."""
        if getattr(self.broker, "closed", False):
            return []
        rows = self.broker.calls(trace_id=self.trace_id)
        fetched = {a["call_id"] for a in self.answers}
        with self._lock:
            by_call = {lane["call_id"]: lane for lane in self._lanes if lane["call_id"]}
            for row in rows:
                lane = by_call.get(row["call_id"])
                if lane is None:
                    lane = _lane(row["llm_name"], JOURNAL_STATES.get(row["status"], "failed"),
                                 call_id=row["call_id"])
                    lane["detail"] = row["error_detail"] or row["status"]
                    self._lanes.append(lane)
                if row["call_id"] in fetched:
                    lane["state"] = "another"
                lane["latency_ms"] = row["latency_ms"]
                lane["ttft_ms"] = row["first_token_ms"] if row["first_token_ms"] is not None \
                    else lane["ttft_ms"]
                if row["completion_tokens"]:
                    lane["tokens"] = int(row["completion_tokens"])
                    if lane.get("_first") is None:  # not read here: rate over the attempt
                        lane["tokens_per_s"] = _rate(lane["tokens"],
                                                     (row["latency_ms"] or 0) / 1000.0)
        self._throttle.flush()
        return rows

    # -- buttons -------------------------------------------------------------------------------
    def another(self) -> Any:
        """The next complete answer (``stream.another()``), appended to ``answers``; ``None``
        when nothing more can be had."""
        if self.status not in FINAL:
            raise ValueError(f"status={self.status!r}: another() is available once the answer "
                             "has ended; call view.wait() first")
        result = self.stream.another()
        if result is not None:
            self._results.append(result)
            self.answers = [*self.answers, {"model": result.llm_name, "text": result.text,
                                            "call_id": result.call_id}]
        self.refresh_lanes()
        return result

    def rate(self, score: float, *, answer: int | None = None) -> None:
        """``record_quality(score)`` on the shown answer, or on ``answers[answer]``."""
        if answer is None:
            self.stream.record_quality(score)
            call_id = self.stream.call_id
        else:
            if isinstance(answer, bool) or not isinstance(answer, int) or not \
                    0 <= answer < len(self._results):
                raise ValueError(f"answer={answer!r}: must index view.answers "
                                 f"(0..{len(self._results) - 1}), or be None for the shown one")
            self._results[answer].record_quality(score)
            call_id = self._results[answer].call_id
        self.ratings = [*self.ratings, {"call_id": call_id, "score": float(score)}]

    def _on_button(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        try:
            if content.get("action") == "another":
                if self.another() is None:
                    self.error = "another(): no further answer can be had"
            elif content.get("action") == "rate":
                self.rate(float(content["score"]), answer=content.get("answer"))
        except (ValueError, TypeError, KeyError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Close the stream (cancels running lanes) and the widget."""
        stream = getattr(self, "stream", None)  # close() also runs from __del__
        if stream is not None and not getattr(self.broker, "closed", False):
            stream.close()
        super().close()

    def __repr__(self) -> str:
        lanes = "; ".join(f"{lane['model']} {lane['state']}: {lane['text'][:60]!r}"
                          for lane in self.lanes)
        return f"StreamView({self.status}; {lanes or 'no lanes yet'})"


def _lane(model: str | None, state: str, *, call_id: str | None = None,
          text: str = "") -> dict[str, Any]:
    return {"model": model, "state": state, "call_id": call_id, "text": text, "tokens": 0,
            "ttft_ms": None, "latency_ms": None, "tokens_per_s": None, "detail": None,
            "_first": None}


def _rate(tokens: int, seconds: float) -> float | None:
    return round(tokens / seconds, 1) if seconds > 0 and tokens else None
