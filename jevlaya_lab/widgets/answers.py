"""``AnswersView``: probability bars per question of Agent/Router results.

Each result becomes a card: the checkpoint's short name (full path on hover), the state
(shortened), and per question its type, the answer (a score with its scale, ``0.62 on 0–3``, and
nearest level), the answer's probability, the value ``min_confidence`` compared with the
threshold it carries (``confidence 0.39 < 0.6 → abstained``, red when abstained), and one bar
per option (``noul``: yes/no; ``score``: one bar per level with its legend).
State lives in the ``results`` trait (``get_state()["results"]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anywidget
import traitlets

from jevlaya_lab.widgets.assets import css, esm
from jevlaya_lab.widgets.render import answer_rows, jsonable, model_label

STATE_CHARS = 300


def state_preview(state: Any, limit: int = STATE_CHARS) -> str:
    """A one-line text preview of a state (str or JSON-like), cut to ``limit`` characters."""
    import json

    text = state if isinstance(state, str) else json.dumps(jsonable(state), ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AnswersView(anywidget.AnyWidget):
    """Show ``agent.predict_batch(states, questions)`` (or one ``predict`` result)."""

    _esm = esm("answers")
    _css = css()
    results = traitlets.List(help="[{model, model_path, state, rows: [{question, type, answer, "
                             "scale, level, gated_by, confidence, threshold, top_p, abstained, "
                             "bars}]}]").tag(sync=True)

    def __init__(self, results: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
                 *, states: Sequence[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if results is not None:
            self.show(results, states=states)

    def show(self, results: Sequence[Mapping[str, Any]] | Mapping[str, Any], *,
             states: Sequence[Any] | None = None) -> None:
        """Replace what is shown; ``states`` (same length) labels each card."""
        items = [results] if isinstance(results, Mapping) else list(results)
        if states is not None and len(states) != len(items):
            raise ValueError(f"states: {len(states)} states for {len(items)} results; pass one "
                             "state per result (the states given to predict_batch)")
        self.results = [
            {"model": model_label(r.get("model", "")), "model_path": str(r.get("model", "")),
             "state": None if states is None else state_preview(states[i]),
             "rows": answer_rows(r)}
            for i, r in enumerate(items)]

    @classmethod
    def ask(cls, agent: Any, states: Sequence[Any], questions: Mapping[str, Any],
            **predict_kwargs: Any) -> AnswersView:
        """Run ``agent.predict_batch(states, questions, **predict_kwargs)`` and show it."""
        return cls(agent.predict_batch(list(states), questions, **predict_kwargs), states=states)

    def __repr__(self) -> str:
        first = self.results[0]["rows"] if self.results else []
        shown = ", ".join(f"{r['question']}={r['answer']}" for r in first[:4])
        return f"AnswersView({len(self.results)} results; first: {shown or '-'})"
