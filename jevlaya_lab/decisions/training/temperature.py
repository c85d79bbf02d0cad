"""Temperature fitting per question type and option-count bucket on a held-out split.

For each type, and for each ``"<type>:<band>"`` bucket with at least ``min_bucket`` rows, the
temperature that minimises the negative log-likelihood of the gold option is chosen from a
log-spaced grid over the range the decoder accepts ([0.5, 5.0]); a grid search is exact enough
for one scalar and cannot diverge. Buckets with too few rows inherit their type's temperature
(and are left out of the table, so the decoder falls back to it as well).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from jevlaya_lab.decisions.calibration import TEMPERATURE_MAX, TEMPERATURE_MIN, bucket
from jevlaya_lab.decisions.questions import QUESTION_TYPES

__all__ = ["TemperatureFit", "fit_temperatures"]

GRID = [TEMPERATURE_MIN * (TEMPERATURE_MAX / TEMPERATURE_MIN) ** (i / 80) for i in range(81)]


@dataclass
class TemperatureFit:
    """Fitted temperatures and the held-out NLL before (T = 1) and after, per type and bucket."""

    temperature: list[float]  # one per QUESTION_TYPES entry
    temperature_by_options: dict[str, float]
    report: dict[str, dict[str, float]] = field(default_factory=dict)


def _best(logits: Sequence[torch.Tensor], golds: Sequence[int]) -> tuple[float, float, float]:
    """(temperature, nll at T=1, nll at the temperature)."""
    # one padded tensor makes the grid search a few vectorised ops
    k = max(len(x) for x in logits)
    padded = torch.full((len(logits), k), -1e4)
    for i, x in enumerate(logits):
        padded[i, : len(x)] = x
    gold = torch.tensor(list(golds))
    nlls = [(-torch.log_softmax(padded / t, dim=-1)[torch.arange(len(gold)), gold]).mean().item() for t in GRID]
    best = min(range(len(GRID)), key=nlls.__getitem__)
    base = (-torch.log_softmax(padded, dim=-1)[torch.arange(len(gold)), gold]).mean().item()
    return GRID[best], base, nlls[best]


def fit_temperatures(logits: Sequence[torch.Tensor], golds: Sequence[int], types: Sequence[str], *,
                     min_bucket: int = 30) -> TemperatureFit:
    """Fit temperatures from per-row option logits (caller order), gold indices and type names."""
    if not (len(logits) == len(golds) == len(types)):
        raise ValueError(f"logits ({len(logits)}), golds ({len(golds)}) and types ({len(types)}) "
                         "must have one entry per held-out row")
    per_type: list[float] = []
    report: dict[str, dict[str, float]] = {}
    by_options: dict[str, float] = {}
    for qtype in QUESTION_TYPES:
        rows = [i for i, t in enumerate(types) if t == qtype]
        if not rows:
            per_type.append(1.0)
            continue
        t, before, after = _best([logits[i] for i in rows], [golds[i] for i in rows])
        per_type.append(round(t, 4))
        report[qtype] = {"n": len(rows), "temperature": round(t, 4), "nll_before": round(before, 4),
                         "nll_after": round(after, 4)}
        groups: dict[str, list[int]] = {}
        for i in rows:
            groups.setdefault(bucket(qtype, len(logits[i])), []).append(i)
        for name, members in sorted(groups.items()):
            if len(members) < min_bucket:
                continue
            tb, b0, b1 = _best([logits[i] for i in members], [golds[i] for i in members])
            by_options[name] = round(tb, 4)
            report[name] = {"n": len(members), "temperature": round(tb, 4), "nll_before": round(b0, 4),
                            "nll_after": round(b1, 4)}
    if any(math.isnan(t) for t in per_type):
        raise ValueError("temperature fit produced NaN; the held-out logits contain NaN")
    return TemperatureFit(per_type, by_options, report)
