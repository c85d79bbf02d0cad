"""Pool state and ranking: cooldowns, refused keys, slots, learned wait bounds, demotion.

All methods run on the broker's event loop (no locks needed). Ranking key, in order: over the
learned wait bound, demoted for this operation, priority, registry order.

Who is in the pool: every registry entry, except the
embedded local models of the *catalog* (``local://`` entries such as ``local/smollm2``; marked
``fallback``). Those join a caller's pool only when that caller has no other model: no entry of
the user's own (``models=``) and no catalog entry whose key resolves for it. So ``Broker()``
with no keys answers from SmolLM2, while a pool of the user's endpoints never silently falls
back to a 135M local model when they fail or reject a request. ``AsyncBroker(local=True)``
makes them members always, ``local=False`` never; a ``local://`` entry the user configured
(``models=``) is an ordinary member. ``snapshot()`` shows ``in_pool`` and ``fallback``.

A model that was cooled down (rate limit, 5xx, transport error, no data in time) is
``recovering`` once the cooldown ends, until one of its attempts completes; the calls'
``parallel_recovery`` races such a model with another (:mod:`jevlaya_lab.broker.racing`).

A model that cannot start (an embedded model whose weights are missing or fail to load) is
marked ``unavailable`` once, with the loader's message (which names the install command); it is
no candidate from then on, never retried in a loop, until ``enable_llm(name)`` clears the mark.

Cooldowns can be shared beyond one pool through a :class:`CooldownBook` (``Pool(...,
cooldowns=book)``): every cooldown this pool sets is written to the book, and before ranking
the pool reads the book's end for each candidate, so a model cooled by another pool (another
process or worker sharing the book) is not asked here either. A book may also have
``take(name) -> float``: a request slot of a rate limit shared by every pool on the book (``0`` when
granted, else when the next slot opens); the pool then takes a slot for the model it offers
first. Without a book (the default) the cooldowns live in the pool's own :class:`ModelState`
objects and nothing else is read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.errors import NoLLMAvailableError
from jevlaya_lab.broker.http import Failure
from jevlaya_lab.broker.keys import KeyResolver, fingerprint
from jevlaya_lab.broker.quality import Quality

DEFAULT_COOLDOWN_S = 60.0
MAX_COOLDOWN_S = 3600.0
WAIT_MEMORY_S = 600.0  # a missed wait steers equally short requests away for 10 minutes


@dataclass
class ModelState:
    entry: LLMConfig
    order: int
    cooldown_until: float = 0.0  # time.time()
    consecutive: int = 0
    in_flight: int = 0
    disabled: bool = False
    fallback: bool = False  # an embedded catalog model: joins only a caller with no other model
    unavailable: str | None = None  # why it cannot start (set once; enable_llm clears it)
    recovering: bool = False  # cooled down since its last success (parallel_recovery races it)
    missed_waits: list[tuple[float, float]] = field(default_factory=list)  # (wait, monotonic)

    def cooling(self, now: float) -> bool:
        return self.cooldown_until > now


class CooldownBook(Protocol):
    """Cooldown ends (``time.time()`` values) shared by several pools, by model name."""

    def until(self, name: str) -> float:
        """When ``name``'s cooldown ends; ``0.0`` (or any past time) when it has none."""
        ...

    def extend(self, name: str, until: float) -> float:
        """Record that ``name`` cools until at least ``until``; the end that holds now (the
        later of ``until`` and the one already recorded)."""
        ...


class MemoryCooldowns:
    """A :class:`CooldownBook` in memory: pools of one process (e.g. several brokers) that
    share it see each other's cooldowns."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def until(self, name: str) -> float:
        return self._until.get(name, 0.0)

    def extend(self, name: str, until: float) -> float:
        held = max(self._until.get(name, 0.0), until)
        self._until[name] = held
        return held


@dataclass
class Caller:
    """Who is calling: a scope (``None`` for the broker itself) and the keys refused to it.

    A refused key is remembered by its fingerprint: the model stays out of this caller's pool
    while the same key resolves, and comes back as soon as another key does (a new
    ``store_key``, ``.env`` line or environment variable)."""

    scope: str | None = None
    refused: dict[str, str] = field(default_factory=dict)  # model name -> refused key's digest


@dataclass
class Pick:
    """What the pool can offer a call right now."""

    ready: list[ModelState]  # ranked, not cooling, with a free slot
    waiting: list[ModelState]  # candidates that are cooling or full
    retry_at: float | None  # earliest cooldown end among the cooling ones (time.time())


def empty_pool_error(pool: Pool) -> NoLLMAvailableError:
    return NoLLMAvailableError(
        "the pool is empty: add models (models=[...]) or use the packaged catalog"
        + (" (local=False keeps the embedded local models out)"
           if pool.local is False and pool.states else ""), reason="empty_pool")


def utc(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts else None


class Pool:
    def __init__(self, entries: list[LLMConfig], keys: KeyResolver, quality: Quality,
                 *, optimize: bool = True, fallback: frozenset[str] = frozenset(),
                 local: bool | None = None, cooldowns: CooldownBook | None = None,
                 own: frozenset[str] | None = None) -> None:
        self.keys = keys
        self.cooldowns = cooldowns
        # the broker's own entries (models=); None: every entry counts as its own (tests, tools)
        self.own = own
        self.quality = quality
        self.optimize = optimize
        self.local = local
        self.states: dict[str, ModelState] = {
            e.name: ModelState(e, i, fallback=e.name in fallback) for i, e in enumerate(entries)}
        self.retired: dict[str, ModelState] = {}  # left the catalog; attempts may still run
        self._waiters: set[asyncio.Future[None]] = set()

    def update(self, entries: list[LLMConfig], fallback: frozenset[str],
               disabled: set[str]) -> None:
        """Take a new registry (a catalog ``sync()``): models that stay keep their state
        (cooldown, slots, disabled, recovery), new ones join (``disabled``: the stored marks),
        removed ones retire (their running attempts still end here)."""
        states: dict[str, ModelState] = {}
        for i, entry in enumerate(entries):
            state = self.states.get(entry.name) or self.retired.pop(entry.name, None)
            if state is None:
                state = ModelState(entry, i, disabled=entry.name in disabled)
            state.entry, state.order = entry, i
            state.fallback = entry.name in fallback
            states[entry.name] = state
        for name, state in self.states.items():
            if name not in states:
                self.retired[name] = state
        self.states = states
        self.notify()

    def _state(self, name: str) -> ModelState:
        return self.states.get(name) or self.retired[name]

    # membership --------------------------------------------------------------------------------
    def has_key(self, state: ModelState, caller: Caller) -> bool:
        """Does a key resolve for this caller (refused or not)? Keyless entries need none."""
        ref = state.entry.api_key_ref
        return ref is None or self.keys.resolve(ref, caller.scope) is not None

    def members(self, caller: Caller) -> list[ModelState]:
        """The entries in this caller's pool (see the module docstring): the broker's own
        entries, the registry's provider models whose key resolves for this caller, and the
        embedded fallback. A catalog model without its key is no member, so ``count()``,
        ``in_pool`` and ``usable`` agree on what the pool can call."""
        states = [s for s in self.states.values()
                  if s.fallback or self.own is None or s.entry.name in self.own or self.has_key(s, caller)]
        if self.local is True:
            return states
        own = [s for s in states if not s.fallback]
        if self.local is False or any(self.has_key(s, caller) for s in own):
            return own
        return states

    # candidates and ranking -------------------------------------------------------------------
    def key_for(self, state: ModelState, caller: Caller) -> tuple[bool, str | None]:
        """(usable, key): an entry without ``api_key_ref`` needs no key; a key refused to
        this caller is not usable until another key resolves."""
        ref = state.entry.api_key_ref
        key = self.keys.resolve(ref, caller.scope) if ref is not None else None
        if ref is not None and key is None:
            return False, None
        refused = caller.refused.get(state.entry.name)
        if refused is not None:
            if refused == fingerprint(key or ""):
                return False, None
            del caller.refused[state.entry.name]  # a new key: try it
        return True, key

    def usable(self, caller: Caller) -> list[str]:
        """The names of this caller's models that could take a call right now."""
        now = time.time()
        return [s.entry.name for s in self.members(caller)
                if not s.disabled and s.unavailable is None and not s.cooling(now)
                and self.key_for(s, caller)[0]]

    def refused(self, state: ModelState, caller: Caller) -> bool:
        """Is the key this caller would use the one a provider refused?"""
        return not self.key_for(state, caller)[0] and state.entry.name in caller.refused

    def keyless_refs(self) -> list[str]:
        """The key names the catalog's enabled models wait for (they join the pool once set)."""
        return sorted({s.entry.api_key_ref for s in self.states.values()
                       if not s.fallback and s.entry.api_key_ref and not s.disabled})

    def pick(self, caller: Caller, exclude: set[str], operation: str | None,
             wait: float | None) -> Pick:
        """Rank what may serve this call; raise ``NoLLMAvailableError`` when nothing ever can."""
        states = self.members(caller)
        if not states:
            keyless = self.keyless_refs()
            if keyless:  # catalog models wait for their keys: say which keys would do
                raise NoLLMAvailableError(
                    f"no key for any model of the catalog (scope={caller.scope!r}); set one of "
                    f"{', '.join(keyless)} in the environment, a .env file, secrets= or the "
                    "database" + (" (local=False keeps the embedded local models out)"
                                  if self.local is False else ""), reason="no_keys")
            raise empty_pool_error(self)
        # one pass: enabled, startable (no unavailable mark), keyed, not excluded for this call
        candidates: list[ModelState] = []
        enabled = keyed = False
        for s in states:
            if s.disabled:
                continue
            enabled = True
            if s.unavailable is None and self.key_for(s, caller)[0]:
                keyed = True
                if s.entry.name not in exclude:
                    candidates.append(s)
        if not enabled:
            raise NoLLMAvailableError(f"every model is disabled ({', '.join(s.entry.name for s in states)}); "
                                      "call enable_llm(name)", reason="all_disabled")
        if not keyed:
            startable = [s for s in states if not s.disabled and s.unavailable is None]
            broken = "".join(f"; {s.entry.name} cannot start: {s.unavailable}"
                             for s in states if not s.disabled and s.unavailable is not None)
            refs = sorted({s.entry.api_key_ref or "" for s in startable} - {""})
            refused = sorted(s.entry.name for s in startable if self.refused(s, caller))
            if refused:
                broken += (f"; the key of {', '.join(refused)} was refused (401/403): store "
                           "another with store_key() or change .env or the environment, it is "
                           "read again")
            if not refs:  # the catalog's models wait outside the pool for their keys: name them
                refs = self.keyless_refs()
            if not refs:
                raise NoLLMAvailableError(
                    f"every model is disabled or cannot start{broken}; fix that, then call "
                    "enable_llm(name) to try it again", reason="all_disabled")
            raise NoLLMAvailableError(
                f"no key for any enabled model (scope={caller.scope!r}); set one of "
                f"{', '.join(refs)} in the environment, a .env file, secrets= or the database"
                + broken, reason="no_keys")
        if self.cooldowns is not None:
            self.read_cooldowns(candidates)
        if not candidates:
            raise NoLLMAvailableError(
                f"every model was tried or ruled out for this call ({', '.join(sorted(exclude))})",
                reason="excluded")
        now = time.time()
        ready: list[ModelState] = []
        waiting: list[ModelState] = []
        cooling: list[float] = []
        for s in candidates:
            if s.cooling(now):
                waiting.append(s)
                cooling.append(s.cooldown_until)
            elif s.in_flight < s.entry.parallel:
                ready.append(s)
            else:
                waiting.append(s)
        ranked = self.rank(ready, operation, wait)
        take = getattr(self.cooldowns, "take", None)
        while ranked and take is not None:  # a shared rate limit: the first model must get a request slot
            next_slot = float(take(ranked[0].entry.name))
            if next_slot <= 0:
                break
            waiting.append(ranked.pop(0))
            cooling.append(next_slot)
        return Pick(ranked, waiting, min(cooling) if cooling else None)

    def rank(self, states: list[ModelState], operation: str | None,
             wait: float | None) -> list[ModelState]:
        if len(states) < 2:  # nothing to order (the missed waits are still pruned, as below)
            if states and self.optimize:
                self.over_wait_bound(states[0], wait)
            return list(states)
        if not self.optimize:
            return sorted(states, key=lambda s: s.order)
        return sorted(states, key=lambda s: (
            self.over_wait_bound(s, wait), self.quality.demoted(s.entry.name, operation),
            -self.quality.priority(s.entry.name, operation, s.entry.weight), s.order))

    def over_wait_bound(self, state: ModelState, wait: float | None) -> bool:
        if not wait or wait <= 0:
            return False
        horizon = time.monotonic() - WAIT_MEMORY_S
        state.missed_waits = [(w, t) for w, t in state.missed_waits if t > horizon]
        return any(wait <= w for w, _ in state.missed_waits)

    # outcomes ----------------------------------------------------------------------------------
    def succeeded(self, name: str) -> None:
        state = self._state(name)
        state.consecutive = 0
        state.recovering = False

    def failed(self, name: str, failure: Failure, caller: Caller) -> float | None:
        """Apply the failure table; returns the cooldown end (time.time()) if one was set."""
        state = self._state(name)
        if failure.kind == "cannot_start":
            state.unavailable = failure.detail
            self.notify()
            return None
        if failure.kind == "auth":
            ref = state.entry.api_key_ref
            key = self.keys.resolve(ref, caller.scope) if ref else None
            caller.refused[name] = fingerprint(key or "")
            if ref:
                self.keys.forget()  # a key stored meanwhile by another process is read soon
            if self.cooldowns is not None:  # pools sharing the book use the same keys: keep them off too
                self.cooldowns.extend(name, time.time() + DEFAULT_COOLDOWN_S)
            return None
        if failure.kind in ("rejected", "interrupted"):
            return None
        state.consecutive += 1
        if failure.kind == "rate_limited" or failure.status == 503:
            base = failure.retry_after if failure.retry_after is not None else DEFAULT_COOLDOWN_S
            seconds = min(MAX_COOLDOWN_S, base * 2 ** (state.consecutive - 1))
        else:
            seconds = DEFAULT_COOLDOWN_S
        return self.cool(name, seconds)

    def read_cooldowns(self, states: list[ModelState]) -> None:
        """Take the shared book's cooldowns that end later than the ones known here (a model
        cooled elsewhere is recovering here too once its cooldown ends)."""
        assert self.cooldowns is not None
        for state in states:
            until = self.cooldowns.until(state.entry.name)
            if until > state.cooldown_until:
                state.cooldown_until = until
                state.recovering = True

    def cool(self, name: str, seconds: float) -> float:
        state = self._state(name)
        state.cooldown_until = max(state.cooldown_until, time.time() + seconds)
        if self.cooldowns is not None:
            state.cooldown_until = self.cooldowns.extend(name, state.cooldown_until)
        state.recovering = True  # until it answers again
        self.notify()
        return state.cooldown_until

    def missed_wait(self, name: str, wait: float) -> None:
        self._state(name).missed_waits.append((wait, time.monotonic()))

    # slots -------------------------------------------------------------------------------------
    def acquire(self, name: str) -> None:
        self._state(name).in_flight += 1

    def release(self, name: str) -> None:
        self._state(name).in_flight -= 1
        self.notify()

    def notify(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def changed(self, timeout: float | None) -> None:
        """Return when a slot frees or a cooldown changes, or after ``timeout`` seconds."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(fut)
