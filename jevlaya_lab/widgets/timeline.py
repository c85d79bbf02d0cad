"""``HookTimeline``: a hook that draws every call as a nested trace (a millisecond Gantt).

Install it like any hook (``Agent(..., hooks=[timeline])``, ``router.add_hook(timeline)`` or
``with router.hooks_installed(timeline):``) and display it. The trace nests what happened:
calls through a Router sit under a ``router`` row spanning them, with one row per ``on_load``
/ ``on_evict`` (they have no run id) and one per run, in the order they happened; an Agent's
own runs are top-level rows. A run row is its ``on_predict_start`` → ``on_predict_end`` span
(red when ``on_error`` fired) with its ``on_route`` / ``on_error`` markers; rows are labelled
``run <n> · <model> · <k> states`` (the run id on hover). Markers closer than their width are
stacked, so none hides another; a legend names every mark, hovering shows an event's ctx
fields (model, states, usage, elapsed, error), a table below lists every event, and clicking
a span zooms the axis to it ("show all" zooms out). Times are milliseconds since the first
event (``time.perf_counter()``, the clock of ``PredictContext.started_at``). Events from many
threads are recorded under a lock and pushed to the browser at most every ``throttle``
seconds, so the chart is live while calls run.
``HookTimeline.from_records(EventRecorder.to_records())`` replays recorded events (or the
``decisions`` frame of :func:`jevlaya_lab.analysis.load_journal`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import anywidget
import traitlets

from jevlaya_lab.hooks import BaseHook
from jevlaya_lab.widgets.assets import css, esm
from jevlaya_lab.widgets.render import jsonable
from jevlaya_lab.widgets.throttle import Throttle

LOAD_LANE = "router"


class HookTimeline(anywidget.AnyWidget, BaseHook):
    """A live Gantt of hook events; ``events`` holds them as plain dicts (oldest first)."""

    _esm = esm("timeline")
    _css = css()
    events = traitlets.List(help="[{event, run_id, lane, model, t_ms, elapsed_ms, "
                            "n_states, usage, error}]").tag(sync=True)

    def __init__(self, *, throttle: float = 0.1, max_events: int = 5000, **kwargs: Any) -> None:
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            raise ValueError(f"max_events={max_events!r}: must be a positive int (older events "
                             "are dropped beyond it)")
        super().__init__(**kwargs)
        self.max_events = max_events
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._t0: float | None = None
        self._throttle = Throttle(self._push, throttle)

    # -- the hook ------------------------------------------------------------------------------
    def on_route(self, ctx: Any) -> None:
        decision = ctx.decision if isinstance(ctx.decision, Mapping) else {}
        self._record("on_route", ctx, model=decision.get("model"))

    def on_predict_start(self, ctx: Any) -> None:
        self._record("on_predict_start", ctx)

    def on_error(self, ctx: Any) -> None:
        self._record("on_error", ctx)

    def on_predict_end(self, ctx: Any) -> None:
        self._record("on_predict_end", ctx)

    def on_load(self, name: str, agent: Any) -> None:  # type: ignore[override]  # the seed's form
        self._add({"event": "on_load", "run_id": None, "model": name}, time.perf_counter())

    def on_evict(self, name: str, agent: Any) -> None:  # type: ignore[override]  # the seed's form
        self._add({"event": "on_evict", "run_id": None, "model": name}, time.perf_counter())

    def _record(self, event: str, ctx: Any, *, model: str | None = None) -> None:
        now = time.perf_counter()
        error = ctx.error
        elapsed = ctx.elapsed_ms
        if elapsed is None and event in ("on_error", "on_predict_end") and ctx.started_at:
            elapsed = (now - ctx.started_at) * 1000.0
        states = ctx.states if isinstance(ctx.states, (list, tuple)) else None
        self._add({
            "event": event, "run_id": ctx.run_id, "model": model or ctx.model,
            "elapsed_ms": elapsed, "n_states": None if states is None else len(states),
            "usage": jsonable(ctx.usage), "level": "router" if ctx.router is not None else "agent",
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }, now)

    # -- recording -----------------------------------------------------------------------------
    def _add(self, event: dict[str, Any], t: float) -> None:
        with self._lock:
            if self._t0 is None:
                self._t0 = t
            event["t_ms"] = round((t - self._t0) * 1000.0, 3)
            event["lane"] = event["run_id"] or LOAD_LANE
            for key in ("elapsed_ms", "n_states", "usage", "level", "error"):
                event.setdefault(key, None)
            self._pending.append(event)
        self._throttle.mark()

    def _push(self) -> None:
        with self._lock:
            merged = (list(self.events) + self._pending)[-self.max_events:]
            self._pending = []
        self.events = merged

    def flush(self) -> None:
        """Show every recorded event now (the throttle otherwise does within ``throttle`` s)."""
        self._throttle.flush()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Displaying the timeline first pushes what it recorded (from the displaying thread,
        so a saved notebook holds every event shown)."""
        self.flush()
        return super()._repr_mimebundle_(**kwargs)

    def clear(self) -> None:
        with self._lock:
            self._pending, self._t0 = [], None
        self.events = []

    # -- reading -------------------------------------------------------------------------------
    def lanes(self) -> dict[str, list[dict[str, Any]]]:
        """Events grouped by lane (run id, or ``"router"`` for load/evict), in lane order."""
        self.flush()
        out: dict[str, list[dict[str, Any]]] = {}
        for event in self.events:
            out.setdefault(event["lane"], []).append(event)
        return out

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]] | Any, **kwargs: Any) -> HookTimeline:
        """A timeline of recorded events (``EventRecorder.to_records()``, a list of such dicts
        or a DataFrame with those columns)."""
        if hasattr(records, "to_dict") and hasattr(records, "columns"):
            records = records.to_dict("records")
        view = cls(**kwargs)
        for i, r in enumerate(records):
            if "event" not in r or "t" not in r:
                raise ValueError(f"records[{i}]: needs 'event' and 't' (perf_counter seconds) "
                                 "as EventRecorder.to_records() gives")
            run_id = r.get("run_id")
            view._add({"event": r["event"], "run_id": None if run_id != run_id else run_id,
                       "model": r.get("model"), "elapsed_ms": r.get("elapsed_ms"),
                       "n_states": r.get("n_states"), "level": r.get("level"),
                       "error": r.get("error")}, float(r["t"]))
        view.flush()
        return view

    def __repr__(self) -> str:
        lanes = {e["lane"] for e in self.events}
        return f"HookTimeline({len(lanes)} lanes, {len(self.events)} events)"
