"""``JournalDashboard``: the Broker journal at a glance, backed by :mod:`jevlaya_lab.analysis`.

An ipywidgets composition: a summary table (escaped HTML), per-model tables (calls with their
failures and tokens, latency/TTFT percentiles, failures by cause, race wins), the most recent
failures with their error detail, and four plotly ``FigureWidget``s (tokens, latency, race
wins, quality over time). ``refresh()`` (or the button) re-reads the source, so it can follow
a live Broker; the "read N×" line, the summary and the tables are one widget (``readout``), so a
refresh reaches the page as one message and never shows a new summary beside old tables.
``summary`` and ``tables`` hold the same numbers as plain dicts for notebook checks.

What a reader of the tables can rely on: every cell is HTML-escaped (journal text such as an error
detail or an operation is shown as text, never markup); numbers show three significant digits
and whole numbers from 1,000 up (never ``1.23e+03``); missing values (a missing HTTP status,
a mean rating before any rating) show as ``–``; each table
has the class ``jv-<name>`` (``jv-calls``, ``jv-latency``, ``jv-errors``, ``jv-races``,
``jv-recent_failures``; the summary ``jv-summary``) so notebooks and tests can find it; numeric
columns are right-aligned (``td.jv-n``); an empty table is left out. The view carries the
``jevlaya`` class and the package's stylesheet, so it follows the JupyterLab theme like the other
views. The quality chart's bucket follows the ratings' time span (``quality_bucket``), so a
fresh journal's few milliseconds are not one dot per model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as w
import pandas as pd

from jevlaya_lab import analysis, figures
from jevlaya_lab.display import table_html as build_table
from jevlaya_lab.widgets.assets import css
from jevlaya_lab.widgets.render import jsonable

FIGURES: dict[str, Callable[..., Any]] = {
    "tokens": figures.tokens_figure, "latency": figures.latency_figure,
    "races": figures.race_figure, "quality": figures.quality_figure,
}
HEADINGS = {"calls": "calls per model", "latency": "latency per model (ms, ok attempts)",
            "errors": "failures by cause", "races": "race wins",
            "recent_failures": "recent failures (newest first)"}
FAILURE_COLUMNS = ["called_at", "llm_name", "operation", "status", "http_status", "error_detail"]


def number_text(x: float) -> str:
    """A number as the tables show it: three significant digits, whole from 1,000 up."""
    return f"{x:.0f}" if abs(x) >= 999.5 else f"{x:.3g}"


def summary_text(value: Any) -> str:
    """A summary value as shown: numbers as in the tables, missing as ``–``."""
    if value is None:
        return "–"
    return number_text(value) if isinstance(value, float) else str(value)


def table_html(df: pd.DataFrame, name: str) -> str:
    """A DataFrame (index included as the first column) as an HTML table with every cell
    escaped and whole (never clipped), numbers right-aligned (``td.jv-n``), missing as ``–``."""
    shown = df.reset_index()
    numeric = [pd.api.types.is_numeric_dtype(shown[c]) and not pd.api.types.is_bool_dtype(
        shown[c]) for c in shown.columns]
    rows = ([cell_text(v) for v in row] for row in shown.itertuples(index=False))
    return build_table(rows, head=list(shown.columns), numeric=numeric, css_class=f"jv-table jv-{name}")


def cell_text(value: Any) -> str:
    """One table cell as shown: numbers as :func:`number_text`, missing values as ``–``."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return number_text(value)
    return str(value)


# Bucket widths for the quality chart, smallest first (pandas offset aliases).
BUCKETS = ["100us", "200us", "500us", "1ms", "2ms", "5ms", "10ms", "20ms", "50ms", "100ms",
           "200ms", "500ms", "1s", "2s", "5s", "10s", "30s", "1min", "2min", "5min", "15min",
           "30min", "1h", "3h", "6h", "12h", "1D", "7D", "30D"]
TARGET_BUCKETS = 12


def quality_bucket(journal: analysis.Journal) -> str:
    """The quality chart's bucket: the smallest of :data:`BUCKETS` that splits the ratings'
    time span into at most :data:`TARGET_BUCKETS` (a fresh journal spans milliseconds, a
    long-lived one weeks)."""
    rated = journal.ratings["rated_at"] if len(journal.ratings) else None
    if rated is None or rated.isna().all():
        return "1h"
    span = rated.max() - rated.min()
    for alias in BUCKETS:
        if span / pd.Timedelta(alias) <= TARGET_BUCKETS:
            return alias
    return BUCKETS[-1]


def model_calls(journal: analysis.Journal) -> pd.DataFrame:
    """:func:`analysis.calls_per_model` with each model's ``failures`` (rate limited,
    unavailable or error) after its ``ok`` answers."""
    out = analysis.calls_per_model(journal)
    failures = analysis.error_rates(journal, by="llm_name")["failures"]
    out.insert(2, "failures", failures.reindex(out.index).fillna(0).astype("int64"))
    return out


def recent_failures(journal: analysis.Journal, limit: int) -> pd.DataFrame:
    """The ``limit`` newest failed attempts, newest first, with their error detail."""
    df = journal.attempts
    failed = df[df["status"].isin(analysis.FAILED_STATUSES)]
    out = failed.sort_values("called_at", ascending=False, kind="stable").head(limit)
    out = out[FAILURE_COLUMNS].copy()
    out["called_at"] = out["called_at"].dt.strftime("%Y-%m-%d %H:%M:%S UTC")
    return out.set_index("called_at")


class JournalDashboard(w.VBox):
    """``JournalDashboard(source)`` where source is anything :func:`analysis.load_journal`
    reads (a .db path, a Broker, a Store) or an :class:`analysis.Journal`; ``recent`` is how
    many of the latest failures are listed; ``quality_freq`` is the quality chart's bucket
    (a pandas offset; default: picked from the ratings' span by :func:`quality_bucket`)."""

    def __init__(self, source: Any, *, quality_freq: str | None = None, recent: int = 20,
                 **kwargs: Any) -> None:
        if isinstance(recent, bool) or not isinstance(recent, int) or recent < 0:
            raise ValueError(f"recent={recent!r}: must be an integer >= 0 (how many of the "
                             "latest failures to list; 0 hides the list)")
        self.source = source
        self.quality_freq = quality_freq
        self.recent = recent
        self.summary: dict[str, Any] = {}
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.refreshes = 0
        self.readout = w.HTML()
        """The "read N×" line, the summary and the tables, in one widget: a refresh redraws them with
        one message, so the page never shows a new summary beside old tables."""
        import plotly.graph_objects as go

        self.figures = {name: go.FigureWidget() for name in FIGURES}
        self.button = w.Button(description="refresh", icon="refresh")
        self.button.on_click(lambda _b: self.refresh())
        tabs = w.Tab(children=list(self.figures.values()))
        for i, name in enumerate(self.figures):
            tabs.set_title(i, name)
        super().__init__([self.button, self.readout, tabs], **kwargs)
        self.add_class("jevlaya")  # the views' theme-aware styles (widgets.css) apply
        self.add_class("jv-dashboard")
        self.refresh()

    def refresh(self) -> dict[str, Any]:
        """Re-read the journal and redraw; returns the summary."""
        journal = self.source if isinstance(self.source, analysis.Journal) else \
            analysis.load_journal(self.source)
        self.journal = journal
        self.summary = analysis.summary(journal)
        frames = {"calls": model_calls(journal),
                  "latency": analysis.latency_percentiles(journal),
                  "errors": analysis.error_rates(journal),
                  "races": analysis.race_wins(journal),
                  "recent_failures": recent_failures(journal, self.recent)}
        self.tables = {k: jsonable(df.reset_index().to_dict("records")) for k, df in frames.items()}
        summary = build_table([(k, summary_text(v)) for k, v in self.summary.items()], row_heads=True,
                              css_class="jv-table jv-summary")
        tables = "".join(f"<h4>{escape(HEADINGS[k])}</h4>{table_html(df, k)}"
                         for k, df in frames.items() if not df.empty)
        self.refreshes += 1
        self.readout.value = (f"<style>{css()}</style><div class='jv-muted jv-refreshed'>read {self.refreshes}× · "
                              f"{escape(journal.source)}</div>{summary}{tables}")
        self.quality_bucket = self.quality_freq or quality_bucket(journal)
        for name, make in FIGURES.items():
            fig = make(journal, self.quality_bucket) if name == "quality" else make(journal)
            target = self.figures[name]
            with target.batch_update():
                target.data = []
                target.add_traces(list(fig.data))
                target.layout = fig.layout
        return self.summary

    def __repr__(self) -> str:
        s = self.summary
        return (f"JournalDashboard(attempts={s.get('attempts')}, calls={s.get('calls')}, "
                f"statuses={s.get('statuses')}, ratings={s.get('ratings')})")
