"""A state or an option label the encoder cannot read is a documented error naming the field:
a lone surrogate in a state is a ``StateError`` (a ``ValueError``) naming the state's index and
the place inside it, not the tokenizer's opaque ``TypeError``; in an option label or
description a ``QuestionError`` naming the question and the label; a state nested 5,000 lists
deep a ``StateError`` naming the depth limit, not a ``RecursionError``."""

from __future__ import annotations

import pytest

from jevlaya_lab import QuestionError, StateError
from jevlaya_lab.decisions.encoding import MAX_STATE_DEPTH

QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "tech": "bugs"}}}


def _deep(n: int) -> list:
    value: list = ["x"]
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize("state, where", [
    ("bad \ud800", "state 1"),
    ({"subject": "ok", "body": "bad \ud800"}, "state 1['body']"),
    ({"bad \ud800": 1}, "state 1 key"),
    ([{"role": "user", "content": "\ud800"}], "state 1[0]['content']"),
])
def test_a_lone_surrogate_in_a_state_names_the_state(tiny_agent, state, where) -> None:
    with pytest.raises(StateError, match=where.replace("[", r"\[")) as info:
        tiny_agent.predict_batch(["fine", state], QUESTIONS)
    assert isinstance(info.value, ValueError) and "Unicode" in str(info.value)
    with pytest.raises(StateError):
        tiny_agent.predict(state, QUESTIONS)
    assert tiny_agent.predict("fine", QUESTIONS)  # nothing is left broken


def test_a_state_nested_5000_deep_names_the_depth_limit(tiny_agent) -> None:
    with pytest.raises(StateError, match=f"MAX_STATE_DEPTH={MAX_STATE_DEPTH}") as info:
        tiny_agent.predict(_deep(5000), QUESTIONS)
    assert "state 0" in str(info.value)
    with pytest.raises(StateError, match="MAX_STATE_DEPTH"):
        tiny_agent.predict({"a": _deep(5000)}, {})  # no questions: still validated
    assert tiny_agent.predict(_deep(MAX_STATE_DEPTH - 2), QUESTIONS)


@pytest.mark.parametrize("questions, where", [
    ({"team": {"type": "choice", "instructions": "Which?", "criteria": ["ok", "bad \ud800"]}},
     "label 'bad"),
    ({"team": {"type": "choice", "instructions": "Which?",
               "criteria": {"ok": "fine", "b": "bad \ud800"}}}, "criteria['b']"),
    ({"team": {"type": "choice", "instructions": "bad \ud800", "criteria": ["a", "b"]}},
     "instructions"),
    ({"team": {"type": "noul", "instructions": "Is it?",
               "labels": {"false": "no", "true": "y\ud800"}}}, "labels['true']"),
    ({"team": {"type": "score", "instructions": "How?", "criteria": ["low", _deep(5000)]}},
     "criteria[1]"),
])
def test_an_unreadable_option_names_the_question_and_field(tiny_agent, questions, where) -> None:
    with pytest.raises(QuestionError, match=r"question 'team'.*" + where.replace("[", r"\[")):
        tiny_agent.predict("a state", questions)
