"""LabelView: labels reach Python, held-out accuracy and the reliability diagram follow, the adapt
button adapts and counts changed answers; in Python and in headless Debian Chromium."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.testing import make_tiny_parts
from jevlaya_lab.widgets import LabelView

from .browser_host import WidgetHost
from .conftest import needs_chromium

PAYLOAD = '<img src=x onerror="window.__xss=1">'
QUESTIONS = {
    "money": {"type": "noul", "instructions": "The message is about money."},
    "team": {"type": "choice", "instructions": "Who handles this?", "criteria": ["billing", "technical"]},
    "level": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
}


def states(n: int = 12) -> list[tuple[str, bool]]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        money = i % 2 == 0
        words = rng.sample(("refund invoice bill price" if money else "crash error bug login").split(), 3)
        out.append((" ".join(words + ["please"]), money))
    return out


def wait_for_label(view: LabelView, row: int, question: str, seconds: float = 10) -> None:
    """Until the browser's label of ``question`` for ``row`` has reached Python (a message after the
    ones before it), or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while question not in view.labels.get(row, {}) and time.monotonic() < deadline:
        time.sleep(0.05)


@contextmanager
def shown(page: Any, view: LabelView) -> Iterator[None]:
    """``view`` served on loopback and drawn in ``page`` (its first render done)."""
    with WidgetHost([view]) as host:
        page.goto(host.url)
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        yield


@pytest.fixture(scope="module")
def agent() -> Agent:
    return Agent(make_tiny_parts(seed=1, similarity_prior={"rank": 4, "joint_head": False}), model_id="tiny",
                 device="cpu")


def test_labels_update_held_out_stats_and_adapt_counts_changes(agent: Agent) -> None:
    data = states()
    view = LabelView(agent, [s for s, _ in data], QUESTIONS)
    assert view.stats["money"]["n"] == 0 and view.stats["money"]["accuracy"] is None
    for i, (_, money) in enumerate(data[:8]):
        view.label(i, "money", "yes" if money else "no")
        view.label(i, "team", "billing" if money else "technical")
    view.label(0, "level", "2")
    assert view.labels[0] == {"money": True, "team": "billing", "level": 2}
    stats = view.stats["money"]
    assert stats["n"] == 8 and sum(b["n"] for b in stats["bins"]) == 8
    right = sum(view.rows[i]["answers"]["money"]["value"] == ("yes" if m else "no")
                for i, (_, m) in enumerate(data[:8]))
    assert stats["accuracy"] == right / 8
    with pytest.raises(ValueError, match="not an option"):
        view.label(1, "team", "sales")
    adapted = view.adapt()
    assert view.agent is adapted and adapted is not agent
    assert view.status["adaptations"] == 1 and isinstance(view.status["changed"], int)
    assert set(view.status["cv"]) == {"money", "team"}  # one score label: not adapted, no error
    assert view.status["parts"] == {"money": "own", "team": "own", "level": "own"}  # no open part here
    # the labels it was fitted on no longer count as held out; new ones do
    assert view.stats["money"]["n"] == 0
    for i in (8, 9, 10, 11):
        view.label(i, "money", "yes" if data[i][1] else "no")
    assert view.stats["money"]["n"] == 4 and view.stats["money"]["accuracy"] == 1.0
    assert all(view.rows[i]["fitted"]["money"] for i in range(8))


def test_adapting_before_two_kinds_of_answer_shows_why_in_the_view(agent: Agent) -> None:
    view = LabelView(agent, ["a", "b"], {"money": QUESTIONS["money"]})
    view.label(0, "money", "yes")
    view.label(1, "money", "yes")
    assert view.adapt() is None
    assert "two different answers" in view.status["error"] and view.agent is agent


@needs_chromium
@pytest.mark.timeout(120)
def test_clicks_in_chromium_reach_python(page: Any, agent: Agent) -> None:
    data = states(8)
    view = LabelView(agent, [s for s, _ in data] + [PAYLOAD], QUESTIONS)
    with shown(page, view):
        assert page.locator("#w0 .jv-label-table tbody tr").count() == 9
        assert page.inner_text("#w0 tr[data-row='8'] .jv-state") == PAYLOAD
        for i, (_, money) in enumerate(data):
            row = f"#w0 tr[data-row='{i}']"
            page.click(f"{row} td[data-question='money'] button[data-value='{'yes' if money else 'no'}']")
            page.click(f"{row} td[data-question='team'] button[data-value='{'billing' if money else 'technical'}']")
        # every click's label has come back and the table is drawn anew before the score is typed:
        # a redraw replaces the input, and a value typed into the old one never reaches Python
        page.wait_for_function("document.querySelector(\"#w0 .jv-q-stats[data-question='money'] .jv-heldout\")"
                               ".textContent.includes('on 8 labels')", timeout=15_000)
        page.fill("#w0 tr[data-row='0'] .jv-score-input", "2")
        page.press("#w0 tr[data-row='0'] .jv-score-input", "Enter")
        assert view.labels[3] == {"money": False, "team": "technical"}
        wait_for_label(view, 0, "level", 15)  # the typed score is its own message, after the clicks'
        assert view.labels[0]["level"] == 2
        bins = page.locator("#w0 .jv-q-stats[data-question='money'] .jv-rel-col")
        assert bins.count() == 5
        assert sum(int(bins.nth(i).get_attribute("data-n")) for i in range(5)) == 8
        assert page.get_attribute("#w0 tr[data-row='3'] td[data-question='team'] button[data-value='technical']",
                                  "aria-pressed") == "true"
        page.click("#w0 button.jv-adapt")
        page.wait_for_function("document.querySelector('#w0 .jv-changed').textContent.includes('answers changed')",
                               timeout=30_000)
        assert view.status["adaptations"] == 1
        assert f"{view.status['changed']} answers changed" in page.inner_text("#w0 .jv-changed")
        assert "cross-validated" in page.inner_text("#w0 .jv-q-stats[data-question='money']")
        assert page.locator("#w0 img").count() == 0 and page.evaluate("window.__xss") is None


@needs_chromium
@pytest.mark.timeout(90)
def test_a_click_survives_a_redraw_between_press_and_release(page: Any, agent: Agent) -> None:
    """A label's answer redraws the whole view; arriving while the mouse button is down on the
    adapt button, it would replace that button before the release, and Chromium would send the
    click to no button at all. The view holds a redraw while a button is pressed in it and draws it
    after the click."""
    data = states(8)
    view = LabelView(agent, [s for s, _ in data], QUESTIONS)
    for i, (_, money) in enumerate(data):
        view.label(i, "money", "yes" if money else "no")
    with shown(page, view):
        box = page.locator("#w0 button.jv-adapt").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        view.label(7, "team", "technical")  # its answer reaches the browser while the button is down
        team = "#w0 tr[data-row='7'] td[data-question='team'] button[data-value='technical']"
        page.wait_for_function(  # the redraw arrived: held (or, without the hold, drawn)
            f"document.querySelector('#w0').dataset.held === '1' || "
            f"document.querySelector(\"{team}\").getAttribute('aria-pressed') === 'true'", timeout=10_000)
        page.mouse.up()
        page.wait_for_function("document.querySelector('#w0 .jv-changed').textContent.includes('answers changed')",
                               timeout=30_000)
        assert view.status["adaptations"] == 1
        page.wait_for_selector(f"{team}[aria-pressed='true']", timeout=10_000)  # the held redraw, drawn after
        assert page.evaluate("document.querySelector('#w0').dataset.held") != "1"


@needs_chromium
@pytest.mark.timeout(90)
def test_a_level_being_typed_survives_a_redraw_and_is_sent_on_enter_or_leaving(page: Any, agent: Agent) -> None:
    view = LabelView(agent, [s for s, _ in states(4)], QUESTIONS)
    with shown(page, view):
        page.fill("#w0 tr[data-row='1'] .jv-score-input", "1")
        old = page.query_selector("#w0 tr[data-row='1'] .jv-score-input")
        view.label(2, "money", "yes")  # another label's answer redraws the whole table meanwhile
        page.wait_for_selector("#w0 tr[data-row='2'] td[data-question='money'] button[data-value='yes']"
                               "[aria-pressed='true']", timeout=10_000)
        assert not old.evaluate("e => e.isConnected")  # the input typed into was replaced ...
        new = "#w0 tr[data-row='1'] .jv-score-input"
        assert page.input_value(new) == "1"  # ... and the new one holds what was typed, with the cursor
        assert page.evaluate("document.activeElement.dataset.key") == "1|level"
        page.wait_for_timeout(300)  # time for a label the redraw might have sent to arrive
        assert 1 not in view.labels  # the replaced input did not send the draft: only Enter does
        page.keyboard.press("Enter")
        wait_for_label(view, 1, "level")
        assert view.labels[1] == {"level": 1}
        page.fill("#w0 tr[data-row='2'] .jv-score-input", "0")
        page.keyboard.press("Tab")  # no Enter: leaving the field sends it too
        wait_for_label(view, 2, "level")
        assert view.labels[2] == {"money": True, "level": 0}
        page.fill("#w0 tr[data-row='3'] .jv-score-input", "2")
        view.label(0, "money", "no")  # a redraw between typing and leaving: the field left is the redrawn one
        page.wait_for_selector("#w0 tr[data-row='0'] td[data-question='money'] button[data-value='no']"
                               "[aria-pressed='true']", timeout=10_000)
        assert page.evaluate("document.activeElement.dataset.key") == "3|level"
        page.keyboard.press("Tab")  # Chromium fires no `change` on an input whose value a script set
        wait_for_label(view, 3, "level")
        assert view.labels[3] == {"level": 2}


@needs_chromium
@pytest.mark.timeout(90)
def test_the_view_says_which_head_answers_a_question_before_and_after_adapting(page: Any) -> None:
    from jevlaya_lab.decisions.testing import OPEN_ANCHORS, tiny_open_parts

    both = Agent(tiny_open_parts(), model_id="tiny-open", device="cpu")
    questions = {"own": {"type": "noul", "instructions": OPEN_ANCHORS[0]},  # the own head's wording
                 "photo": {"type": "noul", "instructions": "The writer attaches a photograph."}}  # open
    data = states(8)
    view = LabelView(both, [s for s, _ in data], questions)
    for i, (_, money) in enumerate(data):
        view.label(i, "own", "yes" if money else "no")
        view.label(i, "photo", "yes" if i % 3 == 0 else "no")
    assert view.status["parts"] == {"own": "own", "photo": "open"}
    with shown(page, view):
        assert "(noul · open part)" in page.inner_text("#w0 .jv-q-stats[data-question='photo']")
        assert "open part" not in page.inner_text("#w0 .jv-q-stats[data-question='own']")
        page.click("#w0 button.jv-adapt")
        page.wait_for_function("document.querySelector('#w0 .jv-changed').textContent.includes('answers changed')",
                               timeout=30_000)
        assert view.agent.adaptation_report["photo"].part == "open"  # fitted on the head that answers it
        assert view.status["parts"] == {"own": "own", "photo": "open"}
        assert "(noul · open part)" in page.inner_text("#w0 .jv-q-stats[data-question='photo']")
        assert "open part" not in page.inner_text("#w0 .jv-q-stats[data-question='own']")
        assert "cross-validated" in page.inner_text("#w0 .jv-q-stats[data-question='own']")


@needs_chromium
@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_statement_the_labels_turn_round_says_so_in_the_view(page: Any) -> None:
    """``mini-en`` reads "None of our products has failed them." upside down on the hand-written
    messages; eight labels (clicked in Chromium) turn it round when adapt is pressed, and the
    view says so beside the question (``status["turned"]``)."""
    import json
    from pathlib import Path

    from jevlaya_lab import load

    data = Path(__file__).parents[1] / "data" / "user_questions" / "en_states.json"
    messages = json.loads(data.read_text(encoding="utf-8"))["states"]
    holds = [m["text"] for m in messages if "broken" not in m["tags"]][:4]
    fails = [m["text"] for m in messages if "broken" in m["tags"]][:4]
    question = {"failed": {"type": "noul", "instructions": "None of our products has failed them."}}
    view = LabelView(load("mini-en", device="cpu"), holds + fails, question)
    with shown(page, view):
        for i in range(8):
            page.click(f"#w0 tr[data-row='{i}'] td[data-question='failed'] button[data-value='{'yes' if i < 4 else 'no'}']")
        page.wait_for_function("document.querySelector(\"#w0 .jv-q-stats[data-question='failed'] .jv-heldout\")"
                               ".textContent.includes('on 8 labels')", timeout=15_000)
        assert "turned" not in page.inner_text("#w0 .jv-q-stats[data-question='failed']")
        page.click("#w0 button.jv-adapt")
        page.wait_for_function("document.querySelector('#w0 .jv-changed').textContent.includes('answers changed')",
                               timeout=60_000)
        assert view.status["turned"] == ["failed"], view.agent.adaptation_report
        assert "turned round" in page.inner_text("#w0 .jv-q-stats[data-question='failed'] .jv-turned")
