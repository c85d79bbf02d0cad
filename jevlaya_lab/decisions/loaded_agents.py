"""``LoadedAgents``: the resident Agents of one Router, least recently used first.

At most ``max_loaded`` Agents stay resident. Concurrent loads of one name share a single build,
and a failed build raises in every waiter. Only bookkeeping runs under the lock, and the build
itself runs outside it, so loading one checkpoint (seconds) never blocks threads that use a
resident one; the Router fires ``on_evict`` / ``on_load`` after the lock is released.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["LoadedAgents"]


class LoadedAgents:
    """The resident Agents of one Router, least recently used first, at most ``max_loaded``.

    ``build(name)`` makes an Agent for a canonical name. Methods return what was evicted so
    the caller can fire hooks after the lock is released.
    """

    def __init__(self, build: Callable[[str], Any], max_loaded: int | None):
        self._build = build
        self.max_loaded = max_loaded
        self._lock = threading.Lock()
        self._agents: OrderedDict[str, Any] = OrderedDict()
        self._building: dict[str, Future[Any]] = {}

    def get(self, name: str, build: Callable[[str], Any] | None = None) -> tuple[Any, bool, list[tuple[str, Any]]]:
        """``(agent, built_now, evicted)`` for ``name``, building it (with ``build`` when given)
        if it is not resident."""
        with self._lock:
            if name in self._agents:
                self._agents.move_to_end(name)
                return self._agents[name], False, []
            pending = self._building.get(name)
            if pending is None:
                pending = self._building[name] = Future()
                owner = True
            else:
                owner = False
        if not owner:
            return pending.result(), False, []  # a failed build raises here in every waiter
        try:
            agent = (build or self._build)(name)
        except BaseException as exc:
            with self._lock:
                del self._building[name]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._building[name]
            self._agents[name] = agent
            evicted = self._evict_over_limit(keep=name)
        pending.set_result(agent)
        return agent, True, evicted

    def attach(self, name: str, agent: Any) -> list[tuple[str, Any]]:
        """Make ``agent`` the resident Agent of ``name``; returns what was evicted or replaced."""
        with self._lock:
            previous = self._agents.pop(name, None)
            self._agents[name] = agent
            evicted = self._evict_over_limit(keep=name)
        if previous is not None and previous is not agent:
            evicted.insert(0, (name, previous))
        return evicted

    def remove(self, name: str | None = None) -> list[tuple[str, Any]]:
        """Drop ``name`` (or every Agent, least recent first); returns what was dropped."""
        with self._lock:
            if name is None:
                dropped = list(self._agents.items())
                self._agents.clear()
                return dropped
            agent = self._agents.pop(name, None)
        return [] if agent is None else [(name, agent)]

    def _evict_over_limit(self, keep: str) -> list[tuple[str, Any]]:
        evicted = []
        while self.max_loaded is not None and len(self._agents) > self.max_loaded:
            victim = next(n for n in self._agents if n != keep)
            evicted.append((victim, self._agents.pop(victim)))
        return evicted

    @property
    def names(self) -> tuple[str, ...]:
        """Resident names, least recently used first."""
        with self._lock:
            return tuple(self._agents)
