"""Fitting few-shot corrections: the candidates, their fits, their folds.

See :mod:`jevlaya_lab.decisions.adapt` for what is fitted and why; this module holds the numbers
(Newton and L-BFGS fits on float64 tensors, stratified seeded folds, accuracy and ECE) on the
features :mod:`jevlaya_lab.decisions.adapt_features` reads from the frozen checkpoint.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from jevlaya_lab.decisions.adaptation_report import QuestionReport, auc, scores
from jevlaya_lab.decisions.questions import Question

LINEAR_PENALTIES = (0.03, 0.003, 0.001, 0.0003)
"""L2 weights of the full linear correction (per element of ``W``, against the mean cross-entropy,
at :data:`PENALTY_LABELS` labels; see :func:`penalty_at`)."""
LINEAR_MIN_LABELS = 4
DEFAULT_LINEAR = {"noul": "linear-0.001", "choice": "linear-0.003", "score": "linear-0.003"}
"""The ``"linear"`` method's penalty per question type (measured on the dev half: module
:mod:`jevlaya_lab.decisions.adapt`)."""
PENALTY_LABELS = 8
"""A penalty ``lambda`` is the L2 weight at this many labels; with ``n`` labels it is
``lambda * PENALTY_LABELS / n`` (a prior worth a fixed number of labels: the fewer labels, the
more the correction is held towards the zero-shot answer; the more, the freer it is)."""
BIAS_PENALTY = 0.01
"""L2 weight of a choice's or a score's bias ``b`` (a per-option prior)."""
THRESHOLD_PENALTY = 0.1
"""L2 weight of a yes/no's bias (how far its threshold moves from the checkpoint's 0.5), ten times
a choice's: ``mini-en``'s unseen-statement fallback is fitted so that 0.5 separates,
and 4-16 labels that move the threshold freely mostly fit their own noise (dev half, 3 seeds,
balanced accuracy at k = 16: 0.820 held, 0.765 at 0.01). The price is paid where a checkpoint's
threshold is far off, as a random one's is: 24 labels then leave some of the gap (0.84-0.90 on a
tiny random checkpoint's learnable task, against 0.92-0.94 at 0.01)."""
YESNO_BALANCE = 1.0
"""How far a yes/no's loss is balanced between its answers: 1 weighs each answer's labels as much
in all as the other's, 0 weighs every label alike (:func:`label_weights`)."""
TEMPERATURE_PENALTY = 0.1
"""L2 weight of ``a - 1`` (the fitted inverse temperature held towards the checkpoint's own)."""
MAX_FOLDS = 5
SELECTION_MARGIN = 0.02
"""A candidate is chosen over a simpler one only if its cross-validated log-loss is lower by more
than this (nats): a few labels' folds are noisy, and a needless correction costs held-out states."""
NEWTON_MAX_PARAMS = 400
"""Up to this many fitted numbers a penalised candidate is fitted by Newton's method; beyond it a
Newton step's matrix costs more than L-BFGS's many cheap steps (an 8-option ``linear`` choice: 32
labels, 265 numbers, 14 ms against L-BFGS's 37; 64 labels, 521 numbers, 79 ms against 71)."""
NEWTON_MAX_STEPS = 50
"""Newton steps at most per fit: the bound only ends a stalled line search (every candidate fitted
on the dev questions' features, k = 4-32, took at most 14 steps, 5.7 on average)."""
LOG_A_BOUND = 5.0
"""``log a`` stays within +-this (the temperature within a factor of ~150 of the checkpoint's)."""
TURN_AUC = 0.25
"""A yes/no is offered turned round only when its labels' zero-shot AUC is at most this (the
checkpoint ranks most "no" labels above most "yes" labels)."""
TURN_MARGIN = 0.05
"""... and then taken only if its cross-validated log-loss is lower than the unturned fit's by
more than this (nats)."""
# -- fitting ------------------------------------------------------------------------------------
@dataclass
class _Fit:
    method: str
    log_a: float = 0.0
    bias: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    sign: int = 1
    """-1: fitted on the turned log-probabilities ``-lp`` (:func:`fit_question`)."""


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


def apply_fit(fit: _Fit, center: torch.Tensor, lp: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """``[n, k]`` adapted logits of states with base log-probabilities ``lp`` and pooled
    ``vectors``, for a fit whose labels' mean vector was ``center`` (what the adapted Agent
    computes, in float64); a turned fit (``sign`` -1) reads ``-lp``."""
    out = fit.sign * math.exp(fit.log_a) * lp
    if fit.bias is not None:
        out = out + fit.bias
    if fit.weight is not None:
        out = out + (vectors - center) @ fit.weight.T
    return out


def penalty_at(method: str, n: int) -> float:
    """The L2 weight of ``W`` that ``linear-<lambda>`` applies with ``n`` labels."""
    return float(method.split("-", 1)[1]) * PENALTY_LABELS / max(1, n)


def label_weights(qtype: str, targets: torch.Tensor, k: int) -> torch.Tensor | None:
    """Per-class loss weights: for a yes/no, each answer weighs as much in all as the other (the
    user rarely labels as many "yes" as "no", and a fit on 3 "yes" among 16 otherwise learns the
    labels' base rate and answers "no"); None (unweighted) for choices and scores."""
    if qtype != "noul":
        return None
    counts = torch.bincount(targets, minlength=k).double()
    weights = torch.where(counts > 0, len(targets) / (k * counts.clamp_min(1.0)), torch.zeros_like(counts))
    return weights ** YESNO_BALANCE


def row_weights(qtype: str, targets: torch.Tensor, k: int) -> torch.Tensor:
    """Per-label loss weights summing to 1: a plain mean, or a yes/no's answers weighed alike
    (:func:`label_weights`)."""
    weights = label_weights(qtype, targets, k)
    row = torch.ones(len(targets), dtype=torch.float64) if weights is None else weights[targets]
    return row / row.sum()


def _fit(method: str, qtype: str, lp: torch.Tensor, vectors: torch.Tensor, targets: torch.Tensor,
         sign: int = 1) -> _Fit:
    """One candidate fitted on ``(lp, vectors, targets)``: by Newton's method when every parameter
    is penalised and there are at most :data:`NEWTON_MAX_PARAMS` of them (:func:`_fit_newton`),
    else by L-BFGS (:func:`_fit_lbfgs`). Both minimise the same objective. ``sign`` -1 fits the
    turned log-probabilities ``-lp`` and returns a fit that reads them so (:func:`apply_fit`)."""
    if method == "zero-shot":
        return _Fit(method, sign=sign)
    if sign != 1:
        fitted = _fit(method, qtype, sign * lp, vectors, targets)
        fitted.sign = sign
        return fitted
    n, k = lp.shape
    strictly_convex = method != "prototype" and not (method.startswith("linear-") and penalty_at(method, n) == 0)
    free = int(_free_mask(qtype, k).sum())
    size = 1 + (free if method != "temperature" else 0) + (free * min(n, vectors.shape[1])
                                                          if method.startswith("linear-") else 0)
    if strictly_convex and size <= NEWTON_MAX_PARAMS:
        return _fit_newton(method, qtype, lp, vectors, targets)
    return _fit_lbfgs(method, qtype, lp, vectors, targets)


def _fit_newton(method: str, qtype: str, lp: torch.Tensor, vectors: torch.Tensor, targets: torch.Tensor) -> _Fit:
    """A penalised candidate by Newton's method (float64; about 2 ms for 8 labels, against 20 ms
    for L-BFGS, whose cost here is its per-step overhead rather than arithmetic).

    With ``a`` itself as the parameter (not ``log a``), the logits are linear in the parameters
    ``theta = (a, b_free, A)`` and the objective (weighted cross-entropy plus quadratic penalties)
    is strictly convex, so a few exact Newton steps with a backtracking line search reach its one
    minimum. ``W``'s free rows are written in a basis ``B``: the labelled vectors themselves when
    there are fewer labels than dimensions (the penalised optimum lies in their span, so
    ``W = A B`` loses nothing and has ``n`` numbers per row instead of ``d``), the identity
    otherwise. If the minimum's ``a`` falls outside ``exp(+-LOG_A_BOUND)``, ``a`` is held at that
    bound and the rest solved again: for a convex objective that is the bounded minimum."""
    n, k = lp.shape
    free = _free_mask(qtype, k)
    slots = [int(c) for c in free.nonzero().flatten()]
    columns: list[torch.Tensor] = [lp]
    penalties: list[torch.Tensor] = [torch.full((1, 1), TEMPERATURE_PENALTY, dtype=torch.float64)]
    if method != "temperature":
        held = THRESHOLD_PENALTY if qtype == "noul" else BIAS_PENALTY
        for c in slots:
            column = torch.zeros((n, k), dtype=torch.float64)
            column[:, c] = 1.0
            columns.append(column)
        penalties.append(held * torch.eye(len(slots), dtype=torch.float64))
    basis = None
    if method.startswith("linear-"):
        basis = vectors if n < vectors.shape[1] else torch.eye(vectors.shape[1], dtype=torch.float64)
        features, gram = vectors @ basis.T, basis @ basis.T
        for c in slots:
            block = torch.zeros((n, k, len(basis)), dtype=torch.float64)
            block[:, c, :] = features
            columns += list(block.unbind(-1))
            penalties.append(penalty_at(method, n) * gram)
    jac = torch.stack(columns, dim=-1)  # [n, k, P]: d logits / d theta
    quad = torch.block_diag(*penalties)  # type: ignore[no-untyped-call]
    linear = torch.zeros(jac.shape[-1], dtype=torch.float64)
    linear[0] = -2.0 * TEMPERATURE_PENALTY  # TEMPERATURE_PENALTY * (a - 1)^2, less its constant
    row_weight = row_weights(qtype, targets, k)
    theta = torch.zeros(jac.shape[-1], dtype=torch.float64)
    theta[0] = 1.0  # the zero-shot answer
    theta = _newton(jac, quad, linear, row_weight, targets, theta)
    low, high = math.exp(-LOG_A_BOUND), math.exp(LOG_A_BOUND)
    if not low <= float(theta[0]) <= high:
        a = min(max(float(theta[0]), low), high)
        rest = _newton(jac[..., 1:], quad[1:, 1:], linear[1:], row_weight, targets, torch.zeros_like(theta[1:]),
                       a * lp)
        theta = torch.cat([torch.tensor([a], dtype=torch.float64), rest])
    fitted = _Fit(method, math.log(float(theta[0])))
    if method != "temperature":
        fitted.bias = torch.zeros(k, dtype=torch.float64)
        fitted.bias[slots] = theta[1:1 + len(slots)]
    if basis is not None:
        fitted.weight = torch.zeros((k, vectors.shape[1]), dtype=torch.float64)
        fitted.weight[slots] = theta[1 + len(slots):].reshape(len(slots), len(basis)) @ basis
    return fitted


def _newton(jac: torch.Tensor, quad: torch.Tensor, linear: torch.Tensor, row_weight: torch.Tensor,
            targets: torch.Tensor, theta: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    """The minimum of ``sum_i w_i CE(offset_i + jac_i theta, t_i) + theta' quad theta + linear' theta``
    from ``theta``, by damped Newton steps (stops when the Newton decrement is below 1e-12)."""
    n, k, size = jac.shape
    flat = jac.reshape(n * k, size)
    onehot = torch.nn.functional.one_hot(targets, k).double()
    base = torch.zeros((n, k), dtype=torch.float64) if offset is None else offset

    def value(at: torch.Tensor) -> float:
        z = base + jac @ at
        data = row_weight * (torch.logsumexp(z, dim=-1) - (z * onehot).sum(-1))
        return float(data.sum() + at @ quad @ at + linear @ at)

    ridge = 1e-10 * torch.eye(size, dtype=torch.float64)
    current = value(theta)
    for _ in range(NEWTON_MAX_STEPS):
        p = torch.softmax(base + jac @ theta, dim=-1)
        grad = flat.T @ (row_weight[:, None] * (p - onehot)).reshape(-1) + 2.0 * quad @ theta + linear
        spread = torch.einsum("nkp,nk->np", jac, p)  # p_i' J_i
        hessian = (flat * (row_weight[:, None] * p).reshape(-1, 1)).T @ flat
        hessian = hessian - (spread * row_weight[:, None]).T @ spread + 2.0 * quad + ridge
        step = -torch.linalg.solve(hessian, grad)
        decrement = -float(grad @ step)
        if decrement < 1e-12:
            break
        t = 1.0
        while True:
            trial = value(theta + t * step)
            if trial <= current - 1e-4 * t * decrement or t < 1e-10:
                break
            t *= 0.5
        theta, current = theta + t * step, trial
    return theta


def _bounded(log_a: torch.Tensor) -> torch.Tensor:
    """``log a`` kept within +-LOG_A_BOUND smoothly: a clamp has no gradient past the bound, and
    L-BFGS stayed there once a line search crossed it (a tiny checkpoint's yes/no: ``log a`` -5 at
    objective 0.354, where the bounded minimum is ``log a`` -1.12 at 0.334)."""
    return LOG_A_BOUND * torch.tanh(log_a / LOG_A_BOUND)


def _fit_lbfgs(method: str, qtype: str, lp: torch.Tensor, vectors: torch.Tensor, targets: torch.Tensor) -> _Fit:
    """One candidate fitted by L-BFGS on ``log a`` (float64; 20-30 ms): for the candidates with an
    unpenalised parameter (``prototype``'s weight, ``linear-0``), whose separable labels have no
    finite minimum (the fit stops where L-BFGS does), and for large problems."""
    k = lp.shape[1]
    weights = label_weights(qtype, targets, k)
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
        penalty = penalty_at(method, len(targets))
        weight = torch.zeros((k, vectors.shape[1]), dtype=torch.float64, requires_grad=True)
        params.append(weight)
    optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=100, tolerance_grad=1e-6,
                                  tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def loss_fn() -> torch.Tensor:
        optimizer.zero_grad()
        a = _bounded(log_a).exp()
        logits = a * lp
        loss = TEMPERATURE_PENALTY * (a - 1.0) ** 2
        if bias is not None:
            logits = logits + bias * free
            held = THRESHOLD_PENALTY if qtype == "noul" else BIAS_PENALTY
            loss = loss + held * (bias * free).pow(2).sum()
        if beta is not None and protos is not None:
            logits = logits + beta * (vectors @ protos.T)
        if weight is not None:
            w = weight * free[:, None]
            logits = logits + vectors @ w.T
            loss = loss + penalty * w.pow(2).sum()
        loss = loss + torch.nn.functional.cross_entropy(logits, targets, weight=weights)
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    with torch.enable_grad():
        optimizer.step(loss_fn)  # type: ignore[no-untyped-call]
    fitted = _Fit(method, float(_bounded(log_a.detach())))
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


def _held_out(method: str, sign: int, q: Question, lp: torch.Tensor, vectors: torch.Tensor,
              targets: torch.Tensor, folds: list[int]) -> torch.Tensor:
    """Each label's probabilities from a fit on the other folds (``sign`` -1: fitted on ``-lp``)."""
    probs = torch.zeros_like(lp)
    for f in sorted(set(folds)):
        train = torch.tensor([x != f for x in folds])
        test = ~train
        center = vectors[train].mean(dim=0)
        fit = _fit(method, q.type, lp[train], vectors[train] - center, targets[train], sign)
        probs[test] = torch.softmax(apply_fit(fit, center, lp[test], vectors[test]), dim=-1)
    return probs


def fit_question(q: Question, lp: torch.Tensor, vectors: torch.Tensor, targets: torch.Tensor,
                 seed: int = 0, method: str = "auto", turn: bool = True) -> tuple[_Fit, torch.Tensor, QuestionReport]:
    """Choose (``method="auto"``) or take one candidate, fit it; ``(fit, center, report)``.

    With ``turn``, a yes/no whose labels' zero-shot AUC is at most :data:`TURN_AUC` is also fitted
    turned round (on ``-lp``, the chosen method's twin); the turn is kept if its cross-validated
    log-loss beats the chosen fit's by more than :data:`TURN_MARGIN`."""
    n = len(targets)
    folds = _folds(targets, seed)
    row_weight = row_weights(q.type, targets, lp.shape[1])
    losses: dict[str, float] = {}
    held: dict[str, torch.Tensor] = {}

    def log_loss(probs: torch.Tensor) -> float:
        row_loss = -torch.log(probs[torch.arange(n), targets].clamp_min(1e-12))
        return float((row_loss * row_weight).sum())

    if method == "linear":
        method = DEFAULT_LINEAR[q.type] if n >= LINEAR_MIN_LABELS else "temperature+bias"
    for method_ in (candidates(n) if method == "auto" else [method]):
        held[method_] = _held_out(method_, 1, q, lp, vectors, targets, folds)
        losses[method_] = log_loss(held[method_])
    lowest = min(losses.values())
    best = next(m for m in losses if losses[m] <= lowest + SELECTION_MARGIN)  # the simplest near the best
    best_probs, sign = held[best], 1
    if turn and q.type == "noul" and auc(lp, targets) <= TURN_AUC:
        twin = "temperature" if best == "zero-shot" else best  # a turn with no fit would be overconfident
        turned = _held_out(twin, -1, q, lp, vectors, targets, folds)
        losses[f"turned, {twin}"] = log_loss(turned)
        if losses[f"turned, {twin}"] < losses[best] - TURN_MARGIN:
            best, best_probs, sign = twin, turned, -1
    center = vectors.mean(dim=0)
    fit = _fit(best, q.type, lp, vectors - center, targets, sign)
    zero = torch.softmax(lp, dim=-1)
    report = QuestionReport(q.id, q.type, n, best, *scores(zero, targets), *scores(best_probs, targets),
                            {m: round(v, 4) for m, v in losses.items()},
                            zero.tolist(), best_probs.tolist(), targets.tolist(), turned=sign == -1)
    return fit, center, report
