"""``EventRecorder``: every hook event with its run id, model and a monotonic timestamp.

It is the data source of the timeline widget and of the journal: install it on an Agent or a
Router (``hooks=[recorder]``) and read :attr:`EventRecorder.events`. Timestamps are
``time.perf_counter()`` readings, the same clock as ``PredictContext.started_at``, so offsets
within a run are exact. Recording is thread-safe; ``max_events`` bounds memory by dropping the
oldest events (a long-running notebook should not grow without limit).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from .base import BaseHook

__all__ = ["EventRecorder", "HookEvent"]


@dataclass(frozen=True, slots=True)
class HookEvent:
    """One recorded event."""

    event: str
    """One of ``HOOK_EVENTS``."""
    run_id: str | None
    """The call's ``ctx.run_id`` (``None`` for ``on_load`` / ``on_evict``)."""
    model: str | None
    """``ctx.model``; the routed model for ``on_route``; the checkpoint name for load/evict."""
    t: float
    """``time.perf_counter()`` when the hook ran."""
    level: str
    """``"router"`` when a Router fired it, else ``"agent"``."""
    thread: int
    """``threading.get_ident()`` of the calling thread."""
    n_states: int | None = None
    elapsed_ms: float | None = None
    """Set on ``on_predict_end`` (and on ``on_error`` once known)."""
    error: str | None = None
    """``"Type: message"`` of ``ctx.error`` on ``on_error`` / ``on_predict_end``."""
    parent_id: str | None = None
    """``ctx.parent_id``: the Router call the event is part of (``None`` outside one)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EventRecorder(BaseHook):
    """Records every hook event; read :attr:`events`, :meth:`for_run` or :meth:`to_records`."""

    def __init__(self, *, max_events: int | None = 100_000) -> None:
        if max_events is not None and (isinstance(max_events, bool) or not isinstance(max_events, int)
                                       or max_events < 1):
            raise ValueError(f"max_events must be a positive int or None, got {max_events!r}")
        self._events: deque[HookEvent] = deque(maxlen=max_events)
        self._lock = threading.Lock()

    # -- reading ----------------------------------------------------------------------------
    @property
    def events(self) -> list[HookEvent]:
        """A snapshot of the recorded events, oldest first."""
        with self._lock:
            return list(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def for_run(self, run_id: str) -> list[HookEvent]:
        """The events of one call, oldest first."""
        return [e for e in self.events if e.run_id == run_id]

    def run_ids(self) -> list[str]:
        """Run ids in order of their first event."""
        return list(dict.fromkeys(e.run_id for e in self.events if e.run_id is not None))

    def to_records(self) -> list[dict[str, Any]]:
        """Plain dicts (for pandas or a journal)."""
        return [e.to_dict() for e in self.events]

    def clear(self) -> None:
        with self._lock:
            self._events.clear()

    # -- events -----------------------------------------------------------------------------
    def _add(self, event: HookEvent) -> None:
        with self._lock:
            self._events.append(event)

    def _from_ctx(self, event: str, ctx: Any, *, model: str | None = None, of_run: bool = True,
                  **extra: Any) -> None:
        states = getattr(ctx, "states", None) if of_run else None
        error = getattr(ctx, "error", None)
        self._add(HookEvent(
            event=event,
            run_id=getattr(ctx, "run_id", None) if of_run else None,
            model=model if model is not None else getattr(ctx, "model", None),
            t=time.perf_counter(),
            level="router" if getattr(ctx, "router", None) is not None else "agent",
            thread=threading.get_ident(),
            n_states=len(states) if isinstance(states, (list, tuple)) else None,
            error=None if error is None else f"{type(error).__name__}: {error}",
            parent_id=getattr(ctx, "parent_id", None),
            **extra,
        ))

    def on_route(self, ctx: Any) -> None:
        decision = getattr(ctx, "decision", None)
        routed = decision.get("model") if isinstance(decision, dict) else None
        self._from_ctx("on_route", ctx, model=routed)

    # load/evict belong to no run (run_id None); their context's model is the checkpoint name
    def on_load(self, ctx: Any) -> None:
        self._from_ctx("on_load", ctx, of_run=False)

    def on_evict(self, ctx: Any) -> None:
        self._from_ctx("on_evict", ctx, of_run=False)

    def on_predict_start(self, ctx: Any) -> None:
        self._from_ctx("on_predict_start", ctx)

    def on_error(self, ctx: Any) -> None:
        self._from_ctx("on_error", ctx, elapsed_ms=_elapsed(ctx))

    def on_predict_end(self, ctx: Any) -> None:
        self._from_ctx("on_predict_end", ctx, elapsed_ms=_elapsed(ctx))


def _elapsed(ctx: Any) -> float | None:
    elapsed = getattr(ctx, "elapsed_ms", None)
    if elapsed is not None:
        return float(elapsed)
    started = getattr(ctx, "started_at", None)
    return None if started is None else (time.perf_counter() - started) * 1000.0
