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


def test_a_predict_result_displays_as_the_answers_card_and_stays_the_same_dict(
        agent: Any, router: Any) -> None:
    """``agent.predict(...)`` as a cell's last expression shows the answers
    card (HTML + the jevlaya JSON), and code still gets the plain dict it always got."""
    import json

    from jevlaya_lab.display import MIME

    for result in (agent.predict("My parcel is late", triage_questions(), min_confidence=0.6),
                   router.predict("My parcel is late", triage_questions())):
        assert isinstance(result, dict) and dict(result) == result
        assert json.loads(json.dumps(result)) == dict(result)
        bundle = result._repr_mimebundle_()
        assert bundle[MIME]["kind"] == "answers"
        assert [r["question"] for r in bundle[MIME]["data"]["rows"]] == list(triage_questions())
        html = bundle["text/html"]
        assert "class='jevlaya'" in html and all(q in html for q in triage_questions())


def test_rows_name_the_value_that_decided_and_the_threshold(agent: Any) -> None:
    """The shown value is the one min_confidence compared."""
    from jevlaya_lab.display import answer_rows, gate_text

    result = agent.predict("hello", triage_questions(), min_confidence=0.6)
    for row, answer in zip(answer_rows(result), result["answers"].values()):
        assert row["gated_by"] == "answer_confidence"
        assert row["confidence"] == answer["answer_confidence"] and row["threshold"] == 0.6
        assert row["abstained"] == (row["confidence"] < 0.6)
        sign = "<" if row["abstained"] else "≥"
        assert gate_text(row).startswith(f"answer_confidence {row['confidence']:.2f} {sign} 0.6 →")


def test_scores_carry_their_scale_and_checkpoints_their_short_name() -> None:
    """``0.62 on 0–3`` and ``mini-en``, not a bare number and a cache path."""
    from jevlaya_lab.display import answer_rows, answer_text, model_label

    result = {"model": "/root/.cache/jevlaya_lab/checkpoints/mini-en-c8a3b4947be6", "answers": {
        "priority": {"type": "score", "score": 0.6161, "legend": {"0": "low", "1": "normal",
                                                                   "2": "high", "3": "critical"},
                     "probabilities": {"0": 0.5, "1": 0.36, "2": 0.12, "3": 0.02},
                     "answer_confidence": 0.5, "abstention": "passed",
                     "abstention_threshold": 0.0}}}
    (row,) = answer_rows(result)
    assert answer_text(row) == "0.62 on 0–3" and row["level"] == "1: normal"
    assert model_label(result["model"]) == "mini-en" and model_label("tiny-en") == "tiny-en"
