"""One budget check (decisions.budget): the Router's request checks and the row encoder reject
the same values with the same error type and message shape."""

import pytest

from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.errors import BudgetError
from jevlaya_lab.decisions.router import Router

QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the user want?",
                        "criteria": ["refund", "other"]}}


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
    """Issue 15, defect 8: past the encoder's positions transformers fails with an opaque error."""
    from jevlaya_lab.decisions.agent import Agent
    from jevlaya_lab.decisions.testing import make_tiny_parts

    agent = Agent(make_tiny_parts(max_len=128), model_id="tiny")  # 128 positions
    long_state = "refund please " * 200
    with pytest.raises(BudgetError) as caught:
        agent.predict(long_state, QUESTIONS, max_len=1024)
    assert str(caught.value) == ("max_len=1024 is more than the encoder of 'tiny' reads (128 positions); "
                                 "use max_len <= 128")
    assert agent.predict(long_state, QUESTIONS, max_len=128)["answers"]["intent"]  # at the limit it answers
