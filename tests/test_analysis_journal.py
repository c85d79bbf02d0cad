"""jevlaya_lab.analysis on a real SQLite journal written by a real Broker run against the local
server (tiny transformers models on 127.0.0.1): plain calls, a failover, a race and ratings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

from jevlaya_lab import analysis
from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.hooks.recorder import EventRecorder
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def journal_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A journal with: 3 ok calls on ``a``; one call where ``a`` answers 500 and ``b`` takes
    over; one ``fastest_of=2`` race of ``b`` and ``c`` (``a`` cools down after its 500) where
    ``c`` is slow so ``b`` wins; ratings on ``b``."""
    db = tmp_path_factory.mktemp("journal") / "journal.db"
    models = {n: tiny_chat_model(seed=i, name=n) for i, n in enumerate("abc")}
    with serve(models) as server:
        cfg = [LLMConfig(name=n, base_url=server.base_url, model=n) for n in "abc"]
        with Broker(db, models=cfg, catalog=[]) as broker:
            for _ in range(3):
                broker.ask("hello", operation="greet", max_tokens=4)
            server.set_fault("a", FaultProfile(status=500))
            failover = broker.ask("hello again", operation="greet", max_tokens=4)
            server.set_fault("c", FaultProfile(latency=1.5))
            race = broker.ask("race", operation="race", fastest_of=2, max_tokens=4)
            race.record_quality(0.9)
            failover.record_quality(0.7)
            live = analysis.load_journal(broker)
    yield {"db": db, "failover": failover, "race": race, "live": live}


@pytest.fixture(scope="module")
def journal(journal_run: dict[str, Any]) -> analysis.Journal:
    return analysis.load_journal(journal_run["db"])


def test_load_journal_reads_every_attempt_and_rating(journal: analysis.Journal) -> None:
    a = journal.attempts
    assert list(a.columns)[:8] == ["call_id", "trace_id", "llm_name", "operation", "scope",
                                   "status", "called_at", "latency_ms"]
    assert len(a) >= 7  # 3 + (500 then ok) + two race lanes
    assert str(a["called_at"].dtype).startswith("datetime64")
    assert len(journal.ratings) == 2
    assert set(journal.ratings["score"]) == {0.9, 0.7}


def test_load_journal_from_broker_sees_same_rows(journal_run: dict[str, Any],
                                                 journal: analysis.Journal) -> None:
    live = journal_run["live"]
    assert sorted(live.attempts["call_id"]) == sorted(journal.attempts["call_id"])


def test_load_journal_accepts_sqlite_url(journal_run: dict[str, Any]) -> None:
    j = analysis.load_journal(f"sqlite:///{journal_run['db']}")
    assert len(j.attempts) == len(analysis.load_journal(journal_run["db"]).attempts)


def test_calls_and_tokens_per_model(journal: analysis.Journal) -> None:
    per = analysis.calls_per_model(journal)
    a = journal.attempts
    for name in ("a", "b"):
        rows = a[a["llm_name"] == name]
        assert per.loc[name, "attempts"] == len(rows)
        assert per.loc[name, "completion_tokens"] == int(rows["completion_tokens"].fillna(0).sum())
    assert (per["total_tokens"] == per["prompt_tokens"] + per["completion_tokens"]).all()
    assert per.loc["a", "ok"] >= 3


def test_latency_percentiles_are_ordered_and_match_pandas(journal: analysis.Journal) -> None:
    lat = analysis.latency_percentiles(journal, (0.5, 0.99))
    ok_a = journal.attempts.query("llm_name == 'a' and status == 'ok'")["latency_ms"]
    assert lat.loc["a", "latency_p50"] == pytest.approx(ok_a.quantile(0.5))
    assert (lat["latency_p50"] <= lat["latency_p99"]).all()
    assert {"ttft_p50", "ttft_p99", "n"} <= set(lat.columns)


def test_error_rates_by_cause_name_the_http_status(journal: analysis.Journal) -> None:
    errs = analysis.error_rates(journal)
    assert "unavailable/500" in errs.index
    assert errs.loc["unavailable/500", "failures"] == 1
    assert errs.loc["unavailable/500", "rate"] == pytest.approx(1 / len(journal.attempts))
    by_model = analysis.error_rates(journal, by="llm_name")
    assert list(by_model.index) == ["a"]


def test_failover_rate_counts_the_call_that_moved_to_another_model(
        journal_run: dict[str, Any], journal: analysis.Journal) -> None:
    fo = analysis.failover_rate(journal)
    assert fo.loc["greet", "calls"] == 4
    assert fo.loc["greet", "failed_over"] == 1
    assert fo.loc["race", "failed_over"] == 0
    assert fo.loc["all", "rate"] == pytest.approx(1 / 5)
    trace = journal_run["failover"].trace_id
    assert list(journal.attempts[journal.attempts["trace_id"] == trace]["status"]) == ["unavailable", "ok"]


def test_race_wins_and_wasted_tokens(journal_run: dict[str, Any],
                                     journal: analysis.Journal) -> None:
    wins = analysis.race_wins(journal)
    winner = journal_run["race"].llm_name
    assert winner == "b"
    loser = "c"
    assert wins.loc[winner, "wins"] == 1 and wins.loc[winner, "win_rate"] == 1.0
    assert wins.loc[loser, "wins"] == 0 and wins.loc[loser, "races"] == 1
    lost = journal.attempts.query("status in ['superseded', 'cancelled']")
    assert analysis.wasted_tokens(journal) == int(lost["completion_tokens"].fillna(0).sum())


def test_quality_per_operation_and_over_time(journal: analysis.Journal) -> None:
    q = analysis.quality_by_operation(journal)
    assert q.loc[("greet", "b"), "mean"] == pytest.approx(0.7)
    over = analysis.quality_over_time(journal, "1D")
    assert set(over.columns) >= {"rated_at", "llm_name", "mean", "ratings"}
    assert int(over["ratings"].sum()) == 2
    with pytest.raises(ValueError, match="freq='fortnightly'"):
        analysis.quality_over_time(journal, "fortnightly")


def test_summary_is_json_ready(journal: analysis.Journal) -> None:
    import json

    s = analysis.summary(journal)
    json.dumps(s)
    assert s["calls"] == 5 and s["races"] == 1 and s["ratings"] == 2
    assert s["statuses"]["unavailable"] == 1


def test_figures_are_plotly_figures_with_one_trace_per_series(journal: analysis.Journal) -> None:
    figs = [analysis.tokens_figure(journal), analysis.latency_figure(journal),
            analysis.race_figure(journal), analysis.quality_figure(journal, "1D")]
    assert all(isinstance(f, go.Figure) for f in figs)
    assert [t.name for t in figs[0].data] == ["prompt", "completion"]
    assert list(figs[0].data[1].x) == ["a", "b", "c"]
    assert len(figs[3].data) == journal.ratings["llm_name"].nunique()


def test_decision_events_and_latency_per_checkpoint(tmp_path: Path) -> None:
    from jevlaya_lab import Agent
    from jevlaya_lab.decisions.presets import triage_questions
    from jevlaya_lab.decisions.testing import make_tiny_checkpoint

    recorder = EventRecorder()
    agent = Agent(make_tiny_checkpoint(tmp_path / "ck"), hooks=[recorder], model_id="tiny")
    for _ in range(3):
        agent.predict_batch(["my card was charged twice"], triage_questions())
    df = analysis.decision_events(recorder)
    assert list(df["event"]).count("on_predict_end") == 3
    lat = analysis.decision_latency(df)
    assert lat.loc["tiny", "calls"] == 3 and lat.loc["tiny", "errors"] == 0
    assert lat.loc["tiny", "elapsed_p50"] > 0


def test_empty_journal_gives_empty_frames_not_errors(tmp_path: Path) -> None:
    from jevlaya_lab.journal import open_store

    open_store(tmp_path / "empty.db").close()
    j = analysis.load_journal(tmp_path / "empty.db")
    assert j.attempts.empty and j.ratings.empty
    assert analysis.calls_per_model(j).empty
    assert analysis.race_wins(j).empty
    assert analysis.summary(j)["attempts"] == 0
    assert isinstance(analysis.latency_figure(j), go.Figure)


def test_bad_sources_name_the_value_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.db.*Broker"):
        analysis.load_journal(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(TypeError, match="source=int"):
        analysis.load_journal(42)
    with pytest.raises(ValueError, match="percentiles=.*fraction"):
        analysis.latency_percentiles(pd.DataFrame(columns=["status"]), (50,))
    with pytest.raises(ValueError, match="by='day'"):
        analysis.error_rates(analysis.attempts_frame([]), by="day")
    with pytest.raises(ValueError, match=r"decisions\[0\]"):
        analysis.decision_events([{"run_id": "x"}])


def test_aload_journal_reads_an_async_broker_with_pending_writes(tmp_path: Path) -> None:
    import asyncio

    from jevlaya_lab.broker import AsyncBroker

    async def run(base_url: str) -> tuple[analysis.Journal, str]:
        cfg = [LLMConfig(name="a", base_url=base_url, model="a")]
        async with AsyncBroker(tmp_path / "async.db", models=cfg, catalog=[]) as broker:
            result = await broker.ask("hi", max_tokens=3)
            await result.record_quality(0.5)
            return await analysis.aload_journal(broker), result.call_id

    with serve({"a": tiny_chat_model(seed=0, name="a")}) as server:
        journal, call_id = asyncio.run(run(server.base_url))
    assert list(journal.attempts["call_id"]) == [call_id]
    assert list(journal.ratings["score"]) == [0.5]
