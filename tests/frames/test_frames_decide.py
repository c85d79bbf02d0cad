"""frames.decide over pandas: the same answers as predict_batch, one column per question with the
right dtype, abstentions missing, hooks for every row in one span per batch, errors naming the
column or the row."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from jevlaya_lab import FrameError, JevlayaError, Router
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.frames import decide, worker_models


QIDS = ("intent", "urgency", "spam")


def test_answers_equal_predict_batch_row_for_row_with_dtypes_and_abstentions(questions, tiny_dir, tickets):
    agent = Agent(tiny_dir, model_id="tiny")
    threshold = 0.5215  # the tiny model's top probabilities straddle it: some rows abstain, some not
    out = decide(tickets, questions(), agent=agent, state="body", min_confidence=threshold,
                 batch_size=3, progress=False)
    expected = agent.predict_batch(list(tickets["body"]), questions(), min_confidence=threshold)

    assert out.index.equals(tickets.index)
    assert list(out.columns) == ["intent", "intent.p", "urgency", "urgency.p", "spam", "spam.p"]
    assert isinstance(out["intent"].dtype, pd.CategoricalDtype)
    assert list(out["intent"].cat.categories) == ["refund", "bug", "other"]
    assert out["spam"].dtype == "boolean"
    assert out["urgency"].dtype == "float64" and out["intent.p"].dtype == "float64"
    abstained = 0
    for (label, row), result in zip(out.iterrows(), expected):
        for qid in QIDS:
            answer = result["answers"][qid]
            assert row[f"{qid}.p"] == pytest.approx(answer["answer_confidence"], abs=1e-9)
            if answer["abstention"] == "abstained":
                abstained += 1
                assert pd.isna(row[qid]), (label, qid)
                assert row[f"{qid}.p"] < threshold
            elif qid == "intent":
                assert row[qid] == answer["choice"]
            elif qid == "urgency":
                assert row[qid] == pytest.approx(answer["score"])
            else:
                assert row[qid] == (answer["noul"] >= 0.5)
    assert 0 < abstained < len(tickets) * len(QIDS), "the threshold must split the answers"


def test_hooks_see_every_row_in_one_context_per_batch(questions, tiny_dir, tickets):
    agent = Agent(tiny_dir, model_id="tiny")
    hook = _Spans()
    out = decide(tickets, questions(), agent=agent, state="body", batch_size=3, progress=False, hooks=[hook])
    assert len(out) == 7
    assert [len(states) for states in hook.started] == [3, 3, 1]  # one span per batch
    assert [s for states in hook.started for s in states] == list(tickets["body"])  # every row, in order
    assert hook.ended == [3, 3, 1]


class _Spans:
    def __init__(self) -> None:
        self.started: list[list] = []
        self.ended: list[int] = []

    def on_predict_start(self, ctx) -> None:
        self.started.append(list(ctx.states))

    def on_predict_end(self, ctx) -> None:
        self.ended.append(len(ctx.results))


def test_state_map_builds_dict_states(questions, tiny_dir, tickets):
    agent = Agent(tiny_dir, model_id="tiny")
    out = decide(tickets, questions(), agent=agent, state={"subject": "subject", "body": "body"},
                 progress=False)
    states = [{"subject": s, "body": b} for s, b in zip(tickets["subject"], tickets["body"])]
    expected = agent.predict_batch(states, questions())
    assert list(out["intent"]) == [r["answers"]["intent"]["choice"] for r in expected]
    assert list(out["spam.p"]) == pytest.approx([r["answers"]["spam"]["answer_confidence"] for r in expected])


def test_checkpoint_loads_once_per_process_and_progress_is_shown(questions, tiny_dir, tickets, capsys):
    first = decide(tickets, questions(), checkpoint=tiny_dir, state="body", progress=True)
    again = decide(tickets.iloc[:2], questions(), checkpoint=tiny_dir, state="body", progress=False)
    assert worker_models()["loads"][str(tiny_dir)] == 1
    pd.testing.assert_frame_equal(first.iloc[:2], again)
    err = capsys.readouterr().err
    assert "decide" in err and "7/7" in err


def test_router_adds_the_checkpoint_column(questions, tiny_dir, tiny_dir_b):
    router = Router({"english": tiny_dir, "multilingual": tiny_dir_b})
    df = pd.DataFrame({"text": ["I was charged twice for my invoice", "請求書が二重に請求されました"]})
    out = decide(df, questions(), router=router, progress=False)
    assert list(out["checkpoint"]) == ["english", "multilingual"]
    assert out["checkpoint"].dtype == "string"
    direct = router.predict_batch([{"state": t, "questions": questions()} for t in df["text"]])
    assert list(out["intent.p"]) == pytest.approx([r["answers"]["intent"]["answer_confidence"] for r in direct])


def test_bad_tables_are_errors_naming_the_column_or_the_row(questions, tiny_dir, tickets):
    agent = Agent(tiny_dir, model_id="tiny")
    with pytest.raises(FrameError, match=r"no column 'text'.*'body', 'subject'"):
        decide(tickets, questions(), agent=agent, state="text", progress=False)
    with pytest.raises(FrameError, match=r"name the column the questions read"):
        decide(tickets, questions(), agent=agent, progress=False)
    holed = tickets.copy()
    holed.loc["T-103", "body"] = None
    with pytest.raises(FrameError, match=r"row 'T-103' holds a missing value \(nan\) in column 'body', not a string") as caught:
        decide(holed, questions(), agent=agent, state="body", progress=False)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, JevlayaError)
    numbers = pd.DataFrame({"n": [1.5, 2.0]})
    with pytest.raises(FrameError, match=r"row 0 holds float 1.5 in column 'n'.*astype\(str\)"):
        decide(numbers, questions(), agent=agent, progress=False)
    with pytest.raises(FrameError, match="no rows"):
        decide(tickets.iloc[:0], questions(), agent=agent, state="body", progress=False)
    with pytest.raises(TypeError, match="exactly one of agent=, router= or checkpoint="):
        decide(tickets, questions(), agent=agent, checkpoint=tiny_dir, state="body")
    with pytest.raises(TypeError, match="pandas or Dask DataFrame"):
        decide(list(tickets["body"]), questions(), agent=agent)
    with pytest.raises(ValueError, match="min_confidence"):
        decide(tickets, questions(), agent=agent, state="body", min_confidence=2)
    assert not math.isnan(decide(tickets, questions(), agent=agent, state="body", progress=False)["spam.p"].iloc[0])
