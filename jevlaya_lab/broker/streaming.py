"""``stream()``: text deltas with failover before the first delta, races, ``another()`` and a
paused clock. The rules every pool stream keeps (``docs/broker.md`` names the test of each):

- Before the first delta the stream may fail over (provider error, rate limit, an answer with
  neither text nor tool calls); it never tries the same model twice, and when only cooling models
  are left it ends with ``NoLLMAvailableError(reason="timeout", retry_at=...)``; when every
  model rejected the request (4xx other than 408/429) it raises the last provider error, as
  ``ask`` does. After the first delta a broken answer raises ``StreamInterruptedError``; the
  delivered deltas stand.
- ``fastest_of=1`` (:class:`~jevlaya_lab.broker.stream_core.StreamCore`): nothing is read ahead of the consumer
  (each pull reads the wire). ``fastest_of=N>1`` (:class:`~jevlaya_lab.broker.stream_race.RaceCore`):
  N lanes read their answers to completion in the background, whatever the reader does; the
  first *complete* answer wins; if the lane shown is not the winner the next pull raises
  ``StreamReplacementError``; chunks of different lanes are never spliced.
  With ``parallel_recovery`` (default) a one-lane stream that meets a model back from a
  cooldown races it with the next model, keeping the lane shown first
  (:class:`~jevlaya_lab.broker.stream_race.HedgedCore`).
  ``stream_selection_window`` only picks the lane shown first.
- ``wait`` bounds the whole answer; the clock pauses while a delta is in the application's hands
  and runs continuously after the first complete answer (validation and ``another()``).
  Running out before the first delta is ``NoLLMAvailableError``, after it ``LLMTimeoutError``.
- ``another()``: retained complete answers, then lanes still running, then untried models;
  ``None`` forever once nothing more can be had or the stream is closed.
- ``record_quality`` raises ``ValueError`` before the answer has ended and been journaled, and
  for an answer that ``wait`` cut off (an unfinished answer cannot be rated); a
  partial answer the application closed itself, or one the provider broke, can be rated.
- ``aclose()``, the optional context, leaving the broker, and garbage collection cancel the
  provider requests, journal the attempts (``cancelled`` for the lane shown, ``superseded`` for
  the others) and release the slots. A ``break`` alone does not close the stream.

With ``wait=None`` a model that sends nothing for 60 s (``ATTEMPT_TIMEOUT_S``) counts as failed.
``another()`` before the stream has ended raises ``ValueError``. In a notebook a stream displays
itself (model, state, text so far, lanes) from a snapshot (:func:`stream_card`), without
starting or waiting on it; :func:`jevlaya_lab.display.stream_bundle` draws it (found through
:mod:`jevlaya_lab._rendering`, so the broker never imports the renderer).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from jevlaya_lab._rendering import render
from jevlaya_lab.broker.lanes import LaneView
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.stream_core import StreamCore


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
DISPLAY_HTML_CHARS = 2000  # text shown before clipping (read at each display)
DISPLAY_TEXT_CHARS = 300


def stream_mimebundle(stream: AsyncStream, label: str = "AsyncStream") -> dict[str, Any]:
    """A stream's notebook display: model, state, the text so far and every lane's status.

    It reads a snapshot of what the stream already holds (:func:`stream_card`): it never
    starts the stream, never waits on the broker's loop (so a sync stream shows from any
    thread, even mid-pull) and never raises; :func:`jevlaya_lab.display.stream_bundle` draws
    it (escaped, clipped past ``DISPLAY_HTML_CHARS``, plain text past ``DISPLAY_TEXT_CHARS``).
    """
    bundle: dict[str, Any] = render("stream", ((lambda: stream_card(stream._core), label),
                                               {"text_chars": DISPLAY_TEXT_CHARS,
                                                "html_chars": DISPLAY_HTML_CHARS}))
    return bundle


def stream_state(core: StreamCore) -> str:
    """``open`` (before or during reading), ``finished`` (the answer ended), ``failed`` (an
    error ended it) or ``cancelled`` (closed before its answer ended)."""
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
