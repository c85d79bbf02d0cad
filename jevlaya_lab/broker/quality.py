"""Learned quality per (model, operation): a curated prior blended with this host's ratings.

``priority = (weight * PRIOR_RATINGS + sum of scores) / (PRIOR_RATINGS + n)``: the catalog's
weight counts as ``PRIOR_RATINGS`` ratings, so a few host ratings nudge the order and many
decide it. A model is *demoted* for an operation when at least ``DEMOTE_MIN_RATINGS`` ratings
put the Wilson upper bound of its mean score below ``DEMOTE_BELOW``.
"""

from __future__ import annotations

import math
import threading

PRIOR_RATINGS = 5.0
DEMOTE_MIN_RATINGS = 10
DEMOTE_BELOW = 0.3
_Z = 1.96


def wilson_upper(mean: float, n: int, z: float = _Z) -> float:
    """Upper bound of the Wilson score interval for a mean score in [0, 1] over n ratings."""
    if n <= 0:
        return 1.0
    z2 = z * z
    centre = mean + z2 / (2 * n)
    spread = z * math.sqrt(max(mean * (1 - mean), 0.0) / n + z2 / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z2 / n))


class Quality:
    """Rating totals in memory, seeded from the journal, updated on every rating."""

    def __init__(self, totals: dict[tuple[str, str], tuple[int, float]] | None = None) -> None:
        self._totals = dict(totals or {})
        self._lock = threading.Lock()

    def add(self, llm_name: str, operation: str | None, score: float) -> None:
        key = (llm_name, operation or "")
        with self._lock:
            n, s = self._totals.get(key, (0, 0.0))
            self._totals[key] = (n + 1, s + score)

    def counts(self, llm_name: str, operation: str | None) -> tuple[int, float]:
        return self._totals.get((llm_name, operation or ""), (0, 0.0))

    def priority(self, llm_name: str, operation: str | None, weight: float) -> float:
        n, s = self.counts(llm_name, operation)
        return (weight * PRIOR_RATINGS + s) / (PRIOR_RATINGS + n)

    def demoted(self, llm_name: str, operation: str | None) -> bool:
        n, s = self.counts(llm_name, operation)
        return n >= DEMOTE_MIN_RATINGS and wilson_upper(s / n, n) < DEMOTE_BELOW

    def operations(self, llm_name: str) -> list[str]:
        return sorted(op for (name, op) in self._totals if name == llm_name)
