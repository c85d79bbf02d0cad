"""``JournalDashboard``: the Broker journal at a glance, backed by :mod:`jevlaya_lab.analysis`.

An ipywidgets composition: a summary table (escaped HTML), per-model tables (calls and tokens,
latency/TTFT percentiles, errors by cause, race wins) and four plotly ``FigureWidget``s (tokens,
latency, race wins, quality over time). ``refresh()`` (or the button) re-reads the source, so
it can follow a live Broker. ``summary`` and ``tables`` hold the same numbers as plain dicts
for notebook checks.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as w
import pandas as pd

from jevlaya_lab import analysis
from jevlaya_lab.widgets.render import jsonable

FIGURES = {"tokens": analysis.tokens_figure, "latency": analysis.latency_figure,
           "races": analysis.race_figure, "quality": analysis.quality_figure}


def table_html(df: pd.DataFrame) -> str:
    """A DataFrame as HTML with every cell escaped (``DataFrame.to_html`` escapes by default;
    this keeps it explicit and compact)."""
    return df.to_html(escape=True, float_format=lambda x: f"{x:.3g}", border=0,
                      classes="jv-table", na_rep="–")


class JournalDashboard(w.VBox):
    """``JournalDashboard(source)`` where source is anything :func:`analysis.load_journal`
    reads (a .db path, a Broker, a Store) or an :class:`analysis.Journal`."""

    def __init__(self, source: Any, *, quality_freq: str = "1h", **kwargs: Any) -> None:
        self.source = source
        self.quality_freq = quality_freq
        self.summary: dict[str, Any] = {}
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.summary_html = w.HTML()
        self.tables_html = w.HTML()
        import plotly.graph_objects as go

        self.figures = {name: go.FigureWidget() for name in FIGURES}
        self.button = w.Button(description="refresh", icon="refresh")
        self.button.on_click(lambda _b: self.refresh())
        tabs = w.Tab(children=list(self.figures.values()))
        for i, name in enumerate(self.figures):
            tabs.set_title(i, name)
        super().__init__([w.HBox([self.button, self.summary_html]), self.tables_html, tabs],
                         **kwargs)
        self.refresh()

    def refresh(self) -> dict[str, Any]:
        """Re-read the journal and redraw; returns the summary."""
        journal = self.source if isinstance(self.source, analysis.Journal) else \
            analysis.load_journal(self.source)
        self.journal = journal
        self.summary = analysis.summary(journal)
        frames = {"calls": analysis.calls_per_model(journal),
                  "latency": analysis.latency_percentiles(journal),
                  "errors": analysis.error_rates(journal),
                  "races": analysis.race_wins(journal)}
        self.tables = {k: jsonable(df.reset_index().to_dict("records")) for k, df in frames.items()}
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>"
                       for k, v in self.summary.items())
        self.summary_html.value = f"<table class='jv-table'>{rows}</table>"
        self.tables_html.value = "".join(f"<h4>{escape(k)}</h4>{table_html(df)}"
                                         for k, df in frames.items() if not df.empty)
        for name, make in FIGURES.items():
            fig = make(journal, self.quality_freq) if name == "quality" else make(journal)
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
