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
    assert "<script" not in dash.tables_html.value + dash.summary_html.value
    server.set_fault("a", None)
    b.ask("again", max_tokens=4)
    dash.button.click()
    assert dash.summary["attempts"] == 6


def test_a_journal_without_rows_shows_an_empty_dashboard(broker: Any) -> None:
    dash = JournalDashboard(broker("a"))
    assert dash.summary["attempts"] == 0 and dash.tables_html.value == ""
    assert all(rows == [] for rows in dash.tables.values())


def test_bad_recent_is_refused_with_the_fix(broker: Any) -> None:
    with pytest.raises(ValueError, match="recent=-1: must be an integer >= 0"):
        JournalDashboard(broker("a"), recent=-1)


def test_numbers_show_three_significant_digits_and_whole_thousands() -> None:
    assert [number_text(x) for x in (0.1234, 12.345, 999.4, 999.6, 12345.6)] == [
        "0.123", "12.3", "999", "1000", "12346"]
