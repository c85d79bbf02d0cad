"""The journal's plotly figures: tokens, latency, race wins and quality per model.

Each takes a :class:`~jevlaya_lab.analysis.Journal` (or the matching DataFrame) and draws one of
the frames :mod:`jevlaya_lab.analysis` computes; each returns a static ``go.Figure``, small in a
notebook. plotly is imported on the first figure, so reading a journal never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from jevlaya_lab import analysis
from jevlaya_lab.analysis import Journal

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

__all__ = ["latency_figure", "quality_figure", "race_figure", "tokens_figure"]


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def _layout(fig: Any, title: str) -> Any:
    fig.update_layout(title=title, template="plotly_white", height=320,
                      margin=dict(l=40, r=10, t=40, b=40))
    return fig


def tokens_figure(data: Journal | pd.DataFrame) -> go.Figure:
    """Stacked bars: prompt and completion tokens per model."""
    go = _go()
    per = analysis.calls_per_model(data)
    fig = go.Figure([go.Bar(name="prompt", x=list(per.index), y=per["prompt_tokens"].tolist()),
                     go.Bar(name="completion", x=list(per.index),
                            y=per["completion_tokens"].tolist())])
    fig.update_layout(barmode="stack")
    return _layout(fig, "Tokens per model")


def latency_figure(data: Journal | pd.DataFrame) -> go.Figure:
    """Box plots of latency and time to first token per model (ok attempts)."""
    go = _go()
    df = analysis._attempts(data)
    ok = df[df["status"] == "ok"]
    fig = go.Figure()
    for name, group in ok.groupby("llm_name", sort=True):
        fig.add_trace(go.Box(y=group["latency_ms"].tolist(), name=f"{name} latency"))
        if group["first_token_ms"].notna().any():
            fig.add_trace(go.Box(y=group["first_token_ms"].dropna().tolist(),
                                 name=f"{name} first token"))
    fig.update_yaxes(title="ms")
    return _layout(fig, "Latency (ms)")


def race_figure(data: Journal | pd.DataFrame) -> go.Figure:
    """Bars: race win rate per model."""
    go = _go()
    wins = analysis.race_wins(data)
    fig = go.Figure([go.Bar(x=list(wins.index), y=wins["win_rate"].tolist(),
                            text=[f"{w}/{r}" for w, r in zip(wins["wins"], wins["races"])])])
    fig.update_yaxes(range=[0, 1], title="win rate")
    return _layout(fig, "Race wins")


def quality_figure(data: Journal | pd.DataFrame, freq: str = "1h") -> go.Figure:
    """Lines: mean rating per model over time."""
    go = _go()
    q = analysis.quality_over_time(data, freq)
    fig = go.Figure()
    for name, group in q.groupby("llm_name", sort=True):
        fig.add_trace(go.Scatter(x=group["rated_at"].tolist(), y=group["mean"].tolist(),
                                 mode="lines+markers", name=str(name)))
    fig.update_yaxes(range=[0, 1], title="mean rating")
    return _layout(fig, "Quality over time")
