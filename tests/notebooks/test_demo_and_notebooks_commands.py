"""`jevlaya-lab demo` (the offline tour into reports/) and `jevlaya-lab notebooks`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jevlaya_lab.cli import main
from jevlaya_lab.notebooks import TOUR

from ..widgets.conftest import CHROMIUM, CHROMIUM_FLAGS


@pytest.mark.timeout(300)
def test_demo_writes_an_html_report_with_the_views_drawn_offline(tmp_path: Path) -> None:
    """The report is nbconvert's HTML of the executed tour (markdown rendered,
    not raw) with the widget state saved, and the views themselves (answers cards, routing
    card, timeline, streamed text) drawn from it in a browser with no network; the report's
    path is the last line printed."""
    out = tmp_path / "reports"
    # run as `make demo` runs it, piped: each step must arrive as it runs, not all at the end
    proc = subprocess.Popen([sys.executable, "-m", "jevlaya_lab.cli", "demo", "--fast",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                                            "PYTHONUNBUFFERED": ""})
    with proc.stdout:  # type: ignore[union-attr]  # closed here, not left to the collector
        arrived = [(time.monotonic(), line.rstrip("\n")) for line in proc.stdout]  # type: ignore[union-attr]
    assert proc.wait(timeout=30) == 0, "\n".join(line for _, line in arrived)
    steps = [(t, line) for t, line in arrived if re.match(r"\s+\[\s*\d+/\d+\] ", line)]
    total = int(re.search(r"/(\d+)\]", steps[0][1]).group(1))
    assert len(steps) == total >= 5, steps
    assert steps[-1][0] - steps[0][0] > 1.0, "the steps came all at once (not flushed as they ran)"
    assert arrived[-1][0] - steps[0][0] > 1.0
    report = json.loads((out / "demo.json").read_text())
    assert report["notebook"] == TOUR and report["checks"] and all(report["checks"].values())
    executed = Path(report["output"])
    assert executed == out / f"{TOUR}.ipynb" and executed.is_file()
    assert "application/vnd.jupyter.widget-state+json" in json.loads(
        executed.read_text())["metadata"]["widgets"]
    html = (out / "demo.html").read_text()
    assert "# Quickstart tour" not in html and "**System 1 decisions**" not in html
    assert "AnswersView(" not in html.split("widget-state+json")[0]
    assert not re.search(r"<script[^>]*src=[\"']https?://", html), "a remote script"
    assert arrived[-1][1] == f"report: {out / 'demo.html'}"
    assert "A snapshot, not a live notebook." in html

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing (.ci/run installs it); the report's views are "
                    "checked in it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page()
            errors: list[str] = []
            remote: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route("**/*", lambda r: (remote.append(r.request.url), r.abort()) if not
                       r.request.url.startswith(("file:", "blob:", "data:")) else r.continue_())
            page.goto((out / "demo.html").as_uri())
            page.wait_for_selector("body[data-views-drawn='yes']", timeout=30_000)
            assert page.locator("h1", has_text="Quickstart tour").count() == 1
            assert page.locator(".jv-answers .jv-card").count() == 6  # two views of 3 states
            assert page.locator(".jv-routing .jv-model").inner_text() == "→ multilingual"
            assert page.locator(".jv-timeline .jv-lane").count() >= 2
            assert page.locator(".jv-stream .jv-stream-text").first.inner_text().strip()
            assert page.locator(".jv-stream .jv-status").inner_text() == "status: done"
            assert not errors and not remote, (errors, remote)
            # a snapshot shows no control it cannot honour: no another()/rating button, no
            # routing box to type in (its state stays as text); each such view says why
            assert page.locator(".jv-stream button, .jv-routing textarea, .jv-answers button").count() == 0
            assert page.locator(".jv-snapshot-note").count() >= 2
            # the LLM card and the streamed text wrap between words, never inside one
            for text in page.locator(".jv-stream .jv-stream-text, .jv-card pre").all():
                style = text.evaluate("e => [getComputedStyle(e).wordBreak, getComputedStyle(e).overflowWrap]")
                assert style[0] != "break-all" and style[1] in ("break-word", "anywhere", "normal"), style
        finally:
            browser.close()


def test_notebooks_lists_the_tutorials(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notebooks"]) == 0
    listed = capsys.readouterr().out.split()
    assert any(line.endswith(f"{TOUR}.ipynb") for line in listed) and len(listed) >= 5


def test_notebooks_unknown_name_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notebooks", "nope"]) == 2
    err = capsys.readouterr().err
    assert "notebook='nope': not found" in err and TOUR in err
