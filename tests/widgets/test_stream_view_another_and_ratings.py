"""StreamView: another() exhausted says why; the rating counter counts answers (a re-rating replaces
its rating) and says which answer got which."""

from __future__ import annotations

from typing import Any

from jevlaya_lab.widgets import StreamView


def test_exhausted_another_says_why_and_ratings_count_answers(broker: Any) -> None:
    b = broker("a", "b")
    view = StreamView(b, "hello", max_tokens=4)
    assert view.wait(30)
    shown = view.stream.llm_name
    view._on_button(view, {"action": "rate", "score": 1.0}, [])
    view._on_button(view, {"action": "rate", "score": 0.0}, [])  # the same answer, rated again
    assert len(view.ratings) == 1 and view.ratings[0]["score"] == 0.0
    assert view.ratings[0]["answer"] == "shown" and view.ratings[0]["model"] == shown
    view._on_button(view, {"action": "another"}, [])
    other = view.answers[0]["model"]
    view._on_button(view, {"action": "rate", "score": 1.0, "answer": 0}, [])
    assert [(r["answer"], r["model"], r["score"]) for r in view.ratings] == [
        ("shown", shown, 0.0), ("another() #1", other, 1.0)]
    view._on_button(view, {"action": "another"}, [])
    assert view.error == f"another(): no further answer: every model in the pool has answered ({shown}, {other})"
    view.close()


def test_exhausted_another_names_a_model_that_is_cooling(broker: Any, server: Any) -> None:
    from jevlaya_lab.local import FaultProfile

    server.set_fault("b", FaultProfile(status=503))
    b = broker("a", "b")
    view = StreamView(b, "hello", max_tokens=4)
    assert view.wait(30)
    view._on_button(view, {"action": "another"}, [])
    assert view.error.startswith("another(): no further answer: a answered; b is cooling down until "), view.error
    view.close()
