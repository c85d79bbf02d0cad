"""JournalDashboard on a real Broker journal; numbers equal jevlaya_lab.analysis."""

from __future__ import annotations

from typing import Any

from jevlaya_lab import analysis
from jevlaya_lab.local import FaultProfile
from jevlaya_lab.widgets import JournalDashboard

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
    assert [t.name for t in dash.figures["tokens"].data] == ["prompt", "completion"]
    assert len(dash.figures["latency"].data) >= 2
    assert "<script" not in dash.tables_html.value + dash.summary_html.value
    server.set_fault("a", None)
    b.ask("again", max_tokens=4)
    dash.button.click()
    assert dash.summary["attempts"] == 6
