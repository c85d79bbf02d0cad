"""Quality metrics for typed answers: accuracy, score error and expected calibration error.

All functions take per-row option probabilities in caller order plus the gold option index, so
they serve the trainer's held-out split and the evaluation report alike.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Sequence

__all__ = ["accuracy", "balanced_accuracy", "calibrated_ece", "expected_calibration_error", "expected_level",
           "mean_absolute_error", "summarize"]


def accuracy(probs: Sequence[Sequence[float]], golds: Sequence[int]) -> float:
    """Share of rows whose most probable option is the gold one."""
    _check(probs, golds)
    hits = sum(max(range(len(p)), key=p.__getitem__) == g for p, g in zip(probs, golds))
    return hits / len(golds) if golds else math.nan


def balanced_accuracy(probs: Sequence[Sequence[float]], golds: Sequence[int]) -> float:
    """Mean over the gold classes present of each class's recall (yes/no: (TPR + TNR) / 2)."""
    _check(probs, golds)
    recalls = []
    for cls in sorted(set(golds)):
        rows = [p for p, g in zip(probs, golds) if g == cls]
        recalls.append(sum(max(range(len(p)), key=p.__getitem__) == cls for p in rows) / len(rows))
    return sum(recalls) / len(recalls) if recalls else math.nan


def expected_level(p: Sequence[float]) -> float:
    """A score answer: the expected level sum(i * p_i)."""
    return sum(i * pi for i, pi in enumerate(p))


def mean_absolute_error(probs: Sequence[Sequence[float]], golds: Sequence[int]) -> float:
    """Mean |expected level - gold level| for score questions."""
    _check(probs, golds)
    return sum(abs(expected_level(p) - g) for p, g in zip(probs, golds)) / len(golds) if golds else math.nan


def expected_calibration_error(probs: Sequence[Sequence[float]], golds: Sequence[int], *, bins: int = 10) -> float:
    """ECE over ``bins`` equal-width bins of top-1 probability (for noul: max(p, 1 - p))."""
    _check(probs, golds)
    if not golds:
        return math.nan
    totals = [[0, 0.0, 0.0] for _ in range(bins)]  # count, confidence sum, hit sum
    for p, g in zip(probs, golds):
        top = max(range(len(p)), key=p.__getitem__)
        conf = p[top]
        b = min(bins - 1, int(conf * bins))
        totals[b][0] += 1
        totals[b][1] += conf
        totals[b][2] += float(top == g)
    return sum(abs(c - h) for n, c, h in totals if n) / len(golds)


def calibrated_ece(probs: Sequence[Sequence[float]], *, draws: int = 200, seed: int = 0, bins: int = 10) -> float:
    """The mean ECE that a perfectly calibrated model with these very probabilities would show on
    this many rows: each draw picks every row's gold from the row's own probabilities.

    ECE over a few dozen rows is biased upward (each of 10 bins holds a handful of rows), so a
    measured ECE means little without it: an ECE near this value is what sampling alone gives, and
    only the excess above it is miscalibration. Seeded, so reports are reproducible."""
    if not probs:
        return math.nan
    rng = random.Random(seed)
    cumulative = [list(itertools.accumulate(p)) for p in probs]
    total = 0.0
    for _ in range(draws):
        golds = [min(bisect.bisect_right(c, rng.random() * c[-1]), len(c) - 1) for c in cumulative]
        total += expected_calibration_error(probs, golds, bins=bins)
    return total / draws


def summarize(qtype: str, probs: Sequence[Sequence[float]], golds: Sequence[int]) -> dict[str, float]:
    """The report row of one question: ``n``, ``accuracy``, ``ece``; ``balanced_accuracy`` for noul;
    ``mae`` for scores."""
    row = {"n": len(golds), "accuracy": round(accuracy(probs, golds), 4),
           "ece": round(expected_calibration_error(probs, golds), 4)}
    if qtype == "noul":
        row["balanced_accuracy"] = round(balanced_accuracy(probs, golds), 4)
    if qtype == "score":
        row["mae"] = round(mean_absolute_error(probs, golds), 4)
    return row


def _check(probs: Sequence[Sequence[float]], golds: Sequence[int]) -> None:
    if len(probs) != len(golds):
        raise ValueError(f"probs has {len(probs)} rows but golds has {len(golds)}; pass one gold index per row")
