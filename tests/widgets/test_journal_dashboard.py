"""JournalDashboard on a real Broker journal; numbers equal jevlaya_lab.analysis."""

from __future__ import annotations

from typing import Any

import pytest

from jevlaya_lab import analysis
from jevlaya_lab.local import FaultProfile
from jevlaya_lab.widgets import JournalDashboard
from jevlaya_lab.widgets.dashboard import number_text

from .conftest import XSS


def test_dashboard_shows_the_analysis_numbers_and_refreshes(broker: Any, server: Any) -> None:
    b = broker("a", "b")
    for _ in range(3):
        b.ask("hi", operation=XSS, max_tokens=4)
    server.set_fault("a", FaultProfile(status=500))
    b.ask("hi", max_tokens=4)
    dash = JournalDashboard(b)
    assert dash.summary == analysis.summary(analysis.load_journal(b))
    assert dash.summary["attempts"] == 5 and dash.summary["statuses"]["unavailable"] == 1
    calls = {r["llm_name"]: r for r in dash.tables["calls"]}
    assert calls["a"]["attempts"] == 4 and calls["b"]["attempts"] == 1
    assert (calls["a"]["ok"], calls["a"]["failures"], calls["b"]["failures"]) == (3, 1, 0)
    (failure,) = dash.tables["recent_failures"]
    assert (failure["llm_name"], failure["status"], failure["http_status"]) == (
        "a", "unavailable", 500)
    assert failure["called_at"].endswith("UTC")
    assert [t.name for t in dash.figures["tokens"].data] == ["prompt", "completion"]
    assert len(dash.figures["latency"].data) >= 2
    assert "<script" not in dash.readout.value
    server.set_fault("a", None)
    b.ask("again", max_tokens=4)
    dash.button.click()
    assert dash.summary["attempts"] == 6


def test_a_journal_without_rows_shows_an_empty_dashboard(broker: Any) -> None:
    dash = JournalDashboard(broker("a"))
    assert dash.summary["attempts"] == 0 and "<h4>" not in dash.readout.value
    assert all(rows == [] for rows in dash.tables.values())


def test_bad_recent_is_refused_with_the_fix(broker: Any) -> None:
    with pytest.raises(ValueError, match="recent=-1: must be an integer >= 0"):
        JournalDashboard(broker("a"), recent=-1)


def test_numbers_show_three_significant_digits_and_whole_thousands() -> None:
    assert [number_text(x) for x in (0.1234, 12.345, 999.4, 999.6, 12345.6)] == [
        "0.123", "12.3", "999", "1000", "12346"]


def test_the_quality_bucket_follows_the_ratings_span(broker: Any) -> None:
    """A fresh journal's ratings span milliseconds, so the quality chart's
    bucket is milliseconds too (several points per model), not one dot per model per hour;
    numeric table cells are right-aligned (class jv-n)."""
    import pandas as pd

    from jevlaya_lab.widgets.dashboard import TARGET_BUCKETS, quality_bucket

    b = broker("a")
    for _ in range(4):
        b.ask("hi", max_tokens=4).record_quality(0.5)
    dash = JournalDashboard(b)
    rated = dash.journal.ratings["rated_at"]
    bucket = pd.Timedelta(dash.quality_bucket)
    assert (rated.max() - rated.min()) / bucket <= TARGET_BUCKETS
    assert bucket < pd.Timedelta("1min")
    points = sum(len(trace.x) for trace in dash.figures["quality"].data)
    assert points >= 2 or rated.max() == rated.min()
    assert "<td class='jv-n'>" in dash.readout.value
    week = analysis.Journal(dash.journal.attempts, dash.journal.ratings.assign(
        rated_at=pd.to_datetime(["2026-01-01", "2026-01-03", "2026-01-05", "2026-01-08"],
                                utc=True)))
    assert quality_bucket(week) == "1D"
