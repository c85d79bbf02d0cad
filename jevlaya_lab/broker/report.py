"""Read-only views of the pool and the journal: ``stats()`` and ``snapshot()``."""

from __future__ import annotations

import time
from typing import Any

from jevlaya_lab._rendering import render
from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.pool import Caller, ModelState, Pool, utc


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def summarize(rows: list[dict[str, Any]], pool: Pool,
              operation: str | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in pool.states:
        out[name] = {"attempts": 0, "statuses": {}, "latency_ms_p50": None,
                     "latency_ms_p95": None}
    latencies: dict[str, list[float]] = {}
    for row in rows:
        entry = out.setdefault(row["llm_name"], {"attempts": 0, "statuses": {}})
        entry["attempts"] += 1
        entry["statuses"][row["status"]] = entry["statuses"].get(row["status"], 0) + 1
        if row["status"] == "ok" and row["latency_ms"] is not None:
            latencies.setdefault(row["llm_name"], []).append(row["latency_ms"])
    for name, entry in out.items():
        lat = latencies.get(name, [])
        entry["latency_ms_p50"] = _percentile(lat, 0.5)
        entry["latency_ms_p95"] = _percentile(lat, 0.95)
        n, total = pool.quality.counts(name, operation)
        entry["ratings"] = n
        entry["mean_rating"] = total / n if n else None
        state = pool.states.get(name)
        if state is not None:
            entry["priority"] = pool.quality.priority(name, operation, state.entry.weight)
            entry["demoted"] = pool.quality.demoted(name, operation)
    return out


class LLMInfo:
    """``get(name)``: one registry model, read live (it follows ``disable_llm``, cooldowns and
    refusals as they happen). ``config`` is its entry; ``state()`` says where it stands now."""

    def __init__(self, state: ModelState, pool: Pool, caller: Caller) -> None:
        self._state = state
        self._pool = pool
        self._caller = caller

    @property
    def name(self) -> str:
        return self._state.entry.name

    @property
    def config(self) -> LLMConfig:
        return self._state.entry

    @property
    def disabled(self) -> bool:
        return self._state.disabled

    def state(self) -> dict[str, Any]:
        """``phase`` (``available``, ``cooling``, ``disabled``, ``unavailable``: it cannot
        start, or ``no key``: its key is missing or was refused, so no call can use it; only an
        ``available`` or ``cooling`` model can be in ``snapshot().usable``), ``cooldown_until``
        (UTC, while cooling), ``consecutive_failures``, ``key``
        (``present``/``missing``/``refused``/``not needed``), ``in_pool`` and the rest of
        the model's ``snapshot()`` row."""
        return model_row(self._pool, self._state, self._caller, time.time(),
                         {s.entry.name for s in self._pool.members(self._caller)})

    def __repr__(self) -> str:
        state = self.state()
        return f"<LLM {self.name} {state['phase']}, key {state['key']}>"


class PoolSnapshot(dict[str, dict[str, Any]]):
    """``snapshot()``: model name -> its state, plus ``.journal``, the journal writer's counters
    (rows ``waiting``, ``written``, ``failed``, ...), and the pool's health: ``.usable`` (the
    models that could take a call right now) and ``.degraded`` (none could: every model is
    cooling, refused, without a key, disabled or unable to start), kept apart so the items
    stay models only."""

    def __init__(self, models: dict[str, dict[str, Any]], *, journal: dict[str, Any],
                 usable: list[str] | None = None) -> None:
        super().__init__(models)
        self.journal = journal
        self.usable = list(usable or [])

    @property
    def degraded(self) -> bool:
        return not self.usable

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """A notebook shows one table row per model and a one-line summary, not ~170 lines."""
        bundle: dict[str, Any] = render("snapshot", self)
        return bundle


def pool_snapshot(pool: Pool, caller: Caller) -> dict[str, dict[str, Any]]:
    """Per model: cooldown, slots, disabled, key, demotions, missed waits; ``in_pool`` (is it
    in this caller's pool now), ``fallback`` (an embedded catalog model that joins only a
    caller without other models) and ``unavailable`` (why it cannot start, or ``None``)."""
    now = time.time()
    members = {s.entry.name for s in pool.members(caller)}
    return {name: model_row(pool, s, caller, now, members) for name, s in pool.states.items()}


def model_row(pool: Pool, s: ModelState, caller: Caller, now: float,
              members: set[str]) -> dict[str, Any]:
    """One model's row of ``snapshot()`` (and ``get(name).state()``)."""
    usable, _ = pool.key_for(s, caller)
    cooling = s.cooling(now)
    phase = ("disabled" if s.disabled else "unavailable" if s.unavailable is not None
             else "no key" if not usable else "cooling" if cooling else "available")
    return {
        "phase": phase, "model": s.entry.model, "base_url": s.entry.base_url,
        "api_key_ref": s.entry.api_key_ref,
        "cooldown_until": utc(s.cooldown_until) if cooling else None,
        "consecutive_failures": s.consecutive,
        "in_flight": s.in_flight, "parallel": s.entry.parallel,
        "disabled": s.disabled,
        "key": "not needed" if s.entry.api_key_ref is None else (
            "present" if usable else ("refused" if pool.refused(s, caller) else "missing")),
        "demoted_for": [op for op in pool.quality.operations(s.entry.name)
                        if pool.quality.demoted(s.entry.name, op)],
        "missed_waits": sorted({w for w, _ in s.missed_waits}),
        "recovering": s.recovering and not cooling,  # parallel_recovery races it
        "in_pool": s.entry.name in members, "fallback": s.fallback,
        "unavailable": s.unavailable,
    }
