"""``HookTimeline``: a hook that draws every call as a nested trace (a millisecond Gantt).

Install it like any hook (``Agent(..., hooks=[timeline])``, ``router.add_hook(timeline)`` or
``with router.hooks_installed(timeline):``) and display it. The trace nests what happened, read
from the contexts' ``parent_id`` (see :mod:`jevlaya_lab.hooks.context`): each Router call is a
``router call`` row spanning everything it caused; under it, in the order they happened, one
row per ``on_load`` / ``on_evict`` and one per request's run, which shows the request's
``on_route`` mark then its ``on_predict_start`` → ``on_predict_end`` span (red when ``on_error``
fired); runs of an Agent the call used (when the timeline is installed on the Agent too) sit
one level further in. An Agent's own runs are top-level rows. Rows are labelled
``run <n> · <model> · <k> states`` (the run id on hover). Markers closer than their width are
stacked, so none hides another; a legend names every mark, hovering shows an event's ctx
fields (model, states, usage, elapsed, error), a table below lists every event, and clicking
a span zooms the axis to it ("show all" zooms out). Times are milliseconds since the first
event (``time.perf_counter()``, the clock of ``PredictContext.started_at``). Events from many
threads are recorded under a lock and pushed to the browser at most every ``throttle``
seconds, so the chart is live while calls run. :func:`trace_rows` computes the rows the
browser draws (the same nesting, in Python, for tests and for reading).
``HookTimeline.from_records(EventRecorder.to_records())`` replays recorded events (or the
``decisions`` frame of :func:`jevlaya_lab.analysis.load_journal`); records without a
``parent_id`` (older ones) put every Router event under one ``router`` row.
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
from jevlaya_lab.widgets.render import jsonable, model_label
from jevlaya_lab.widgets.throttle import Throttle

LOAD_LANE = "router"
# the events drawn as marks on a run's row (its span is start → end)
RUN_MARKS = ("on_route", "on_error")


def trace_rows(events: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the trace, top to bottom, as the browser draws them.

    Each row: ``label``, ``title`` (hover), ``depth`` (0: a Router call or an Agent's own run; 1:
    a load/evict or a request's run inside a call; 2: an Agent run the call caused), ``kind``
    (``call``, ``run``, ``load``, ``evict``), ``span`` (``[t0, t1]`` in ms, ``t1`` ``None``
    while running; ``None`` for a row of marks), ``failed``, ``tip`` (the event whose fields the
    span shows) and ``marks`` (indices into ``events``). Events group into a call by
    ``parent_id``; Router events without one (older records) share one ``router`` call. Rows
    follow time: a run sits where its predict starts (so an Agent run comes right after the
    request that caused it, and a load before the run that needed it).
    """
    runs: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        if e.get("run_id"):
            runs.setdefault(e["run_id"], []).append(i)

    def call_of(indices: list[int]) -> str | None:
        first = events[indices[0]]
        if first.get("parent_id"):
            return str(first["parent_id"])
        return LOAD_LANE if any(events[i].get("level") == "router" for i in indices) else None

    def begins(ix: list[int]) -> float:  # a run's place is its predict start (else its route)
        return next((events[i]["t_ms"] for i in ix if events[i]["event"] == "on_predict_start"),
                    events[ix[0]]["t_ms"])

    # rows in the order things happened: (time, call key or None, kind, event indices)
    items: list[tuple[float, str | None, str, list[int]]] = [
        (begins(ix), call_of(ix), "run", ix) for ix in runs.values()]
    items += [(e["t_ms"], call_of([i]), e["event"].removeprefix("on_"), [i])
              for i, e in enumerate(events) if not e.get("run_id")]
    items.sort(key=lambda item: item[0])
    calls: dict[str, list[tuple[str, list[int]]]] = {}
    top: list[tuple[str | None, str, list[int]]] = []
    for _, call, kind, ix in items:
        if call is None:
            top.append((None, kind, ix))
        else:
            if call not in calls:
                top.append((call, "call", []))
            calls.setdefault(call, []).append((kind, ix))
    rows: list[dict[str, Any]] = []
    counter = {"run": 0, "call": 0}

    def run_row(ix: list[int], depth: int) -> dict[str, Any]:
        evs = [events[i] for i in ix]
        start = next((i for i in ix if events[i]["event"] == "on_predict_start"), None)
        stop = next((i for i in ix if events[i]["event"] in ("on_predict_end", "on_error")), None)
        model = next((e["model"] for e in evs if e.get("model")), "")
        if start is None:  # a request the Router only routed (route / route_batch)
            label = f"route → {model}"
        else:
            counter["run"] += 1
            n_states = events[start].get("n_states")
            label = f"run {counter['run']} · {model}" + (
                f" · {n_states} state{'' if n_states == 1 else 's'}" if n_states is not None else "")
        return {"label": label, "title": f"run_id {evs[0]['run_id']}", "depth": depth, "kind": "run",
                "span": None if start is None else [events[start]["t_ms"],
                                                    None if stop is None else events[stop]["t_ms"]],
                "failed": any(e["event"] == "on_error" for e in evs),
                "tip": stop if stop is not None else start,
                "marks": [i for i in ix if events[i]["event"] in RUN_MARKS]}

    for call, kind, ix in top:
        if call is None:
            rows.append(run_row(ix, 0))
            continue
        members = calls[call]
        times = [events[i]["t_ms"] for _, m in members for i in m]
        requests = sum(1 for k, m in members if k == "run" and events[m[0]].get("level") == "router")
        counter["call"] += 1
        legacy = call == LOAD_LANE
        label = "router" if legacy else f"router call {counter['call']}" + (
            f" · {requests} request{'s' if requests != 1 else ''}" if requests else "")
        rows.append({"label": label,
                     "title": "every call through the Router" if legacy else f"call id {call}",
                     "depth": 0, "kind": "call", "span": [min(times), max(times)], "failed": False,
                     "tip": None, "marks": []})
        for kind, m in members:
            if kind == "run":
                nested = all(events[i].get("level") == "agent" for i in m)
                rows.append(run_row(m, 2 if nested else 1))
            else:
                e = events[m[0]]
                rows.append({"label": f"{kind} {e.get('model') or ''}".strip(), "title": e["event"],
                             "depth": 1, "kind": kind, "span": None, "failed": False, "tip": None,
                             "marks": m})
    return rows


class HookTimeline(anywidget.AnyWidget, BaseHook):
    """A live Gantt of hook events; ``events`` holds them as plain dicts (oldest first)."""

    _esm = esm("timeline")
    _css = css()
    events = traitlets.List(help="[{event, run_id, parent_id, lane, model, t_ms, elapsed_ms, "
                            "n_states, usage, level, error}]").tag(sync=True)
    rows = traitlets.List(help="the trace rows drawn (trace_rows(events))").tag(sync=True)

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

    # load/evict belong to no run (run_id None): their context's model is the checkpoint name
    def on_load(self, ctx: Any) -> None:
        self._add({"event": "on_load", "run_id": None, "model": model_label(ctx.model),
                   "model_path": str(ctx.model or ""), "level": "router",
                   "parent_id": ctx.parent_id}, time.perf_counter())

    def on_evict(self, ctx: Any) -> None:
        self._add({"event": "on_evict", "run_id": None, "model": model_label(ctx.model),
                   "model_path": str(ctx.model or ""), "level": "router",
                   "parent_id": ctx.parent_id}, time.perf_counter())

    def _record(self, event: str, ctx: Any, *, model: str | None = None) -> None:
        now = time.perf_counter()
        error = ctx.error
        elapsed = ctx.elapsed_ms
        if elapsed is None and event in ("on_error", "on_predict_end") and ctx.started_at:
            elapsed = (now - ctx.started_at) * 1000.0
        states = ctx.states if isinstance(ctx.states, (list, tuple)) else None
        self._add({
            "event": event, "run_id": ctx.run_id, "parent_id": ctx.parent_id,
            # the checkpoint's short name (as on the answers card); the full path on hover
            "model": model_label(model or ctx.model), "model_path": str(model or ctx.model or ""),
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
            for key in ("parent_id", "elapsed_ms", "n_states", "usage", "level", "error", "model_path"):
                event.setdefault(key, None)
            self._pending.append(event)
        self._throttle.mark()

    def _push(self) -> None:
        with self._lock:
            merged = (list(self.events) + self._pending)[-self.max_events:]
            self._pending = []
        with self.hold_sync():
            self.events = merged
            self.rows = trace_rows(merged)

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
        with self.hold_sync():
            self.events, self.rows = [], []

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
            # a DataFrame holds a missing value as NaN (x != x) and counts as floats
            field = {k: None if r.get(k) != r.get(k) else r.get(k)
                     for k in ("run_id", "parent_id", "model", "elapsed_ms", "n_states", "level", "error")}
            if field["n_states"] is not None:
                field["n_states"] = int(field["n_states"])
            field["model_path"] = field["model"]
            field["model"] = model_label(field["model"]) if field["model"] is not None else None
            view._add({"event": r["event"], **field}, float(r["t"]))
        view.flush()
        return view

    def __repr__(self) -> str:
        lanes = {e["lane"] for e in self.events}
        return f"HookTimeline({len(lanes)} lanes, {len(self.events)} events)"
