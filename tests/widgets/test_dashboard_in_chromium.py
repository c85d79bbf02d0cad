"""JournalDashboard in headless Debian Chromium over a real SQLite journal: what the page shows
per model equals the journal's own rows, journal text (an error detail) stays text, and the
refresh button reaches Python and redraws with the new rows."""

from __future__ import annotations

import sqlite3
import statistics
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.journal import open_store
from jevlaya_lab.journal.rows import utc_now
from jevlaya_lab.local import FaultProfile
from jevlaya_lab.widgets import JournalDashboard
from jevlaya_lab.widgets.assets import css
from jevlaya_lab.widgets.dashboard import number_text

from .browser_host import IpywidgetsHost
from .conftest import needs_chromium

pytestmark = needs_chromium
PAYLOAD = ('<img src=x onerror="window.__xss=1"><b>boom</b> upstream said: '
           + "slow down, " * 8 + "please")  # longer than pandas' default column width
FAILED = ("rate_limited", "unavailable", "error")
TABLE_ROWS = """(name) => {
  const table = document.querySelector(`#w0 table.jv-${name}`);
  if (!table) return null;
  const cols = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  return [...table.querySelectorAll("tbody tr")].map((tr) =>
    Object.fromEntries([...tr.children].map((cell, i) => [cols[i], cell.textContent])));
}"""


def journal_per_model(db: Path) -> dict[str, dict[str, Any]]:
    """Straight from the SQLite file: attempts, ok answers, failures and the latencies of the
    ok attempts of each model."""
    with closing(sqlite3.connect(db)) as con:
        rows = con.execute("SELECT llm_name, status, latency_ms FROM attempts").fetchall()
    out: dict[str, dict[str, Any]] = {}
    for name, status, latency in rows:
        model = out.setdefault(name, {"attempts": 0, "ok": 0, "failures": 0, "latencies": []})
        model["attempts"] += 1
        model["ok"] += status == "ok"
        model["failures"] += status in FAILED
        if status == "ok":
            model["latencies"].append(latency)
    return out


def shown(page: Any, table: str) -> list[dict[str, str]]:
    rows = page.evaluate(TABLE_ROWS, table)
    assert rows is not None, f"no table.jv-{table} on the page"
    return rows


def assert_page_matches_journal(page: Any, db: Path) -> None:
    expected = journal_per_model(db)
    calls = {row["llm_name"]: row for row in shown(page, "calls")}
    latency = {row["llm_name"]: row for row in shown(page, "latency")}
    assert sorted(calls) == sorted(expected)
    for name, model in expected.items():
        row = calls[name]
        assert (row["attempts"], row["ok"], row["failures"]) == (
            str(model["attempts"]), str(model["ok"]), str(model["failures"])), name
        if model["latencies"]:
            assert latency[name]["latency_p50"] == number_text(
                statistics.median(model["latencies"])), name
    summary = dict(zip(page.locator("#w0 table.jv-summary th").all_text_contents(),
                       page.locator("#w0 table.jv-summary td").all_text_contents()))
    assert summary["attempts"] == str(sum(m["attempts"] for m in expected.values()))


def journal_a_failure(db: Path, detail: str) -> None:
    """One failed attempt written through the journal store API (the local server cannot be
    made to send an arbitrary error text)."""
    store = open_store(db)
    try:
        store.append([{"call_id": uuid.uuid4().hex, "trace_id": uuid.uuid4().hex,
                       "llm_name": "c", "operation": "triage", "status": "error",
                       "called_at": utc_now(), "latency_ms": 3.0, "error_detail": detail}])
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_dashboard_in_chromium_shows_the_journal_as_text_and_refreshes(
        page: Any, broker: Any, server: Any, tmp_path: Path) -> None:
    b = broker("a", "b", "c")
    db = Path(b.location)
    for i in range(10):  # races: an ok and a superseded row each
        b.ask(f"question {i}", operation="triage", fastest_of=2, max_tokens=4)
    server.set_fault("a", FaultProfile(status=503))
    for i in range(4):  # a fails once, cools down, b answers
        b.ask(f"failover {i}", operation="triage", max_tokens=4)
    server.set_fault("b", FaultProfile(status=429, retry_after=30))
    for i in range(3):  # b is rate limited once, c answers
        b.ask(f"limited {i}", operation="<script>op</script>", max_tokens=4)
    journal_a_failure(db, PAYLOAD)
    b.calls()  # every row the Broker made is in the file now
    assert sum(m["failures"] for m in journal_per_model(db).values()) >= 3

    dashboard = JournalDashboard(b)
    with IpywidgetsHost([dashboard], css=css()) as host:
        page.goto(host.url)
        page.wait_for_selector("body[data-ready='1'] #w0 table.jv-calls", timeout=20_000)
        assert_page_matches_journal(page, db)

        # journal text is shown as text: the error detail, and its cause, verbatim
        details = [row["error_detail"] for row in shown(page, "recent_failures")]
        assert details[0] == PAYLOAD and len(details) >= 3
        assert "error/<img src=x" in [row["cause"] for row in shown(page, "errors")]
        assert page.locator("#w0 img, #w0 b, #w0 script").count() == 0
        assert page.evaluate("window.__xss") is None

        # more rows, then the refresh button: the page follows the journal
        server.set_fault("a", None)
        server.set_fault("b", None)
        for i in range(5):
            b.ask(f"later {i}", max_tokens=4)
        b.calls()
        total = sum(m["attempts"] for m in journal_per_model(db).values())
        page.click("#w0 button:has-text('refresh')")
        # the summary, the tables and the counter are separate widgets, each updated by its own
        # message: wait until every one the assertions read shows the second reading
        page.wait_for_function(
            """(total) => {
              const shown = (sel) => [...document.querySelectorAll(sel)];
              const counted = shown('#w0 .jv-refreshed').some((s) => s.textContent.startsWith('read 2'));
              const summary = shown('#w0 table.jv-summary tr').some(
                (tr) => tr.textContent === `attempts${total}`);
              const table = document.querySelector('#w0 table.jv-calls');
              if (!table) return false;
              const cols = [...table.querySelectorAll('thead th')].map((th) => th.textContent.trim());
              const at = cols.indexOf('attempts');
              const sum = [...table.querySelectorAll('tbody tr')].reduce(
                (acc, tr) => acc + Number(tr.children[at].textContent), 0);
              return counted && summary && sum === total;
            }""", arg=total, timeout=15_000)
        assert_page_matches_journal(page, db)
        assert dashboard.summary["attempts"] == total
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
