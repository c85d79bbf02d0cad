"""AnswersView through its traits, on a real tiny Agent."""

from __future__ import annotations

from typing import Any

import pytest

from jevlaya_lab.decisions.presets import triage_questions
from jevlaya_lab.widgets import AnswersView

from .conftest import XSS


def test_answers_view_has_one_row_per_question_with_probability_bars(agent: Any) -> None:
    states = ["my card was charged twice", "where is my parcel?"]
    view = AnswersView.ask(agent, states, triage_questions())
    results = view.get_state()["results"]
    assert len(results) == 2 and results[0]["model"] == "tiny-en"
    assert results[1]["state"] == states[1]
    by_q = {r["question"]: r for r in results[0]["rows"]}
    assert set(by_q) == set(triage_questions())
    assert sum(b["p"] for b in by_q["intent"]["bars"]) == pytest.approx(1.0, abs=1e-3)
    top = max(by_q["intent"]["bars"], key=lambda b: b["p"])
    assert by_q["intent"]["answer"] == top["label"]
    noul = by_q["is_urgent"]
    assert [b["label"] for b in noul["bars"]] == ["yes", "no"]
    assert noul["answer"] == ("yes" if noul["bars"][0]["p"] >= 0.5 else "no")
    assert len(by_q["priority"]["bars"]) == 4 and by_q["priority"]["bars"][0]["label"].startswith("0: low")


def test_answers_view_marks_abstentions_under_min_confidence(agent: Any) -> None:
    view = AnswersView(agent.predict_batch(["x"], triage_questions(), min_confidence=0.99))
    rows = view.results[0]["rows"]
    assert rows and all(r["abstained"] for r in rows)
    relaxed = AnswersView(agent.predict_batch(["x"], triage_questions(), min_confidence=0.0))
    assert not any(r["abstained"] for r in relaxed.results[0]["rows"])


def test_answers_view_keeps_state_text_as_text(agent: Any) -> None:
    view = AnswersView(agent.predict_batch([XSS], triage_questions()), states=[XSS])
    assert view.results[0]["state"] == XSS  # the front end appends it as a text node


def test_answers_view_bad_input_names_the_field(agent: Any) -> None:
    results = agent.predict_batch(["a", "b"], triage_questions())
    with pytest.raises(ValueError, match="states: 1 states for 2 results"):
        AnswersView(results, states=["a"])
    with pytest.raises(TypeError, match="'answers' mapping"):
        AnswersView([{"model": "x"}])


def test_views_have_a_plain_text_repr_for_reports_and_plain_python(agent: Any, router: Any) -> None:
    from jevlaya_lab.widgets import HookTimeline, RoutingView

    view = AnswersView(agent.predict_batch(["x"], triage_questions()))
    assert repr(view).startswith("AnswersView(1 results; first: intent=")
    assert repr(RoutingView(router, "Где моя посылка?")).startswith("RoutingView(→ multilingual")
    assert repr(HookTimeline()) == "HookTimeline(0 lanes, 0 events)"
