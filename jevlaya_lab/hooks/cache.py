"""``PredictionCache``: serve repeated predictions from memory via ``ctx.skip()``.

Each state gets a key over the state, the questions, the model and the effective token budgets
(``ctx.max_len`` / ``ctx.head_max_len``, else the Agent's checkpoint config). At
``on_predict_start`` the call is served only when *every* state hits (a partial hit would still
need the forward pass); at ``on_predict_end`` a successful computed call stores one entry per
state. Served results are deep copies, so callers may mutate them freely.

What a demanding user would expect of a cache, and so what this one does:

- Keys respect order and types: dict key order and ``1`` vs ``"1"`` vs ``True`` give different
  keys, because the model reads them differently.
- Stored results drop ``routing`` (the Router adds the current decision on a hit) and the
  ``min_confidence`` fields (the Agent re-applies the current thresholds).
- Eviction is least-recently-used beyond ``max_entries``; :attr:`hits` / :attr:`misses` count
  calls, not states. Install it where it should act: on the Agent (after any redaction hook, so
  keys are over redacted states) or on the Router.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from typing import Any

from .base import BaseHook

__all__ = ["PredictionCache", "state_key"]

_DROPPED_FIELDS = ("routing",)
_DROPPED_ANSWER_FIELDS = ("abstention", "abstention_threshold", "low_confidence")


def _canonical(value: Any) -> Any:
    """A hashable, type-tagged, order-preserving form of a JSON-like value."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, float):
        return ("f", repr(value))
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("n",)
    if isinstance(value, (list, tuple)):
        return ("l", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("d", tuple((_canonical(k), _canonical(v)) for k, v in value.items()))
    return ("r", type(value).__qualname__, repr(value))


def state_key(state: Any, questions: Any, model: Any, max_len: Any, head_max_len: Any) -> str:
    """The cache key of one state under one call's questions, model and budgets."""
    material = repr((_canonical(state), _canonical(questions), str(model), max_len, head_max_len))
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


def _budgets(ctx: Any) -> tuple[Any, Any]:
    config = getattr(getattr(ctx, "agent", None), "config", None)
    max_len = ctx.max_len if ctx.max_len is not None else getattr(config, "max_len", None)
    head = ctx.head_max_len if ctx.head_max_len is not None else getattr(config, "head_max_len", None)
    return max_len, head


def _storable(result: Any) -> Any:
    if not isinstance(result, dict):
        return copy.deepcopy(result)
    stored = {k: copy.deepcopy(v) for k, v in result.items() if k not in _DROPPED_FIELDS}
    answers = stored.get("answers")
    if isinstance(answers, dict):
        for answer in answers.values():
            if isinstance(answer, dict):
                for name in _DROPPED_ANSWER_FIELDS:
                    answer.pop(name, None)
    return stored


class PredictionCache(BaseHook):
    """An in-memory LRU cache of per-state results, served only when every state hits."""

    def __init__(self, max_entries: int = 4096) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._pending: dict[Any, list[str]] = {}  # ctx -> keys of a call that will compute
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def keys_for(self, ctx: Any) -> list[str] | None:
        """The per-state keys of a call, or ``None`` when it cannot be cached."""
        states = ctx.states
        if not isinstance(states, (list, tuple)) or not states or not isinstance(ctx.questions, dict):
            return None
        max_len, head_max_len = _budgets(ctx)
        return [state_key(s, ctx.questions, ctx.model, max_len, head_max_len) for s in states]

    def on_predict_start(self, ctx: Any) -> None:
        if ctx.results is not None:  # an earlier hook already served this call
            return
        keys = self.keys_for(ctx)
        if keys is None:
            return
        with self._lock:
            found = [self._entries.get(k) for k in keys]
            if all(f is not None for f in found):
                for k in keys:
                    self._entries.move_to_end(k)
                self.hits += 1
                served = [copy.deepcopy(f) for f in found]
            else:
                self.misses += 1
                self._pending[ctx] = keys
                return
        ctx.skip(served)

    def on_predict_end(self, ctx: Any) -> None:
        with self._lock:
            keys = self._pending.pop(ctx, None)
        results = ctx.results
        if keys is None or ctx.error is not None or not isinstance(results, list) or len(results) != len(keys):
            return
        stored = [_storable(r) for r in results]
        with self._lock:
            for key, value in zip(keys, stored):
                self._entries[key] = value
                self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
