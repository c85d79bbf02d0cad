"""One budget check (decisions.budget): the Router's request checks and the row encoder reject
the same values with the same error type and message shape."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.errors import BudgetError
from jevlaya_lab.decisions.router import Router
from jevlaya_lab.decisions.testing import make_tiny_parts

QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the user want?",
                        "criteria": ["refund", "other"]}}
TINY_AGENT = Agent(make_tiny_parts(max_len=128), model_id="tiny")  # an encoder of 128 positions


@pytest.mark.parametrize("value", [0, -3, 2.5, "256", True])
def test_bad_budgets_name_the_field_value_and_fix(value):
    with pytest.raises(BudgetError) as caught:
        check_budget("max_len", value)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == f"max_len must be a positive int, got {value!r}; e.g. max_len=256"


def test_none_passes_only_where_it_means_the_default():
    assert check_budget("max_len", None, optional=True) is None
    assert check_budget("max_len", 64, optional=True) == 64
    with pytest.raises(BudgetError, match="must be a positive int, got None"):
        check_budget("max_len", None)


def test_router_rejects_a_bad_budget_per_request_and_per_call_before_loading_anything():
    router = Router()
    with pytest.raises(BudgetError, match=r"\['max_len'\] must be a positive int or None, got 0"):
        router.predict_batch([{"state": "hi", "questions": QUESTIONS, "max_len": 0}])
    with pytest.raises(BudgetError, match="head_max_len must be a positive int or None, got -1"):
        router.predict_batch([{"state": "hi", "questions": QUESTIONS}], head_max_len=-1)
    assert router.loaded == ()


def test_max_len_beyond_the_encoders_positions_names_the_limit():
    """Past the encoder's positions transformers fails with an opaque error."""
    agent = TINY_AGENT
    long_state = "refund please " * 200
    with pytest.raises(BudgetError) as caught:
        agent.predict(long_state, QUESTIONS, max_len=1024)
    assert str(caught.value) == ("max_len=1024 is more than the encoder of 'tiny' reads (128 positions); "
                                 "use max_len <= 128")
    assert agent.predict(long_state, QUESTIONS, max_len=128)["answers"]["intent"]  # at the limit it answers


@settings(max_examples=40, deadline=None)
@given(max_len=st.integers(-3, 5000) | st.none(), head_max_len=st.integers(-3, 400) | st.none(),
       words=st.integers(0, 120))
def test_any_budget_gives_answers_or_a_budget_error(max_len, head_max_len, words):
    """Property: whatever budgets a caller passes, the answer is a result or a
    BudgetError naming the field - never an error from deep inside torch or transformers."""
    try:
        result = TINY_AGENT.predict("refund please " * words or "hi", QUESTIONS, max_len=max_len,
                                    head_max_len=head_max_len)
    except BudgetError as exc:
        assert str(exc).startswith(("max_len", "head_max_len")), exc
    else:
        assert set(result["answers"]) == {"intent"}
