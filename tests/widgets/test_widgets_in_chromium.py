"""The real front end in a real browser: headless Debian Chromium (never a downloaded one)
renders the views fed by real engines; XSS payloads in states and model text render as text;
typing routes, buttons reach Python; a screenshot is kept for a human look."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab import analysis
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.presets import triage_questions
from jevlaya_lab.decisions.testing import OPEN_ANCHORS, tiny_open_parts
from jevlaya_lab.widgets import AnswersView, HookTimeline, RoutingView, StreamView

from .browser_host import WidgetHost
from .conftest import needs_chromium

PAYLOAD = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'

pytestmark = needs_chromium


@pytest.mark.timeout(120)
def test_views_render_in_chromium_with_payloads_as_text(page: Any, router: Any, agent: Any,
                                                        broker: Any, tmp_path: Path) -> None:
    routing = RoutingView(router, f"Здравствуйте! {PAYLOAD}")
    answers = AnswersView(agent.predict_batch([PAYLOAD], triage_questions()), states=[PAYLOAD])
    both = Agent(tiny_open_parts())  # a checkpoint with an open part: its answers say which part read them
    opened = AnswersView(both.predict_batch(["my parcel is late"], {
        "own": {"type": "noul", "instructions": OPEN_ANCHORS[0]},
        "new": {"type": "noul", "instructions": "The writer attaches a photograph."}}))
    timeline = HookTimeline(throttle=0)
    agent.predict_batch(["one", "two"], triage_questions(), hooks=[timeline])
    agent.predict_batch(["three"], triage_questions(), hooks=[timeline])
    b = broker("a", "b")
    stream = StreamView(b, PAYLOAD, max_tokens=6)
    assert stream.wait(30)
    journal = analysis.load_journal(b)
    figures = [analysis.tokens_figure(journal).to_html(full_html=False, include_plotlyjs=True),
               analysis.latency_figure(journal).to_html(full_html=False, include_plotlyjs=False)]

    with WidgetHost([routing, answers, timeline, stream, opened], extra=figures) as host:
        page.goto(host.url)
        page.wait_for_selector("body[data-ready='5']", timeout=20_000)

        # routing card: chosen checkpoint, reason, and the payload only as text
        assert page.inner_text("#w0 .jv-model") == "→ multilingual"
        assert "Cyrillic" in page.inner_text("#w0 .jv-reason")
        assert page.input_value("#w0 textarea").endswith(PAYLOAD)
        # answers: one question block per question; the state shown verbatim
        assert page.locator("#w1 .jv-q").count() == len(triage_questions())
        assert page.inner_text("#w1 .jv-state") == PAYLOAD
        assert page.locator("#w4 .jv-type").all_text_contents() == ["(noul)", "(noul · open part)"]
        # timeline: one lane per run
        assert page.locator("#w2 .jv-lane").count() == len(timeline.lanes()) == 2
        hover = page.get_attribute("#w2 .jv-lane .jv-span", "title")
        assert "model: tiny-en" in hover and "elapsed:" in hover and "usage:" in hover
        # stream: prompt as text, one winning lane with text
        assert PAYLOAD in page.inner_text("#w3 .jv-stream")
        assert page.locator("#w3 .jv-stream-lane[data-state='won']").count() == 1

        # plots from the journal analysis, drawn by the plotly.js shipped in the package
        page.wait_for_selector(".extra .js-plotly-plot .main-svg", timeout=20_000)
        assert page.locator(".extra .js-plotly-plot").count() == 2
        legend = page.locator(".extra .js-plotly-plot").first.locator(".legendtext")
        assert sorted(legend.all_text_contents()) == ["completion", "prompt"]

        # nothing from the payload became markup or ran
        assert page.locator(".slot img, .slot script").count() == 0
        assert page.evaluate("window.__xss") is None

        # typing in the box routes in Python and the card follows
        page.fill("#w0 textarea", "Hello, my parcel is late and I would like a refund please.")
        page.wait_for_function(
            "document.querySelector('#w0 .jv-model').textContent === '→ english'", timeout=10_000)
        assert routing.decision["model"] == "english"

        # the another() button reaches the stream in Python
        page.click("#w3 button:has-text('another()')")
        page.wait_for_function("document.querySelectorAll('#w3 .jv-stream-text').length >= 2",
                               timeout=15_000)
        assert [a["model"] for a in stream.answers] == ["b"]

        shot = tmp_path / "widgets.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        keep = os.environ.get("JEVLAYA_SCREENSHOT")
        if keep:
            shutil.copy(shot, keep)
    stream.close()
