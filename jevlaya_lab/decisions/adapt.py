"""Few-shot adaptation: a user's own labels turn an Agent's zero-shot answers into fitted ones.

``agent.adapt(examples, questions)`` (:func:`adapt`) takes 4-32 labelled states per question and
returns a **new** Agent that answers those questions with a small per-question correction on top
of the frozen checkpoint; the original Agent, its weights and its cache are unchanged (the new
one shares the weights, read-only).

What is fitted, per question, on the base answers' log-probabilities ``lp`` (caller order, at the
temperatures in use) and the mean-pooled, unit-length state vector ``s`` of the frozen encoder
(the vector the similarity prior reads; ``c`` is the labelled states' mean vector)::

    logit_k = a * lp_k + b_k + W_k . (s - c)        (a yes/no: only the "true" slot moves)

Which parameters are free is set by ``method``:

- ``zero-shot``: ``a = 1, b = 0, W = 0`` (the question as the checkpoint answers it);
- ``temperature``: ``a`` only (confidence that matches how often it is right);
- ``temperature+bias``: ``a`` and ``b`` (a threshold for a yes/no; a per-option prior for a choice);
- ``prototype``: ``a``, ``b`` and one weight ``beta`` with ``W_k = beta * mean_k(s - c)``, the mean
  of the states labelled ``k`` (a nearest-prototype vote mixed with the zero-shot answer);
- ``linear-<lambda>``: ``a``, ``b`` and a full ``W`` (a logistic/softmax regression on the frozen
  embedding that starts from the zero-shot answer), L2-penalised with ``lambda * 8 / n`` per
  element for ``n`` labels (:func:`~jevlaya_lab.decisions.adapt_fit.penalty_at`: a prior worth
  eight labels, so more labels free the correction);
- ``"linear"`` (the default): ``linear-0.001`` for a yes/no and ``linear-0.003`` for a choice or
  a score (:data:`DEFAULT_LINEAR`) from :data:`LINEAR_MIN_LABELS` labels on, else
  ``temperature+bias``;
- ``"auto"``: the candidate with the lowest cross-validated log-loss, the simplest one unless a
  richer one is better by more than :data:`SELECTION_MARGIN`.

Every candidate minimises the mean cross-entropy plus small penalties, so that separable labels
cannot send a parameter to infinity: ``a - 1`` towards 0, a choice's ``b`` towards 0, and a
yes/no's threshold ``b`` ten times as firmly
(:data:`~jevlaya_lab.decisions.adapt_fit.THRESHOLD_PENALTY`: ``mini-en``'s 0.5 already separates
an unseen statement about as well as a threshold a few labels can place). A yes/no's
loss weighs its "yes" labels as much in all as its "no" labels: users label few "yes" for a
rare property, and an unweighted fit on 3 "yes" among 16 learns their base rate and answers
"no" (it is the balanced accuracy at 0.5 that the user sees). Where every parameter is penalised
the minimum is found by Newton's method (a few ms per fit), otherwise (``prototype``, ``linear-0``,
very large label sets) by L-BFGS.

How the default was chosen: on the user-question benchmark's dev half only (22 yes/no
statements, 9 choices; the locked half took no part in these decisions), with labels drawn three
times (seeds 0, 1, 2) at k = 4 / 8 / 16 and scored on each question's other states,
``bench/adapt_levers.py`` gives (yes/no mean balanced accuracy; choices mean accuracy):

=========================================  =====================  =====================
setting                                    yes/no k=4 / 8 / 16    choices k=4 / 8 / 16
=========================================  =====================  =====================
the default                                0.737 / 0.778 / 0.820  0.731 / 0.738 / 0.820
``THRESHOLD_PENALTY=0.01`` (a free bias)   0.741 / 0.763 / 0.765  (unchanged)
``YESNO_BALANCE=0`` (unweighted yes/no)    0.737 / 0.772 / 0.815  (unchanged)
``linear-0.003`` for yes/no too            0.739 / 0.776 / 0.803  (unchanged)
``auto``                                   0.708 / 0.768 / 0.792  0.691 / 0.706 / 0.808
``prototype``                              0.712 / 0.748 / 0.800  0.669 / 0.718 / 0.742
``temperature+bias``                       0.691 / 0.707 / 0.691  0.706 / 0.708 / 0.774
``zero-shot`` (no adaptation)              0.677 / 0.689 / 0.676  0.691 / 0.690 / 0.687
=========================================  =====================  =====================

These figures were measured on the checkpoint of that time. With today's ``mini-en`` (its
statement reader, blend refit and read options) the same sweep gives the default 0.778 / 0.807 /
0.830 for yes/no and 0.742 / 0.745 / 0.826 for choices, and ``auto`` 0.765 / 0.781 / 0.790 and
0.723 / 0.720 / 0.811: the default still wins.

Spending the labels on the statement reader itself was measured on the same dev statements and is
not shipped (``bench/adapt_reader_tuning.py``: per statement, a copy of the reader's layers trained
on the labelled pairs, its answer averaged with the default's). At k = 4 / 8 / 16 it gives yes/no
0.811 / 0.828 / 0.834 against the default's 0.778 / 0.807 / 0.830 (learning rate 3e-5, 20 steps),
or 0.802 / 0.827 at k = 4 / 8 with 5 steps at 1e-4; but its training takes 0.35-4.7 s per statement
on this CPU, against 0.02 s for the default's fit, and an adapted checkpoint would have to store a
copy of the reader's layers (10.6 MB) per statement. Training only the reader's biases, layer norms
and output unit would store a few thousand numbers instead, for 0.792 / 0.826 at k = 4 / 8 (3e-3,
10 steps), but it takes as long (0.66 / 1.14 s): the backward pass through the layers is the cost.

On a checkpoint with an open part, each question is fitted on one part's features. Fitting both
parts and averaging their answers (``bench/adapt_levers.py --checkpoint C base parts=both``, dev
half, seeds 0-2) gives k = 8 yes/no / choices 0.832 / 0.756 against 0.831 / 0.763 on ``mini-en``
and 0.807 / 0.731 against 0.801 / 0.732 on ``mini-multi``, at a worse ECE; taking the part whose
labels' cross-validated log-loss is lower (``parts=cv``) loses choices on both (0.747, 0.714).
Neither is done: either would also run both encoders for every adapted question.

**A statement read upside down.** A statement negated as a whole ("None of our products has
failed them.") can rank the user's states upside down: the states where it holds get the lowest
probabilities. ``a`` is held positive, and a small ``W`` does not turn a ranking round from a few
labels, so such a statement stayed at chance or below after adapting. For a yes/no whose labels'
zero-shot AUC is at most :data:`~jevlaya_lab.decisions.adapt_fit.TURN_AUC` (0.25), the chosen
method is also fitted on the turned log-probabilities (``logit = -a * lp + b + W . (s - c)``), and
the turn is kept when its cross-validated log-loss is lower by more than
:data:`~jevlaya_lab.decisions.adapt_fit.TURN_MARGIN` (0.05 nats). The report says ``turned`` (its
method shows as ``"turned, linear-0.001"``), the stored entry ``"sign": -1``. Measured on the dev
half (``bench/adapt_levers.py --seeds 0 1 2 --negated-apart base TURN_AUC=-1``, ``mini-en``; ten
dev statements are negated as a whole, 36 are not): yes/no k = 4 / 8 / 16 0.770 / 0.800 / 0.811
against 0.744 / 0.765 / 0.789 without the turn; the ten negated 0.679 / 0.688 / 0.742 against
0.517 / 0.525 / 0.629; the other 36 0.796 / 0.831 / 0.831 against 0.807 / 0.831 / 0.833 (with 2 + 2
labels, a statement read the right way round sometimes draws labels that rank upside down: 6 of the
108 draws of the 36 at k = 4 were turned, none at k = 8, 1 at k = 16); ECE
0.115 / 0.108 / 0.094 against 0.133 / 0.122 / 0.105. A bound of 0.2 or 0.3 and a margin of 0 or 0.1
move these by at most 0.004 (k = 4's other 36 at 0.2: 0.804). Labels that carry no ranking at all
may come out upside down by chance and be turned; neither way ranks them, so that costs nothing in
expectation. With ``"auto"`` the turn is offered for the chosen candidate; like the choice
itself, it is read on the same folds the report shows, which makes them a little optimistic.

The default is fixed rather than chosen per question because choosing on a few labels' folds
loses (``auto`` above). The report's cross-validated accuracy and ECE come from stratified, seeded
folds (``min(5, n)`` of them) of the method used; with ``"auto"`` those folds also chose it,
which makes them a little optimistic. The zero-shot figures beside them, on the same labels, are
not fitted at all.

Which question an adaptation applies to is decided by its content, not its id: the type, the
instructions and every option's label and rendered text. A question asked with the same id but
other wording is a different question and gets the checkpoint's zero-shot answer, and the same
question under another id gets the adaptation. ``agent.adapted_questions`` returns the
definitions as they were adapted. On a checkpoint with an open part, a question is fitted on the
part that answers it once adapted, which for ``mini-multi``'s choices is the open part rather than
the own head that answers them zero-shot (:mod:`.open_questions`, "Which types an adapted question
reads"); each entry records that part (``"part"``).

The fitted numbers live in ``rl_agent_config.json`` under ``"adaptation"``, so
:meth:`Agent.save <jevlaya_lab.decisions.agent.Agent.save>` writes an ordinary checkpoint: Laya and
versions without ``adapt`` ignore the key and answer zero-shot, and :func:`~jevlaya_lab.load` reads
it back with the corrections. It is written as version 1, or as version 2 when a statement is
turned: a version that cannot turn refuses that checkpoint rather than answer the statement upside
down. A question with a ``prototype`` or ``linear`` correction reads the states'
pooled vectors: on a checkpoint with a similarity prior (``mini-en``, ``mini-multi``) those the
prior already pooled in the same forward pass, at fit time and at answer time alike; without a
prior, one more pooled encoder pass over the states of a call. The other corrections cost nothing
measurable.
"""


from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from jevlaya_lab.decisions.adapt_features import Agent, base_features
from jevlaya_lab.decisions.adapt_fit import (
    DEFAULT_LINEAR as DEFAULT_LINEAR,
)
from jevlaya_lab.decisions.adapt_fit import (
    LINEAR_MIN_LABELS as LINEAR_MIN_LABELS,
)
from jevlaya_lab.decisions.adapt_fit import (
    SELECTION_MARGIN as SELECTION_MARGIN,
)
from jevlaya_lab.decisions.adapt_fit import fit_question
from jevlaya_lab.decisions.adaptation import (
    ADAPTATION_KEY,
    Adaptation,
    QuestionAdaptation,
    question_key,
)
from jevlaya_lab.decisions.adaptation_report import AdaptationReport
from jevlaya_lab.decisions.errors import LabelError
from jevlaya_lab.decisions.open_questions import answering
from jevlaya_lab.decisions.questions import Question, parse_questions

__all__ = ["ADAPTATION_KEY", "Adaptation", "AdaptationReport", "QuestionAdaptation", "adapt",
           "answer_index", "question_key", "read_examples", "save_agent"]

METHODS = ("linear", "auto", "zero-shot", "temperature", "temperature+bias", "prototype")


def _definition(questions: Mapping[Any, Any], q: Question) -> Any:
    raw = questions[q.id]
    try:
        json.dumps(raw)
        return raw
    except (TypeError, ValueError):
        return json.loads(json.dumps(raw, default=str))


# -- reading labels -----------------------------------------------------------------------------
def answer_index(q: Question, value: Any, where: str) -> int:
    """The caller-order option index of a label; a :class:`LabelError` naming ``where`` otherwise.

    A choice takes one of its option labels (``"refund"``), a yes/no ``True``/``False`` (numpy
    bools too), a score the level's index (an int, or a float with no fraction as a DataFrame
    column holding gaps makes it)."""
    if q.type == "noul":
        if type(value).__name__ in ("bool", "bool_"):
            return int(bool(value))
        raise LabelError(f"{where} = {value!r} is a {type(value).__name__}; a yes/no question takes "
                         "True or False")
    if q.type == "score":
        number = value
        if isinstance(value, float) and value.is_integer():
            number = int(value)
        elif hasattr(value, "item") and not isinstance(value, (str, bytes)):
            number = value.item()
            number = int(number) if isinstance(number, float) and number.is_integer() else number
        if isinstance(number, bool) or not isinstance(number, int):
            raise LabelError(f"{where} = {value!r} is a {type(value).__name__}; a score question takes "
                             f"the level's index, an int from 0 to {q.n_options - 1}")
        if not 0 <= number < q.n_options:
            raise LabelError(f"{where} = {value!r} is not a level of this score; use an int from 0 to "
                             f"{q.n_options - 1}")
        return number
    for index, label in enumerate(q.labels):
        if value == label and type(value) is not bool or value is label:
            return index
    for index, label in enumerate(q.labels):  # "2" for the label 2, as a CSV column gives it
        if isinstance(value, str) and value == str(label):
            return index
    raise LabelError(f"{where} = {value!r} is not an option of this choice; use one of "
                     f"{list(q.labels)!r}")


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(isinstance(value, float) and math.isnan(value)) or str(value) in ("NaN", "<NA>", "NaT")
    except (TypeError, ValueError):
        return False


Labels = dict[Any, list[tuple[int, int]]]


def read_examples(examples: Any, questions: Sequence[Question]) -> tuple[list[Any], Labels, list[str]]:
    """``(states, labels, names)``: every example's state, per question id the ``(example, option)``
    pairs, and how each example is named in errors (``examples[3]`` or ``row 3 (index 'a7')``).

    ``examples`` is a list of ``(state, answers)`` pairs or a pandas DataFrame whose columns named
    after question ids hold the labels (an empty cell: no label) and whose other columns are the
    state: one column is the state itself, several make a dict state of those columns."""
    by_id = {q.id: q for q in questions}
    by_name = {str(q.id): q for q in questions}
    labels: dict[Any, list[tuple[int, int]]] = {q.id: [] for q in questions}
    states: list[Any] = []
    names: list[str] = []
    if hasattr(examples, "columns") and hasattr(examples, "itertuples"):
        label_columns = [c for c in examples.columns if str(c) in by_name]
        state_columns = [c for c in examples.columns if str(c) not in by_name]
        if not state_columns:
            raise LabelError(f"examples: every column ({list(map(str, examples.columns))}) is a question id; "
                             "add the state's column(s), e.g. a 'text' column")
        if not label_columns:
            raise LabelError(f"examples: no column is named after a question id; name the label columns "
                             f"{sorted(by_name)} (found {list(map(str, examples.columns))})")
        for position, (index, row) in enumerate(examples.iterrows()):
            name = f"examples row {position} (index {index!r})"
            names.append(name)
            if len(state_columns) == 1:
                state = row[state_columns[0]]
            else:
                state = {str(c): row[c] for c in state_columns}
            states.append(state)
            for column in label_columns:
                value = row[column]
                if _missing(value):
                    continue
                q = by_name[str(column)]
                labels[q.id].append((position, answer_index(q, value, f"{name}, column {str(column)!r}")))
        return states, labels, names
    if isinstance(examples, (str, bytes, Mapping)) or not isinstance(examples, Sequence):
        raise LabelError(f"examples is a {type(examples).__name__}; pass a list of (state, answers) pairs "
                         "or a pandas DataFrame")
    for position, item in enumerate(examples):
        name = f"examples[{position}]"
        names.append(name)
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise LabelError(f"{name} is {item!r:.80}; each example is a (state, answers) pair, "
                             "answers a dict question id -> correct answer")
        state, answers = item
        if not isinstance(answers, Mapping):
            raise LabelError(f"{name}: answers is a {type(answers).__name__}; use a dict question id -> "
                             "correct answer, e.g. {'urgent': True}")
        states.append(state)
        for qid, value in answers.items():
            found = by_id.get(qid) or by_name.get(str(qid))
            if found is None:
                raise LabelError(f"{name}: answers names question {qid!r}, which is not among the questions "
                                 f"being adapted ({sorted(map(str, by_id))}); add it to questions or drop it")
            if _missing(value):
                continue
            labels[found.id].append((position, answer_index(found, value, f"{name}, answers[{qid!r}]")))
    return states, labels, names


def _check_labels(q: Question, pairs: list[tuple[int, int]], names: list[str]) -> None:
    if len(pairs) < 2:
        raise LabelError(f"question {q.id!r} has {len(pairs)} label(s); give at least 2 (4-32 is the "
                         "useful range), or leave the question out of questions")
    classes = {option for _, option in pairs}
    if len(classes) < 2:
        only = q.labels[next(iter(classes))]
        shown = {"noul": str(bool(int(only == "true")))}.get(q.type, repr(only))
        raise LabelError(f"question {q.id!r}: all {len(pairs)} labels are {shown} (from {names[pairs[0][0]]} "
                         "on); one class only cannot set a threshold or a correction; label some states "
                         "with another answer")


# -- the entry point ----------------------------------------------------------------------------
def adapt(agent: Agent, examples: Any, questions: Mapping[Any, Any], *, seed: int = 0,
          method: str = "linear", model_id: str | None = None, turn: bool = True) -> Agent:
    """A new Agent whose answers to ``questions`` are fitted on the labelled ``examples``.

    See the module docstring for what is fitted; ``turn=False`` never turns a yes/no round ("A
    statement read upside down"). The new Agent's ``adaptation_report`` holds the
    :class:`AdaptationReport`; it shares the weights (never modified) and the installed hooks.
    Raises :class:`~jevlaya_lab.decisions.errors.LabelError` (a ``ValueError``) naming the example
    and the field for an unknown question id or option, a label of the wrong type, and a question
    with fewer than two labels or one class only.
    """
    started = time.perf_counter()
    if not isinstance(method, str) or not (method in METHODS or (
            method.startswith("linear-") and _is_number(method.split("-", 1)[1]))):
        raise ValueError(f"method={method!r}: use one of {', '.join(METHODS)} or 'linear-<penalty>' "
                         "such as 'linear-0.01'")
    if not isinstance(questions, Mapping) or not questions:
        raise LabelError("questions must be a non-empty dict question id -> definition (the questions "
                         "the labels answer)")
    parsed = parse_questions(questions)
    states, labels, names = read_examples(examples, parsed)
    for q in parsed:
        _check_labels(q, labels[q.id], names)
    for index, state in enumerate(states):
        if not isinstance(state, (str, dict, list)):
            raise LabelError(f"{names[index]}: the state is a {type(state).__name__} ({state!r:.60}); "
                             "a state is a str, a dict or a list of messages")
    used = sorted({i for pairs in labels.values() for i, _ in pairs})
    position = {i: p for p, i in enumerate(used)}
    parts = answering(agent, parsed, adapting=True)  # the head each question reads once adapted (open_questions)
    lps, vectors = base_features(agent, [states[i] for i in used], parsed, parts=parts)
    assert vectors is not None
    entries = [e for e in (agent._adaptation.entries.values() if agent._adaptation else ())]
    reports = []
    for q, lp, pooled, part in zip(parsed, lps, vectors, parts):
        rows = torch.tensor([position[i] for i, _ in labels[q.id]])
        targets = torch.tensor([option for _, option in labels[q.id]])
        fit, center, report = fit_question(q, lp[rows], pooled[rows], targets, seed=seed, method=method, turn=turn)
        report.part = "own" if part is agent else "open"
        reports.append(report)
        key = question_key(q)
        entries = [e for e in entries if e.key != key]
        entries.append(QuestionAdaptation(
            key, q.id, _definition(questions, q), fit.method, part.temperatures.get(q.type, q.n_options),
            fit.log_a, None if fit.bias is None else fit.bias.tolist(),
            None if fit.weight is None else fit.weight.tolist(),
            None if fit.weight is None else center.tolist(), len(targets), report.part, fit.sign))
    config = _copy_config(agent.config)
    config.extra[ADAPTATION_KEY] = Adaptation(entries).to_value()
    runner = agent._hooks
    adapted = type(agent)((agent.decision_model, agent.tokenizer, config), device=agent.device,
                    hooks=runner.installed, hooks_raise=runner.hooks_raise,
                    hooks_concurrent=runner.hooks_concurrent, hooks_timeout=runner.hooks_timeout,
                    model_id=model_id or f"{agent.model_id}+adapted")
    adapted.temperatures = agent.temperatures
    adapted.quantize = agent.quantize
    adapted.adaptation_report = AdaptationReport(reports, time.perf_counter() - started, agent.model_id)
    return adapted


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text)) and float(text) >= 0
    except ValueError:
        return False


def _copy_config(config: Any) -> Any:
    from jevlaya_lab.decisions.checkpoint import CheckpointConfig

    return CheckpointConfig.from_dict(json.loads(json.dumps(config.to_dict())))


def save_agent(agent: Agent, directory: Any) -> Any:
    """Write ``agent`` as a checkpoint directory (Laya layout): weights, the temperatures in use and
    any adaptation (``"adaptation"`` in ``rl_agent_config.json``). A quantised Agent is refused,
    since its weights are no longer the checkpoint's."""
    import copy

    from jevlaya_lab.decisions.checkpoint import save_checkpoint
    from jevlaya_lab.decisions.questions import QUESTION_TYPES

    if agent.quantize is not None:
        raise ValueError(f"save(): this Agent runs quantize={agent.quantize!r}; load the checkpoint "
                         "without quantize to save it")
    config = copy.deepcopy(agent.config)
    config.temperature = [agent.temperatures.by_type[t] for t in QUESTION_TYPES]
    config.temperature_by_options = dict(agent.temperatures.by_bucket)
    return save_checkpoint(directory, agent.decision_model, agent.tokenizer, config)
