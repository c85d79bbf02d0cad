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
  embedding that starts from the zero-shot answer), L2-penalised with ``lambda`` per element;
- ``"linear"`` (the default): ``linear-0.003`` from :data:`LINEAR_MIN_LABELS` labels on, else
  ``temperature+bias``;
- ``"auto"``: the candidate with the lowest cross-validated log-loss, the simplest one unless a
  richer one is better by more than :data:`SELECTION_MARGIN`.

The default is fixed rather than chosen per question because choosing on a few labels' folds
was measured to lose: on the user-question benchmark's dev half (``bench/adapt.py --half dev``,
mean over 22 yes/no statements / 9 choices, held-out states) ``auto`` reached 0.72 / 0.63 at
k = 8 against 0.78 / 0.69 for ``linear-0.003``, which was also the best or within 0.01 of the
best fixed candidate at k = 4 and 16 (``prototype`` 0.76 / 0.70, ``temperature+bias`` 0.68 /
0.66 at k = 8).

Every candidate is fitted by L-BFGS on the mean cross-entropy plus small penalties (``log a``
and ``b`` towards 0, so separable labels cannot send them to infinity). The report's
cross-validated accuracy and ECE come from stratified, seeded folds (``min(5, n)`` of them) of
the method used; with ``"auto"`` those folds also chose it, which makes them a little
optimistic. The zero-shot figures beside them, on the same labels, are not fitted at all.

Which question an adaptation applies to is decided by its content, not its id: the type, the
instructions and every option's label and rendered text. A question asked with the same id but
other wording is a different question and gets the checkpoint's zero-shot answer, and the same
question under another id gets the adaptation. ``agent.adapted_questions`` returns the
definitions as they were adapted.

The fitted numbers live in ``rl_agent_config.json`` under ``"adaptation"`` (version 1), so
:meth:`Agent.save <jevlaya_lab.decisions.agent.Agent.save>` writes an ordinary checkpoint: Laya and
older versions ignore the key and answer zero-shot, and :func:`~jevlaya_lab.load` reads it back
with the corrections. A question with a ``prototype`` or ``linear`` correction costs one more
pooled encoder pass over the states of a call; the others cost nothing measurable.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

import torch

from jevlaya_lab.decisions.errors import LabelError
from jevlaya_lab.decisions.questions import Question, parse_questions

Agent = Any
"""An :class:`~jevlaya_lab.decisions.agent.Agent` (not imported: the Agent imports this module)."""

__all__ = ["ADAPTATION_KEY", "Adaptation", "AdaptationReport", "QuestionAdaptation", "adapt",
           "answer_index", "question_key", "read_examples"]

ROWS_PER_CHUNK = 256
ADAPTATION_KEY = "adaptation"
ADAPTATION_VERSION = 1
LINEAR_PENALTIES = (0.03, 0.003, 0.0003)
"""L2 weights of the full linear correction (per element of ``W``, against the mean cross-entropy)."""
LINEAR_MIN_LABELS = 4
DEFAULT_LINEAR = "linear-0.003"
METHODS = ("linear", "auto", "zero-shot", "temperature", "temperature+bias", "prototype")
MAX_FOLDS = 5
SELECTION_MARGIN = 0.02
"""A candidate is chosen over a simpler one only if its cross-validated log-loss is lower by more
than this (nats): a few labels' folds are noisy, and a needless correction costs held-out states."""
_LOG_FLOOR = -30.0
"""Base log-probabilities are floored here, so a saturated zero-shot answer stays finite to fit."""


# -- which question is which --------------------------------------------------------------------
def question_key(q: Question) -> str:
    """The content key an adaptation is stored and looked up under (type, instructions, options)."""
    return json.dumps([q.type, q.instructions, [str(label) for label in q.labels], list(q.option_texts),
                       list(q.legend)], ensure_ascii=False)


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


# -- features: what the frozen checkpoint says about each labelled state ------------------------
def base_features(agent: Agent, states: Sequence[Any], parsed: tuple[Question, ...],
                  *, vectors: bool = True) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Per question ``[n, k]`` log-probabilities (caller order, at the agent's temperatures) that
    the agent's checkpoint gives ``states`` without any adaptation, and the ``[n, d]`` pooled state
    vectors (None unless ``vectors``)."""
    from jevlaya_lab.decisions.budget import check_positions
    from jevlaya_lab.decisions.encoding import build_batch, check_budget, tokenize_states

    max_len = check_positions(
        check_budget("max_len", agent.config.max_len),
        getattr(getattr(agent.decision_model.encoder, "config", None), "max_position_embeddings", None),
        agent.model_id)
    heads = agent._question_heads(parsed, agent.config.head_max_len)
    tokens = tokenize_states(agent._rows, list(states))
    chunk = max(1, ROWS_PER_CHUNK // len(heads))  # the Agent's chunking: at most 256 rows per pass
    per_question: list[list[torch.Tensor]] = [[] for _ in parsed]
    for start in range(0, len(tokens), chunk):
        chunk_tokens = tokens[start:start + chunk]
        batch = build_batch(agent._rows, chunk_tokens, heads, max_len=max_len)
        prior = None if agent._prior is None else agent._prior.inputs(
            chunk_tokens, batch.questions, max_len, batch.option_mask.shape[1])
        logits = agent._forward(batch, prior).option_logits.float().cpu()
        for j, q in enumerate(parsed):
            rows = logits[j::len(parsed), :q.n_options]
            temperature = agent.temperatures.get(q.type, q.n_options)
            lp = torch.log_softmax(rows / temperature, dim=-1).clamp_min(_LOG_FLOOR)
            per_question[j].append(_caller_order(q, lp))
    lps = [torch.cat(parts).double() for parts in per_question]
    return lps, (state_vectors(agent, tokens, max_len).double() if vectors else None)


def _caller_order(q: Question, slot_values: torch.Tensor) -> torch.Tensor:
    """``[n, k]`` slot-order values -> caller order (``option_order[slot]`` is the caller index)."""
    out = torch.empty_like(slot_values)
    out[:, list(q.option_order)] = slot_values
    return out


def state_vectors(agent: Agent, tokens: Sequence[Any], max_len: int) -> torch.Tensor:
    """``[n, d]`` unit mean-pooled encoder vectors of tokenised states (the prior's own vectors
    when the checkpoint has a similarity prior; the plain ``[CLS] state [SEP]`` mean otherwise)."""
    if agent._prior is not None:
        return agent._prior.state_vectors(list(tokens), max_len)
    rows = agent._rows
    wrapped = [[rows.cls_id, *s.ids[:max(0, max_len - 2)], rows.sep_id] for s in tokens]
    device = next(agent.decision_model.parameters()).device
    out = torch.zeros((len(wrapped), agent.decision_model.hidden_size))
    order = sorted(range(len(wrapped)), key=lambda i: len(wrapped[i]))
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            picked = order[start:start + 64]
            length = max(len(wrapped[i]) for i in picked)
            ids = torch.tensor([wrapped[i] + [rows.pad_id] * (length - len(wrapped[i])) for i in picked])
            mask = (ids != -1).long()
            for r, i in enumerate(picked):
                mask[r, len(wrapped[i]):] = 0
            out[picked] = agent.decision_model.pool(ids.to(device), mask.to(device)).float().cpu()
    return out


# -- fitting ------------------------------------------------------------------------------------
@dataclass
class _Fit:
    method: str
    log_a: float = 0.0
    bias: torch.Tensor | None = None
    weight: torch.Tensor | None = None


def _free_mask(qtype: str, k: int) -> torch.Tensor:
    """Which options carry a bias / weight row: every option, but only ``true`` for a yes/no."""
    mask = torch.ones(k, dtype=torch.float64)
    if qtype == "noul":
        mask[0] = 0.0
    return mask


def _prototypes(qtype: str, vectors: torch.Tensor, targets: torch.Tensor, k: int) -> torch.Tensor:
    protos = torch.zeros((k, vectors.shape[1]), dtype=torch.float64)
    for option in range(k):
        rows = vectors[targets == option]
        if len(rows):
            protos[option] = rows.mean(dim=0)
    if qtype == "noul":
        protos = torch.stack([torch.zeros_like(protos[1]), protos[1] - protos[0]])
    return protos


def _logits(fit: _Fit, lp: torch.Tensor, vectors: torch.Tensor | None) -> torch.Tensor:
    out = math.exp(fit.log_a) * lp
    if fit.bias is not None:
        out = out + fit.bias
    if fit.weight is not None and vectors is not None:
        out = out + vectors @ fit.weight.T
    return out


def _fit(method: str, qtype: str, lp: torch.Tensor, vectors: torch.Tensor, targets: torch.Tensor) -> _Fit:
    """One candidate fitted on ``(lp, vectors, targets)`` by L-BFGS (float64; a few ms)."""
    k = lp.shape[1]
    if method == "zero-shot":
        return _Fit(method)
    free = _free_mask(qtype, k)
    log_a = torch.zeros((), dtype=torch.float64, requires_grad=True)
    params = [log_a]
    bias = weight = beta = None
    protos = None
    if method != "temperature":
        bias = torch.zeros(k, dtype=torch.float64, requires_grad=True)
        params.append(bias)
    if method == "prototype":
        protos = _prototypes(qtype, vectors, targets, k)
        beta = torch.zeros((), dtype=torch.float64, requires_grad=True)
        params.append(beta)
    penalty = 0.0
    if method.startswith("linear-"):
        penalty = float(method.split("-", 1)[1])
        weight = torch.zeros((k, vectors.shape[1]), dtype=torch.float64, requires_grad=True)
        params.append(weight)
    optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=100, tolerance_grad=1e-6,
                                  tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def loss_fn() -> torch.Tensor:
        optimizer.zero_grad()
        logits = log_a.exp() * lp
        loss = 0.01 * log_a ** 2
        if bias is not None:
            logits = logits + bias * free
            loss = loss + 0.01 * (bias * free).pow(2).sum()
        if beta is not None and protos is not None:
            logits = logits + beta * (vectors @ protos.T)
        if weight is not None:
            w = weight * free[:, None]
            logits = logits + vectors @ w.T
            loss = loss + penalty * w.pow(2).sum()
        loss = loss + torch.nn.functional.cross_entropy(logits, targets)
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(loss_fn)
    fitted = _Fit(method, float(log_a.detach().clamp(-5.0, 5.0)))
    if bias is not None:
        fitted.bias = (bias.detach() * free).clone()
    if beta is not None and protos is not None:
        fitted.weight = float(beta.detach()) * protos
    if weight is not None:
        fitted.weight = (weight.detach() * free[:, None]).clone()
    return fitted


def candidates(n: int) -> list[str]:
    """The candidates offered for ``n`` labels, simplest first (ties go to the simpler one)."""
    out = ["zero-shot", "temperature", "temperature+bias", "prototype"]
    if n >= LINEAR_MIN_LABELS:
        out += [f"linear-{p:g}" for p in LINEAR_PENALTIES]
    return out


def _folds(targets: torch.Tensor, seed: int) -> list[int]:
    """A stratified, seeded fold id per label (each class spread over the folds in turn)."""
    n = len(targets)
    n_folds = min(MAX_FOLDS, n)
    rng = random.Random(seed)
    fold = [0] * n
    turn = 0
    for option in sorted(set(targets.tolist())):
        members = [i for i in range(n) if int(targets[i]) == option]
        rng.shuffle(members)
        for i in members:
            fold[i] = turn % n_folds
            turn += 1
    return fold


def _ece(probs: torch.Tensor, targets: torch.Tensor, bins: int = 10) -> float:
    conf, top = probs.max(dim=1)
    total = 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = (conf >= low) & ((conf < high) if b < bins - 1 else (conf <= high))
        if inside.any():
            hits = float((top[inside] == targets[inside]).double().mean())
            total += abs(float(conf[inside].mean()) - hits) * int(inside.sum())
    return total / len(targets)


def _balanced(probs: torch.Tensor, targets: torch.Tensor) -> float:
    top = probs.argmax(dim=1)
    recalls = [float((top[targets == c] == c).double().mean()) for c in sorted(set(targets.tolist()))]
    return sum(recalls) / len(recalls)


@dataclass
class QuestionReport:
    """One adapted question: how many labels, what was chosen, and how it scores."""

    id: Any
    type: str
    n: int
    method: str
    zero_shot_accuracy: float
    zero_shot_balanced: float
    zero_shot_ece: float
    cv_accuracy: float
    cv_balanced: float
    cv_ece: float
    cv_log_loss: dict[str, float]
    zero_shot_probs: list[list[float]] = field(repr=False, default_factory=list)
    cv_probs: list[list[float]] = field(repr=False, default_factory=list)
    targets: list[int] = field(repr=False, default_factory=list)


def _score(probs: torch.Tensor, targets: torch.Tensor) -> tuple[float, float, float]:
    accuracy = float((probs.argmax(dim=1) == targets).double().mean())
    return accuracy, _balanced(probs, targets), _ece(probs, targets)


def fit_question(q: Question, lp: torch.Tensor, vectors: torch.Tensor, targets: torch.Tensor,
                 seed: int = 0, method: str = "auto") -> tuple[_Fit, torch.Tensor, QuestionReport]:
    """Choose (``method="auto"``) or take one candidate, fit it; ``(fit, center, report)``."""
    n = len(targets)
    folds = _folds(targets, seed)
    losses: dict[str, float] = {}
    held: dict[str, torch.Tensor] = {}
    if method == "linear":
        method = DEFAULT_LINEAR if n >= LINEAR_MIN_LABELS else "temperature+bias"
    for method_ in (candidates(n) if method == "auto" else [method]):
        probs = torch.zeros_like(lp)
        for f in sorted(set(folds)):
            train = torch.tensor([x != f for x in folds])
            test = ~train
            center = vectors[train].mean(dim=0)
            fit = _fit(method_, q.type, lp[train], vectors[train] - center, targets[train])
            probs[test] = torch.softmax(_logits(fit, lp[test], vectors[test] - center), dim=-1)
        held[method_] = probs
        losses[method_] = float(-torch.log(probs[torch.arange(n), targets].clamp_min(1e-12)).mean())
    lowest = min(losses.values())
    best = next(m for m in losses if losses[m] <= lowest + SELECTION_MARGIN)  # the simplest near the best
    center = vectors.mean(dim=0)
    fit = _fit(best, q.type, lp, vectors - center, targets)
    zero = torch.softmax(lp, dim=-1)
    zero_scores, cv_scores = _score(zero, targets), _score(held[best], targets)
    report = QuestionReport(q.id, q.type, n, best, *zero_scores, *cv_scores,
                            {m: round(v, 4) for m, v in losses.items()},
                            zero.tolist(), held[best].tolist(), targets.tolist())
    return fit, center, report


# -- the stored correction and how a forward pass uses it --------------------------------------
@dataclass
class QuestionAdaptation:
    """One question's fitted correction, as stored under ``"adaptation"`` in the config."""

    key: str
    id: Any
    definition: Any
    method: str
    temperature: float
    """The temperature the base log-probabilities were read at when fitting."""
    log_a: float
    bias: list[float] | None
    weight: list[list[float]] | None
    center: list[float] | None
    n_labels: int

    def to_value(self) -> dict[str, Any]:
        return {"id": self.id, "definition": self.definition, "method": self.method,
                "temperature": self.temperature, "log_a": self.log_a, "bias": self.bias,
                "weight": self.weight, "center": self.center, "n_labels": self.n_labels}


class Adaptation:
    """The adapted questions of an Agent, looked up by content (:func:`question_key`)."""

    def __init__(self, entries: Sequence[QuestionAdaptation]) -> None:
        self.entries: dict[str, QuestionAdaptation] = {e.key: e for e in entries}
        self._tensors: dict[str, tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]] = {}
        for e in entries:
            self._tensors[e.key] = (
                None if e.bias is None else torch.tensor(e.bias, dtype=torch.float32),
                None if e.weight is None else torch.tensor(e.weight, dtype=torch.float32),
                None if e.center is None else torch.tensor(e.center, dtype=torch.float32))

    @classmethod
    def from_value(cls, value: Any, source: str = "rl_agent_config.json") -> Adaptation:
        """Read the config value; a :class:`~jevlaya_lab.decisions.errors.CheckpointError` names what is wrong."""
        from jevlaya_lab.decisions.errors import CheckpointError

        def bad(what: str) -> CheckpointError:
            return CheckpointError(f"{source}: {ADAPTATION_KEY} is invalid: {what}; write it with "
                                   "agent.adapt(...).save(directory)")

        if not isinstance(value, dict) or value.get("version") != ADAPTATION_VERSION:
            raise bad(f"expected an object with \"version\": {ADAPTATION_VERSION}")
        entries = []
        for i, item in enumerate(value.get("questions") or []):
            try:
                qid = item["id"]
                parsed = parse_questions({qid: item["definition"]})[0]
                entries.append(QuestionAdaptation(
                    question_key(parsed), qid, item["definition"], str(item["method"]),
                    float(item["temperature"]), float(item["log_a"]), item.get("bias"), item.get("weight"),
                    item.get("center"), int(item.get("n_labels", 0))))
            except (KeyError, TypeError, ValueError) as exc:
                raise bad(f"questions[{i}] ({exc})") from None
        return cls(entries)

    def to_value(self) -> dict[str, Any]:
        return {"version": ADAPTATION_VERSION, "questions": [e.to_value() for e in self.entries.values()]}

    def questions(self) -> dict[Any, Any]:
        """The adapted question definitions by the id they were adapted under."""
        return {e.id: json.loads(json.dumps(e.definition)) for e in self.entries.values()}

    def adjust(self, agent: Agent, batch: Any, tokens: Sequence[Any], logits: torch.Tensor,
               max_len: int) -> torch.Tensor:
        """``logits`` (slot order, ``[states x questions, max_k]``) with the adapted questions' rows
        replaced, in the units ``Agent._decode`` divides by the current temperature."""
        questions = batch.questions
        found = [(j, q, e) for j, q in enumerate(questions)
                 if (e := self.entries.get(question_key(q))) is not None]
        if not found:
            return logits
        vectors = None
        if any(e.weight is not None for _, _, e in found):
            vectors = state_vectors(agent, tokens, max_len).to(logits.device)
        out = logits.clone()
        for j, q, e in found:
            k = q.n_options
            rows = out[j::len(questions)]
            lp = torch.log_softmax(rows[:, :k].float() / e.temperature, dim=-1).clamp_min(_LOG_FLOOR)
            caller_lp = _caller_order(q, lp)
            bias, weight, center = self._tensors[e.key]
            adapted = math.exp(e.log_a) * caller_lp
            if bias is not None:
                adapted = adapted + bias.to(adapted.device)
            if weight is not None and vectors is not None and center is not None:
                adapted = adapted + (vectors - center.to(vectors.device)) @ weight.to(vectors.device).T
            slots = adapted[:, list(q.option_order)] * agent.temperatures.get(q.type, k)
            rows[:, :k] = slots.to(rows.dtype)
            out[j::len(questions)] = rows
        return out


# -- the report ---------------------------------------------------------------------------------
class AdaptationReport:
    """What :func:`adapt` fitted and how it cross-validates, per question (``.questions``).

    Shows as a table in a notebook; ``to_frame()`` gives the same rows as a pandas DataFrame."""

    def __init__(self, questions: list[QuestionReport], seconds: float, model_id: str) -> None:
        self.questions = questions
        self.seconds = seconds
        self.model_id = model_id

    def __getitem__(self, qid: Any) -> QuestionReport:
        for row in self.questions:
            if row.id == qid or str(row.id) == str(qid):
                return row
        raise KeyError(qid)

    def rows(self) -> list[dict[str, Any]]:
        return [{"question": str(r.id), "type": r.type, "labels": r.n, "method": r.method,
                 "zero-shot accuracy": round(r.zero_shot_accuracy, 3),
                 "cv accuracy": round(r.cv_accuracy, 3),
                 "zero-shot balanced": round(r.zero_shot_balanced, 3),
                 "cv balanced": round(r.cv_balanced, 3),
                 "zero-shot ECE": round(r.zero_shot_ece, 3), "cv ECE": round(r.cv_ece, 3)}
                for r in self.questions]

    def to_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows())

    def __repr__(self) -> str:
        lines = [f"AdaptationReport({self.model_id!r}, {len(self.questions)} question(s), {self.seconds:.2f} s)"]
        for r in self.questions:
            lines.append(f"  {str(r.id)!s:<16} {r.type:<6} n={r.n:<3} {r.method:<16} accuracy "
                         f"{r.zero_shot_accuracy:.2f} -> {r.cv_accuracy:.2f} (cv), balanced "
                         f"{r.zero_shot_balanced:.2f} -> {r.cv_balanced:.2f}, "
                         f"ECE {r.zero_shot_ece:.2f} -> {r.cv_ece:.2f}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from jevlaya_lab.display import MUTED, card

        head = ["question", "type", "labels", "method", "accuracy zero-shot → cv", "balanced", "ECE"]
        body = "".join(
            "<tr>" + "".join(f"<td style='padding:0 .6em'>{escape(str(v))}</td>" for v in (
                r.id, r.type, r.n, r.method, f"{r.zero_shot_accuracy:.2f} → {r.cv_accuracy:.2f}",
                f"{r.zero_shot_balanced:.2f} → {r.cv_balanced:.2f}", f"{r.zero_shot_ece:.2f} → {r.cv_ece:.2f}"))
            + "</tr>" for r in self.questions)
        th = "".join(f"<th style='text-align:left;padding:0 .6em'>{escape(h)}</th>" for h in head)
        note = (f"<div style='{MUTED}'>adapted {escape(self.model_id)} in {self.seconds:.2f} s; cv: "
                "cross-validated on the given labels (the folds also chose the method)</div>")
        return card(f"<table style='border-collapse:collapse'><tr>{th}</tr>{body}</table>{note}")


# -- the entry point ----------------------------------------------------------------------------
def adapt(agent: Agent, examples: Any, questions: Mapping[Any, Any], *, seed: int = 0,
          method: str = "linear", model_id: str | None = None) -> Agent:
    """A new Agent whose answers to ``questions`` are fitted on the labelled ``examples``.

    See the module docstring for what is fitted. The new Agent's ``adaptation_report`` holds the
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
    lps, vectors = base_features(agent, [states[i] for i in used], parsed)
    assert vectors is not None
    entries = [e for e in (agent._adaptation.entries.values() if agent._adaptation else ())]
    reports = []
    for q, lp in zip(parsed, lps):
        rows = torch.tensor([position[i] for i, _ in labels[q.id]])
        targets = torch.tensor([option for _, option in labels[q.id]])
        fit, center, report = fit_question(q, lp[rows], vectors[rows], targets, seed=seed, method=method)
        reports.append(report)
        key = question_key(q)
        entries = [e for e in entries if e.key != key]
        entries.append(QuestionAdaptation(
            key, q.id, _definition(questions, q), fit.method, agent.temperatures.get(q.type, q.n_options),
            fit.log_a, None if fit.bias is None else fit.bias.tolist(),
            None if fit.weight is None else fit.weight.tolist(),
            None if fit.weight is None else center.tolist(), len(targets)))
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
