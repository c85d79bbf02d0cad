"""render.mimebundle: self-contained, escaped HTML plus application/vnd.jevlaya+json."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jevlaya_lab.decisions.presets import triage_questions
from jevlaya_lab.widgets.render import MIME, mimebundle, rich

from .conftest import XSS


def test_routing_decision_bundle_has_card_json_and_escaped_html(router: Any) -> None:
    decision = router.route({"message": f"Привет, мир {XSS}"})
    bundle = mimebundle(decision)
    payload = bundle[MIME]
    assert payload["kind"] == "decision"
    assert payload["data"]["model"] == "multilingual"
    assert "Cyrillic" in {s["label"] for s in payload["data"]["scripts"]}
    json.dumps(payload)
    assert "<script" not in bundle["text/html"] and "<img" not in bundle["text/html"]


def test_answers_bundle_escapes_labels_and_lists_every_question(agent: Any) -> None:
    questions = {"pick": {"type": "choice", "instructions": "Which?",
                          "criteria": [XSS, "plain"]}, **triage_questions()}
    results = agent.predict_batch(["a state", XSS], questions)
    bundle = mimebundle(results)
    assert bundle[MIME]["kind"] == "answers_list"
    rows = bundle[MIME]["data"][0]["rows"]
    assert [r["question"] for r in rows] == list(questions)
    assert {b["label"] for b in rows[0]["bars"]} == {XSS, "plain"}
    html = bundle["text/html"]
    assert XSS not in html and "&lt;script&gt;" in html


def test_llm_result_bundle_and_rich_wrapper(broker: Any) -> None:
    b = broker("a")
    result = b.ask("hi", max_tokens=4)
    shown = rich(result)
    assert shown.data()["llm_name"] == "a" and shown.data()["call_id"] == result.call_id
    assert shown._repr_mimebundle_()[MIME]["kind"] == "llm_result"


def test_unknown_objects_get_a_type_error_naming_what_is_accepted() -> None:
    with pytest.raises(TypeError, match="obj=42: no renderer; pass a routing Decision"):
        rich(42)
