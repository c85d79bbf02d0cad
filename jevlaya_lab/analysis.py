"""The journal as pandas: ``load_journal(source)`` and the questions users of an LLM gateway ask.

``load_journal`` returns a :class:`Journal` with three DataFrames: ``attempts`` (one row per
provider request, the Broker's journal columns with ``called_at`` as UTC timestamps),
``ratings`` (one row per ``record_quality``) and ``decisions`` (hook events of Agent/Router
calls, when given an :class:`~jevlaya_lab.hooks.recorder.EventRecorder` or its records; the
SQLite journal itself holds no decision events yet). Every helper takes a ``Journal`` or the
matching DataFrame and returns a small DataFrame indexed by model (or cause, operation, ...);
``*_figure`` helpers return a plotly ``go.Figure`` (static, small in a notebook).

What the frames mean:

- ``source`` may be a SQLite path / ``sqlite:///`` URL, a ``postgresql://`` URL (the same
  tables in PostgreSQL; see :mod:`jevlaya_lab.journal.postgresql`), a sync ``Broker`` (read
  through its public ``calls()`` / ``ratings()``, which flush pending journal writes
  first), an open ``Store``, or an ``AsyncBroker`` (read its store; use
  ``await aload_journal(broker)`` to flush pending writes first). A missing file is a
  ``FileNotFoundError`` (reading never creates a database; a PostgreSQL database without a
  journal gets empty journal tables).
- A *call* is a ``trace_id``; it *failed over* when an attempt that is neither ``ok`` nor a
  race loser (``superseded``/``cancelled``) came before its final attempt. A *race* is a trace
  with a ``superseded`` attempt; its winner is the ``ok`` attempt. Wasted tokens are the
  completion tokens of ``superseded`` and ``cancelled`` attempts.
- Error causes: the status (``rate_limited``, ``unavailable``, ``error``) refined by the HTTP
  status when there is one (``error/401``), else by the first words of ``error_detail``.
- Percentiles use pandas' linear interpolation; empty groups give ``NaN``, never an error.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from jevlaya_lab._lazy import lazy_attributes
from jevlaya_lab.display import table_html
from jevlaya_lab.journal.rows import ATTEMPT_FIELDS, RATING_FIELDS

__all__ = [
    "DECISION_FIELDS", "Journal", "aload_journal", "calls_per_model", "decision_events",
    "decision_latency", "error_rates", "failover_rate", "latency_percentiles",
    "load_journal", "quality_by_operation", "quality_over_time", "race_wins", "summary",
]

DECISION_FIELDS = ("event", "run_id", "model", "t", "level", "thread", "n_states", "elapsed_ms",
                   "error", "parent_id")
LOSER_STATUSES = ("superseded", "cancelled")
FAILED_STATUSES = ("rate_limited", "unavailable", "error")
DEFAULT_PERCENTILES = (0.5, 0.9, 0.99)

# The plotly figures of these frames live in jevlaya_lab.figures (which imports this module);
# they stay reachable here as analysis.tokens_figure(...), resolved on first use.
_FIGURES = {name: "jevlaya_lab.figures" for name in
            ("latency_figure", "quality_figure", "race_figure", "tokens_figure")}
__getattr__, __dir__ = lazy_attributes(__name__, globals(), _FIGURES)


@dataclass
class Journal:
    """The journal as DataFrames (see the module docstring for the columns)."""

    attempts: pd.DataFrame
    ratings: pd.DataFrame
    decisions: pd.DataFrame = field(default_factory=lambda: decision_events([]))
    source: str = ""

    def summary(self) -> dict[str, Any]:
        return summary(self)

    def _repr_html_(self) -> str:
        rows = [(k, v) for k, v in self.summary().items() if not isinstance(v, dict)]
        return table_html(rows, row_heads=True, css_class="jevlaya-journal")


def attempts_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Attempt rows → a DataFrame with the journal's columns in order, typed."""
    df = pd.DataFrame([dict(r) for r in rows], columns=list(ATTEMPT_FIELDS))
    df["called_at"] = pd.to_datetime(df["called_at"], utc=True, format="ISO8601")
    for col in ("latency_ms", "first_token_ms", "budget_ms"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in ("http_status", "prompt_tokens", "completion_tokens"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df


def ratings_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rating rows → a DataFrame with the journal's rating columns, typed."""
    df = pd.DataFrame([dict(r) for r in rows], columns=list(RATING_FIELDS))
    df["rated_at"] = pd.to_datetime(df["rated_at"], utc=True, format="ISO8601")
    df["score"] = pd.to_numeric(df["score"], errors="coerce").astype("float64")
    return df


def decision_events(source: Any) -> pd.DataFrame:
    """Hook events of Agent/Router calls as a DataFrame.

    ``source``: an ``EventRecorder`` (or anything with ``to_records()``) or an iterable of
    event dicts with the recorder's fields (:data:`DECISION_FIELDS`).
    """
    records = source.to_records() if hasattr(source, "to_records") else source
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Iterable):
        raise TypeError(f"decisions={type(source).__name__}: expected an EventRecorder or a list "
                        "of event dicts (EventRecorder.to_records())")
    rows = [dict(r) for r in records]
    for i, row in enumerate(rows):
        if "event" not in row:
            raise ValueError(f"decisions[{i}]={row!r}: an event dict needs an 'event' key "
                             f"(fields: {', '.join(DECISION_FIELDS)})")
    df = pd.DataFrame(rows, columns=list(DECISION_FIELDS))
    df["t"] = pd.to_numeric(df["t"], errors="coerce").astype("float64")
    df["elapsed_ms"] = pd.to_numeric(df["elapsed_ms"], errors="coerce").astype("float64")
    return df


def load_journal(source: Any, *, decisions: Any = None) -> Journal:
    """Read a journal into DataFrames; ``decisions`` optionally adds recorded hook events."""
    extra = decision_events(decisions if decisions is not None else [])
    if hasattr(source, "calls") and hasattr(source, "ratings") and not hasattr(source, "store"):
        # the sync Broker: its public methods flush pending writes first
        attempts, ratings = source.calls()[::-1], source.ratings()  # calls(): newest first
        return Journal(attempts_frame(attempts), ratings_frame(ratings), extra, repr(source))
    store = getattr(source, "store", None)
    if store is not None and hasattr(store, "attempts"):  # an AsyncBroker
        return _from_store(store, extra)
    if hasattr(source, "attempts") and hasattr(source, "ratings"):  # a Store
        return _from_store(source, extra)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source={type(source).__name__}: expected a SQLite path, a "
                        "'sqlite:///path' or 'postgresql://' URL, a Broker or a journal Store")
    from jevlaya_lab.journal import open_store
    from jevlaya_lab.journal.store import redact_url

    text = os.fspath(source)
    if not text.startswith(("postgresql://", "postgres://")):
        if "://" in text.removeprefix("sqlite:///"):
            raise ValueError(f"source={redact_url(text)!r}: not a journal; pass a .db path, "
                             "sqlite:///path or postgresql://user@host:5432/dbname")
        if not Path(text.removeprefix("sqlite:///")).is_file():
            raise FileNotFoundError(f"source={text!r}: no journal file there; pass the path of "
                                    "the Broker's database (Broker(source=...)), e.g. "
                                    "'journal.db'")

    store = open_store(text)
    try:
        return _from_store(store, extra)
    finally:
        store.close()


async def aload_journal(broker: Any, *, decisions: Any = None) -> Journal:
    """``load_journal`` for an ``AsyncBroker``: awaits its ``calls()``/``ratings()`` so
    pending journal writes are included."""
    attempts, ratings = await asyncio.gather(broker.calls(), broker.ratings())
    attempts = attempts[::-1]  # calls() lists the newest first; frames read oldest first
    extra = decision_events(decisions if decisions is not None else [])
    return Journal(attempts_frame(attempts), ratings_frame(ratings), extra, repr(broker))


def _from_store(store: Any, decisions: pd.DataFrame) -> Journal:
    return Journal(attempts_frame(store.attempts()), ratings_frame(store.ratings()), decisions,
                   getattr(store, "location", repr(store)))


def _attempts(data: Journal | pd.DataFrame) -> pd.DataFrame:
    return data.attempts if isinstance(data, Journal) else data


def _ratings(data: Journal | pd.DataFrame) -> pd.DataFrame:
    return data.ratings if isinstance(data, Journal) else data


def _check_quantiles(percentiles: Sequence[float]) -> list[float]:
    qs = list(percentiles)
    for q in qs:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
            raise ValueError(f"percentiles={percentiles!r}: each must be a fraction in [0, 1], "
                             "e.g. (0.5, 0.9, 0.99)")
    return qs


# -- calls, tokens, latency -----------------------------------------------------------------
def calls_per_model(data: Journal | pd.DataFrame) -> pd.DataFrame:
    """Per model: attempts, ok answers, prompt/completion/total tokens."""
    df = _attempts(data)
    grouped = df.groupby("llm_name", sort=True)
    out = pd.DataFrame({
        "attempts": grouped.size(),
        "ok": grouped["status"].agg(lambda s: int((s == "ok").sum())),
        "prompt_tokens": grouped["prompt_tokens"].sum(min_count=1).fillna(0).astype("int64"),
        "completion_tokens": grouped["completion_tokens"].sum(min_count=1).fillna(0)
        .astype("int64"),
    })
    out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    out.index.name = "llm_name"
    return out


def latency_percentiles(data: Journal | pd.DataFrame,
                        percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> pd.DataFrame:
    """Per model, over ``ok`` attempts: latency and time-to-first-token percentiles (ms).

    Columns ``latency_p50``, ``ttft_p50``, ... plus ``n``; streams without a first token
    leave the ``ttft_*`` cells ``NaN``.
    """
    qs = _check_quantiles(percentiles)
    ok = _attempts(data)
    ok = ok[ok["status"] == "ok"]
    grouped = ok.groupby("llm_name", sort=True)
    out = pd.DataFrame({"n": grouped.size()})
    for q in qs:
        label = f"p{round(q * 100, 1):g}"
        out[f"latency_{label}"] = grouped["latency_ms"].quantile(q)
        out[f"ttft_{label}"] = grouped["first_token_ms"].quantile(q)
    out.index.name = "llm_name"
    return out


# -- failures --------------------------------------------------------------------------------
def _causes(failed: pd.DataFrame) -> pd.Series:
    """``status/http_status`` when there is an HTTP error status, else ``status/<first two
    words of error_detail>``, else the status alone."""
    status = failed["status"].astype(str)
    http = failed["http_status"]
    words = (failed["error_detail"].fillna("").astype(str).str.replace(":", " ", regex=False)
             .str.split().str[:2].str.join(" "))
    by_detail = status.where(words == "", status + "/" + words)
    has_http = http.notna() & (http.fillna(0) >= 400)
    return by_detail.where(~has_http, status + "/" + http.astype("string"))


def error_rates(data: Journal | pd.DataFrame, *, by: str = "cause") -> pd.DataFrame:
    """Failed attempts counted by ``cause`` (default), ``status`` or ``llm_name``, with their
    share of all attempts (``rate``)."""
    if by not in ("cause", "status", "llm_name"):
        raise ValueError(f"by={by!r}: choose 'cause', 'status' or 'llm_name'")
    df = _attempts(data)
    failed = df[df["status"].isin(FAILED_STATUSES)].copy()
    failed["cause"] = _causes(failed)
    counts = failed.groupby(by).size().sort_values(ascending=False)
    out = pd.DataFrame({"failures": counts.astype("int64")})
    out["rate"] = out["failures"] / max(len(df), 1)
    out.index.name = by
    return out


def failover_rate(data: Journal | pd.DataFrame) -> pd.DataFrame:
    """Per operation (and ``"all"``): calls, calls that failed over, and the rate."""
    df = _attempts(data).sort_values("called_at", kind="stable")
    by_trace = df.groupby("trace_id", sort=False)
    not_last = by_trace.cumcount() < by_trace["trace_id"].transform("size") - 1
    failed_early = df["status"].isin(FAILED_STATUSES) & not_last
    calls = pd.DataFrame({
        "operation": by_trace["operation"].first().fillna(""),
        "failed_over": failed_early.groupby(df["trace_id"], sort=False).any(),
        "answered": (df["status"] == "ok").groupby(df["trace_id"], sort=False).any(),
    })
    out = calls.groupby("operation").agg(calls=("failed_over", "size"),
                                         failed_over=("failed_over", "sum"),
                                         answered=("answered", "sum"))
    out.loc["all"] = [len(calls), int(calls["failed_over"].sum()), int(calls["answered"].sum())]
    out = out.astype("int64")
    out["rate"] = out["failed_over"] / out["calls"].where(out["calls"] > 0)
    out.index.name = "operation"
    return out


# -- races -----------------------------------------------------------------------------------
def race_wins(data: Journal | pd.DataFrame) -> pd.DataFrame:
    """Per model, over races (traces with a superseded lane): races entered, won, win rate and
    wasted completion tokens of its losing lanes."""
    df = _attempts(data)
    race_traces = df.loc[df["status"] == "superseded", "trace_id"].unique()
    lanes = df[df["trace_id"].isin(race_traces)]
    grouped = lanes.groupby("llm_name", sort=True)
    won = lanes[lanes["status"] == "ok"].groupby("llm_name")["trace_id"].nunique()
    wasted = lanes[lanes["status"].isin(LOSER_STATUSES)].groupby("llm_name")[
        "completion_tokens"].sum(min_count=1)
    out = pd.DataFrame({"races": grouped["trace_id"].nunique()})
    out["wins"] = won.reindex(out.index).fillna(0).astype("int64")
    out["win_rate"] = out["wins"] / out["races"]
    out["wasted_tokens"] = wasted.reindex(out.index).fillna(0).astype("int64")
    out.index.name = "llm_name"
    return out


def wasted_tokens(data: Journal | pd.DataFrame) -> int:
    """Completion tokens spent on answers nobody used (race losers and cancelled lanes)."""
    df = _attempts(data)
    return int(df.loc[df["status"].isin(LOSER_STATUSES), "completion_tokens"].fillna(0).sum())


# -- quality ---------------------------------------------------------------------------------
def quality_by_operation(data: Journal | pd.DataFrame) -> pd.DataFrame:
    """Mean rating, count and min/max per (operation, model)."""
    df = _ratings(data).copy()
    df["operation"] = df["operation"].fillna("")
    out = df.groupby(["operation", "llm_name"]).agg(
        ratings=("score", "size"), mean=("score", "mean"), min=("score", "min"),
        max=("score", "max"))
    out["ratings"] = out["ratings"].astype("int64")
    return out


def quality_over_time(data: Journal | pd.DataFrame, freq: str = "1h") -> pd.DataFrame:
    """Mean rating per model per time bucket (``freq`` is a pandas offset such as ``"1h"``)."""
    df = _ratings(data)
    try:
        grouper = pd.Grouper(key="rated_at", freq=freq)
        out = df.groupby([grouper, "llm_name"])["score"].agg(["mean", "size"])
    except ValueError as exc:
        raise ValueError(f"freq={freq!r}: not a pandas offset alias; use e.g. '1min', '1h', "
                         "'1D'") from exc
    return out.rename(columns={"size": "ratings"}).reset_index()


# -- decisions -------------------------------------------------------------------------------
def decision_latency(data: Journal | pd.DataFrame,
                     percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> pd.DataFrame:
    """Per checkpoint: predict calls, errors and ``elapsed_ms`` percentiles of
    ``on_predict_end`` events."""
    qs = _check_quantiles(percentiles)
    df = data.decisions if isinstance(data, Journal) else data
    ends = df[df["event"] == "on_predict_end"]
    grouped = ends.groupby("model", sort=True)
    out = pd.DataFrame({"calls": grouped.size(),
                        "errors": grouped["error"].agg(lambda s: int(s.notna().sum()))})
    for q in qs:
        out[f"elapsed_p{round(q * 100, 1):g}"] = grouped["elapsed_ms"].quantile(q)
    out.index.name = "model"
    return out


# -- one-glance summary ----------------------------------------------------------------------
def summary(data: Journal) -> dict[str, Any]:
    """A JSON-ready dict: totals, statuses, failover rate, wasted tokens, ratings."""
    df = data.attempts
    fo = failover_rate(df)
    return {
        "attempts": int(len(df)),
        "calls": int(df["trace_id"].nunique()),
        "models": sorted(df["llm_name"].dropna().unique().tolist()),
        "statuses": {str(k): int(v) for k, v in df["status"].value_counts().items()},
        "failover_rate": None if pd.isna(fo.loc["all", "rate"]) else float(fo.loc["all", "rate"]),
        "races": int(df.loc[df["status"] == "superseded", "trace_id"].nunique()),
        "wasted_tokens": wasted_tokens(df),
        "ratings": int(len(data.ratings)),
        "mean_rating": None if data.ratings.empty else float(data.ratings["score"].mean()),
        "decision_calls": int((data.decisions["event"] == "on_predict_end").sum()),
    }
