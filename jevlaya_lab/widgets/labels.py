"""``LabelView``: label the model's answers in a table, watch held-out accuracy, adapt with a click.

The view shows an Agent's answers to ``questions`` for a table of states. Per state and question
the user clicks the right answer (an option of a choice, yes or no) or types a score's level; the
label goes to Python at once (``view.labels``). After every label the view redraws, per question,
the **held-out** accuracy and ECE of the model in use on the labels it was not fitted on (before
the first adaptation: every label; after one: the labels given since), and a reliability diagram
over those labels (confidence bins against how often the answer was right). The ``adapt`` button
runs ``agent.adapt`` on every label so far, answers all states again with the new Agent and shows
how many answers changed, with the cross-validated accuracy the adaptation reports.

State lives in synced traits (``rows``, ``questions_info``, ``stats``, ``status``); the buttons
send custom messages, so the same methods (:meth:`LabelView.label`, :meth:`LabelView.adapt`) serve
clicks and code. ``view.agent`` is the Agent in use (the adapted one after ``adapt``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anywidget
import traitlets

from jevlaya_lab.widgets.answers import state_preview
from jevlaya_lab.widgets.assets import css, esm

BINS = 5


def _shown(q: Mapping[str, Any], answer: Mapping[str, Any]) -> tuple[Any, float]:
    """``(value in the label's terms, its probability)`` of one answer."""
    if answer["type"] == "noul":
        p = float(answer["noul"])
        return p >= 0.5, max(p, 1 - p)
    if answer["type"] == "score":
        probs = [float(v) for v in answer["probabilities"].values()]
        level = max(range(len(probs)), key=probs.__getitem__)
        return level, probs[level]
    return answer["choice"], float(answer["answer_confidence"])


class LabelView(anywidget.AnyWidget):
    """Label states for ``questions``, see held-out accuracy and a reliability diagram, adapt."""

    _esm = esm("labels")
    _css = css()
    rows = traitlets.List(help="[{i, state, answers: {qid: {value, p}}, labels: {qid: value}, "
                               "fitted: {qid: bool}}]").tag(sync=True)
    questions_info = traitlets.List(help="[{id, type, options}]").tag(sync=True)
    stats = traitlets.Dict(help="{qid: {n, accuracy, ece, bins: [{lo, hi, n, confidence, accuracy}]}}").tag(sync=True)
    status = traitlets.Dict(help="{model, adaptations, changed, seconds, cv: {qid: accuracy}, "
                                 "parts: {qid: 'own' | 'open', the head answering it}, turned: [qid], "
                                 "error}").tag(sync=True)

    def __init__(self, agent: Any, states: Sequence[Any], questions: Mapping[Any, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from jevlaya_lab.decisions.questions import parse_questions

        self.base = agent
        self.agent = agent
        self.states = list(states)
        if not self.states:
            raise ValueError("LabelView(states=[]): give the states to label, e.g. a list of messages")
        self.questions = dict(questions)
        self._parsed = {q.id: q for q in parse_questions(self.questions)}
        self.labels: dict[int, dict[Any, Any]] = {}
        """Per state index the labels given so far (question id -> answer, as ``agent.adapt`` takes it)."""
        self._fitted: set[tuple[int, Any]] = set()
        self.questions_info = [
            {"id": str(q.id), "type": q.type,
             "options": [str(label) for label in q.labels] if q.type == "choice" else
             (["yes", "no"] if q.type == "noul" else list(range(q.n_options)))}
            for q in self._parsed.values()]
        self._parts: dict[str, str] = {}
        self._answers = self._predict(agent)
        self.status = {"model": str(agent.model_id), "adaptations": 0, "changed": None, "seconds": None,
                       "cv": {}, "turned": [], "parts": self._parts, "error": ""}
        self._refresh()
        self.on_msg(self._on_message)

    # -- what the buttons do --------------------------------------------------------------------
    def label(self, row: int, question: Any, value: Any) -> None:
        """Record the right answer of state ``row`` for ``question`` (``None`` removes it).

        ``value`` is what ``agent.adapt`` takes: an option label, ``True``/``False``, or a level
        index; the front end's ``"yes"``/``"no"`` and typed numbers are converted here."""
        from jevlaya_lab.decisions.adapt import answer_index

        if not isinstance(row, int) or not 0 <= row < len(self.states):
            raise ValueError(f"label(row={row!r}): use a state index from 0 to {len(self.states) - 1}")
        q = self._question(question)
        if value is None:
            self.labels.get(row, {}).pop(q.id, None)
        else:
            if q.type == "noul" and isinstance(value, str) and value in ("yes", "no"):
                value = value == "yes"
            if q.type == "score" and isinstance(value, str):
                try:
                    value = int(value.strip())
                except ValueError:
                    raise ValueError(f"label: {value!r} is not a level of {q.id!r}; type an int from 0 "
                                     f"to {q.n_options - 1}") from None
            if q.type == "choice" and isinstance(value, str):
                value = next((label for label in q.labels if str(label) == value), value)
            answer_index(q, value, f"label(row={row}, question={q.id!r})")
            self.labels.setdefault(row, {})[q.id] = value
        self._refresh()

    def adapt(self, **adapt_kwargs: Any) -> Any:
        """Adapt the base Agent on every label so far; show the new answers and how many changed.

        Questions whose labels are all the same answer (or that have none) are left as the base
        Agent answers them; ``status["cv"]`` lists the questions that were adapted, and
        ``status["parts"]`` the head that answers each question (``"open"``: the checkpoint's open
        part; an adapted question's is the head it was fitted on), and ``status["turned"]`` the
        yes/no questions whose labels showed the checkpoint reading them upside down, so that the
        adaptation turned them round (:mod:`jevlaya_lab.decisions.adapt`); the view says so beside
        the question."""
        ready = [qid for qid in self._parsed  # two kinds of answer at least: what adapt can fit
                 if len({repr(a[qid]) for a in self.labels.values() if qid in a}) >= 2]
        examples = [(self.states[i], {q: v for q, v in answers.items() if q in ready})
                    for i, answers in sorted(self.labels.items())]
        examples = [(state, answers) for state, answers in examples if answers]
        asked = {qid: self.questions[qid] for qid in ready}
        if not asked:
            self.status = {**self.status, "error": "label some states first: adapt needs two different "
                                                   "answers of a question at least (a yes and a no, two options)"}
            return None
        started = time.perf_counter()
        try:
            adapted = self.base.adapt(examples, asked, **adapt_kwargs)
        except ValueError as exc:  # a LabelError: say it in the view, keep the labels
            self.status = {**self.status, "error": str(exc)}
            return None
        before = self._answers
        self.agent = adapted
        self._answers = self._predict(adapted)
        changed = sum(before[i][qid][0] != self._answers[i][qid][0]
                      for i in range(len(self.states)) for qid in self._parsed)
        self._fitted = {(i, qid) for i, answers in self.labels.items() for qid in answers if qid in asked}
        report = adapted.adaptation_report
        self.status = {"model": str(adapted.model_id), "adaptations": self.status["adaptations"] + 1,
                       "changed": changed, "seconds": round(time.perf_counter() - started, 2),
                       "cv": {str(r.id): round(r.cv_accuracy, 3) for r in report.questions},
                       "turned": [str(r.id) for r in report.questions if r.turned],
                       "parts": self._parts, "error": ""}
        self._refresh()
        return adapted

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        try:
            if content.get("action") == "label":
                self.label(int(content["row"]), content["question"], content.get("value"))
            elif content.get("action") == "adapt":
                self.adapt()
        except (KeyError, TypeError, ValueError) as exc:
            self.status = {**self.status, "error": str(exc)}

    # -- bookkeeping ----------------------------------------------------------------------------
    def _question(self, question: Any) -> Any:
        for qid, q in self._parsed.items():
            if qid == question or str(qid) == str(question):
                return q
        raise ValueError(f"question {question!r} is not one of {[str(q) for q in self._parsed]}")

    def _predict(self, agent: Any) -> list[dict[Any, tuple[Any, float]]]:
        """Each state's shown answer per question; :attr:`_parts` notes the head that answered each
        question (a checkpoint routes by question, so every state's answer says the same)."""
        results = agent.predict_batch(self.states, self.questions)
        self._parts = {str(qid): results[0]["answers"][qid].get("part", "own") for qid in self._parsed}
        return [{qid: _shown(self.questions[qid], r["answers"][qid]) for qid in self._parsed} for r in results]

    def held_out(self, question: Any) -> list[tuple[bool, float]]:
        """``(right, confidence)`` of the model in use on each label of ``question`` it was not fitted on."""
        q = self._question(question)
        out = []
        for i, answers in self.labels.items():
            if q.id in answers and (i, q.id) not in self._fitted:
                value, p = self._answers[i][q.id]
                out.append((value == answers[q.id], p))
        return out

    def _refresh(self) -> None:
        stats = {}
        for qid in self._parsed:
            pairs = self.held_out(qid)
            bins: list[dict[str, Any]] = []
            for b in range(BINS):
                lo, hi = b / BINS, (b + 1) / BINS
                inside = [(r, p) for r, p in pairs if lo <= p < hi or (b == BINS - 1 and p == 1.0)]
                bins.append({"lo": lo, "hi": hi, "n": len(inside),
                             "confidence": sum(p for _, p in inside) / len(inside) if inside else None,
                             "accuracy": sum(r for r, _ in inside) / len(inside) if inside else None})
            n = len(pairs)
            ece = sum(abs(x["confidence"] - x["accuracy"]) * x["n"] for x in bins if x["n"]) / n if n else None
            stats[str(qid)] = {"n": n, "accuracy": sum(r for r, _ in pairs) / n if n else None,
                               "ece": None if ece is None or math.isnan(ece) else ece, "bins": bins}
        with self.hold_sync():  # one message: a front end never draws new stats beside old rows
            self.stats = stats
            self.rows = [
                {"i": i, "state": state_preview(state, 160),
                 "answers": {str(qid): {"value": _wire(v), "p": round(p, 3)}
                             for qid, (v, p) in self._answers[i].items()},
                 "labels": {str(qid): _wire(v) for qid, v in self.labels.get(i, {}).items()},
                 "fitted": {str(qid): (i, qid) in self._fitted for qid in self._parsed}}
                for i, state in enumerate(self.states)]

    def __repr__(self) -> str:
        n = sum(len(a) for a in self.labels.values())
        return (f"LabelView({len(self.states)} states, {len(self._parsed)} questions, {n} labels, "
                f"{self.status.get('adaptations', 0)} adaptation(s))")


def _wire(value: Any) -> Any:
    """A label or answer as the front end shows it: yes/no for booleans."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value if isinstance(value, (int, float, str)) else str(value)
