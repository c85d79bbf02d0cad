"""Learned quality per (model, operation): a curated prior blended with this host's ratings.

Only the last ``WINDOW`` (30) rated answers of each (model, operation) count, so a model that
got worse is noticed whatever its past; rating the same answer (``call_id``) again replaces
its earlier score instead of counting twice (the newer rating moves to the end of the window).
``priority = (weight * PRIOR_RATINGS + sum of scores) / (PRIOR_RATINGS + n)`` over that
window: the catalog's weight counts as ``PRIOR_RATINGS`` ratings, so a few host ratings nudge
the order and many decide it. A model is *demoted* for an operation when at least
``DEMOTE_MIN_RATINGS`` ratings in the window put the Wilson upper bound of its mean score
below ``DEMOTE_BELOW``. The window is rebuilt from the journal's rating rows when a broker
starts.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

WINDOW = 30
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
    """The rating windows in memory, seeded from the journal, updated on every rating."""

    def __init__(self, ratings: Iterable[Mapping[str, Any]] = ()) -> None:
        self._windows: dict[tuple[str, str], OrderedDict[str, float]] = {}
        self._lock = threading.Lock()
        for row in ratings:  # journal rating rows, oldest first
            self.add(row["llm_name"], row["operation"], float(row["score"]), row["call_id"])

    def add(self, llm_name: str, operation: str | None, score: float, call_id: str) -> None:
        key = (llm_name, operation or "")
        with self._lock:
            window = self._windows.setdefault(key, OrderedDict())
            window.pop(call_id, None)  # a re-rating replaces the earlier score
            window[call_id] = score
            while len(window) > WINDOW:
                window.popitem(last=False)

    def counts(self, llm_name: str, operation: str | None) -> tuple[int, float]:
        """(ratings in the window, their sum)."""
        window = self._windows.get((llm_name, operation or ""))
        if not window:
            return 0, 0.0
        with self._lock:
            scores = list(window.values())
        return len(scores), sum(scores)

    def priority(self, llm_name: str, operation: str | None, weight: float) -> float:
        n, s = self.counts(llm_name, operation)
        return (weight * PRIOR_RATINGS + s) / (PRIOR_RATINGS + n)

    def demoted(self, llm_name: str, operation: str | None) -> bool:
        n, s = self.counts(llm_name, operation)
        return n >= DEMOTE_MIN_RATINGS and wilson_upper(s / n, n) < DEMOTE_BELOW

    def operations(self, llm_name: str) -> list[str]:
        return sorted(op for (name, op) in self._windows if name == llm_name)
