"""A yes/no question asked with ``labels`` shows its own words on the result and on the card (and in
AnswersView's rows), not a bare yes/no."""

from __future__ import annotations

from jevlaya_lab import Agent
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.display import answer_rows
from jevlaya_lab.widgets import AnswersView

QUESTIONS = {"asks_refund": {"type": "noul", "instructions": "The customer asks for their money back.",
                             "labels": {"true": "refund", "false": "no refund"}},
             "plain": {"type": "noul", "instructions": "The customer is angry."}}


def test_labels_show_on_the_result_the_card_and_the_view(tmp_path):
    agent = Agent(make_tiny_checkpoint(tmp_path / "tiny", seed=0))
    result = agent.predict("I was charged twice, please give me my money back.", QUESTIONS)
    answer = result["answers"]["asks_refund"]
    assert answer["label"] == ("refund" if answer["noul"] >= 0.5 else "no refund")
    assert answer["labels"] == {"false": "no refund", "true": "refund"}
    assert "label" not in result["answers"]["plain"]  # without labels=, the answer is as before
    html = result._repr_mimebundle_()["text/html"]
    assert f": {answer['label']}" in html and ">refund<" in html and ">no refund<" in html
    rows = {r["question"]: r for r in answer_rows(result)}
    assert rows["asks_refund"]["answer"] == answer["label"]
    assert [b["label"] for b in rows["asks_refund"]["bars"]] == ["refund", "no refund"]
    assert [b["label"] for b in rows["plain"]["bars"]] == ["yes", "no"]
    view = AnswersView([result])
    shown = {r["question"]: r for r in view.results[0]["rows"]}
    assert shown["asks_refund"]["answer"] == answer["label"]
