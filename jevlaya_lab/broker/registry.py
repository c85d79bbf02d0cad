"""``Registry``: the stored model list made into a pool, and kept current.

It fills the database's registry from the catalog and the caller's own entries, builds the
:class:`~jevlaya_lab.broker.pool.Pool` from it (this broker's ``models=`` first, in the order
given; the stored ``disable_llm`` marks applied), applies ``sync()`` to the database and the
live pool, and enforces journal retention. Everything that reads or writes the database runs
off the event loop (``asyncio.to_thread``), or in :meth:`build_pool`, which the runtime calls
from a worker thread.

It also answers "which model does this name mean" for ``get``/``disable_llm`` (:meth:`state`)
and ``direct()`` (:meth:`direct_state`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from jevlaya_lab.broker.catalog import (
    CatalogSource,
    SyncReport,
    configured,
    describe,
    fill_store,
    sync_store,
)
from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.errors import UnknownLLMError
from jevlaya_lab.broker.keys import KeyResolver, redact
from jevlaya_lab.broker.pool import Caller, CooldownBook, ModelState, Pool
from jevlaya_lab.broker.quality import Quality
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.broker")
PURGE_INTERVAL_S = 3600.0  # journal retention is enforced at most hourly


class Registry:
    """See the module docstring. ``cooldowns``: a shared :class:`CooldownBook` for the pool
    it builds (``None``: each pool keeps its own)."""

    def __init__(self, store: Store, keys: KeyResolver, *, user_models: list[LLMConfig],
                 direct_states: dict[str, ModelState], catalog: CatalogSource, optimize: bool,
                 local: bool | None, retention_days: float, sync_interval: float | None,
                 cooldowns: CooldownBook | None = None) -> None:
        self.store = store
        self.keys = keys
        self.user_models = user_models
        self.direct_states = direct_states  # models reached only with direct(): never stored
        self.catalog = catalog
        self.cooldowns = cooldowns
        self.last_sync: SyncReport | None = None
        self._optimize = optimize
        self._local = local
        self._retention_days = retention_days
        self._sync_interval = sync_interval
        self._next_purge = math.inf
        self._next_sync = math.inf
        self._sync_task: asyncio.Task[None] | None = None

    # building ----------------------------------------------------------------------------------
    def build_pool(self) -> Pool:
        """Fill the registry and build the pool (blocking IO: run it off the event loop)."""
        self.keys.load_stored()  # routing reads this copy: no key lookup queries the database
        fill_store(self.store, self.catalog)
        if self.user_models:
            self.store.put_user_models([m.to_dict() for m in self.user_models])
        self.store.purge(self._retention_days)
        self._next_purge = time.monotonic() + PURGE_INTERVAL_S
        self._next_sync = time.monotonic() + (self._sync_interval or math.inf)
        entries, fallback = self.entries()
        pool = Pool(entries, self.keys, Quality(self.store.ratings()),
                    optimize=self._optimize, fallback=fallback, local=self._local,
                    cooldowns=self.cooldowns)
        for name in self.store.disabled_models() & pool.states.keys():  # disable_llm persists
            pool.states[name].disabled = True
        return pool

    def entries(self) -> tuple[list[LLMConfig], frozenset[str]]:
        """The registry's entries in pool order and the embedded catalog ones (blocking IO)."""
        rows = self.store.registry()
        mine_cfg = {m.name: m for m in self.user_models}  # with their aliases (not stored)
        entries = [mine_cfg.get(row["name"]) or
                   LLMConfig.coerce({k: v for k, v in row.items() if k != "origin"})
                   for row in rows]
        clash = sorted(self.direct_states.keys() & {e.name for e in entries})
        if clash:
            raise ValueError(f"direct= declares {clash[0]!r}, and the registry has a model of "
                             "that name already; drop one of the two (every registry model is "
                             "reachable with direct(name=...))")
        fallback = frozenset(row["name"] for row, entry in zip(rows, entries, strict=True)
                             if row.get("origin") == "catalog" and entry.is_local)
        # this broker's own entries first, in the order given; the rest keep registry order
        mine = {m.name: i for i, m in enumerate(self.user_models)}
        entries.sort(key=lambda e: mine.get(e.name, len(mine)))
        return entries, fallback

    # keeping it current ------------------------------------------------------------------------
    def housekeeping(self, pool: Pool, caller: Caller) -> None:
        """On a call: purge old journal rows hourly, start a due catalog sync in the
        background (neither delays the call)."""
        now = time.monotonic()
        if now > self._next_purge:
            self._next_purge = now + PURGE_INTERVAL_S
            asyncio.get_running_loop().run_in_executor(
                None, self.store.purge, self._retention_days)
        if now > self._next_sync:
            self._sync_soon(pool, caller)

    async def sync(self, pool: Pool, caller: Caller,
                   source: CatalogSource) -> SyncReport | None:
        """Read the catalog source again and apply it to the database and the live pool
        (:mod:`jevlaya_lab.broker.catalog`); ``None`` when no source is configured."""
        source = configured(source if source is not None else self.catalog)
        if source is None:
            return None
        before = len(pool.usable(caller))

        def apply() -> tuple[tuple[bool, tuple[str, ...], tuple[str, ...], tuple[str, ...]],
                             tuple[list[LLMConfig], frozenset[str]] | None, set[str]]:
            done = sync_store(self.store, source)
            return done, (self.entries() if done[0] else None), self.store.disabled_models()
        (applied, added, updated, removed), registry, disabled = await asyncio.to_thread(apply)
        if registry is not None:
            pool.update(*registry, disabled)
        report = SyncReport(describe(source), applied, added, updated, removed, before,
                            len(pool.usable(caller)))
        self.last_sync = report
        return report

    def _sync_soon(self, pool: Pool, caller: Caller) -> None:
        """Start a background ``sync()`` when the interval has passed."""
        if self._sync_task is not None and not self._sync_task.done():
            return
        self._next_sync = time.monotonic() + (self._sync_interval or math.inf)
        source = self.catalog if self.catalog is not None else configured(None)
        if not isinstance(source, (str, os.PathLike)):
            return  # a list (or nothing) does not change by itself

        async def run() -> None:
            try:
                await self.sync(pool, caller, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed refresh must not break calls
                log.warning("automatic catalog sync from %s failed (%s: %s); the current list "
                            "stands", describe(source), type(exc).__name__, redact(str(exc)))
        self._sync_task = asyncio.ensure_future(run())

    async def stop(self) -> None:
        """Cancel a background sync (closing)."""
        if self._sync_task is not None and not self._sync_task.done():
            self._sync_task.cancel()
            await asyncio.gather(self._sync_task, return_exceptions=True)

    # lookups -----------------------------------------------------------------------------------
    def direct_state(self, pool: Pool, alias: str | None, name: str | None) -> ModelState:
        """The model ``direct(alias)`` / ``direct(name=...)`` means.

        ``name=`` looks in the ``direct=`` entries, then the registry. An alias looks in the
        aliases of this broker's entries; when none matches, a name (so ``direct("a")``
        reaches registry model ``a``)."""
        known = {**pool.states, **self.direct_states}
        if name is not None:
            state = known.get(name)
            if state is None:
                raise UnknownLLMError(f"direct(name={name!r}): no model of that name; known: "
                                      f"{', '.join(known) or '(none)'}")
            return state
        aliases = {s.entry.alias: s for s in known.values() if s.entry.alias is not None}
        state = aliases.get(alias) or known.get(alias)  # type: ignore[arg-type]
        if state is None:
            raise UnknownLLMError(
                f"direct({alias!r}): no model has this alias or name; aliases: "
                f"{', '.join(sorted(aliases)) or '(none)'}; names: {', '.join(known) or '(none)'}"
                " (declare one with direct=[LLMConfig(..., alias=...)])")
        return state

    @staticmethod
    def state(pool: Pool, name: str) -> ModelState:
        """The registry model ``name`` (a ``KeyError`` naming the known ones)."""
        if name not in pool.states:
            raise KeyError(f"llm name {name!r} is not in the registry; known: "
                           f"{', '.join(pool.states) or '(none)'}")
        return pool.states[name]


def check_user_models(models: Sequence[Any] | None) -> list[LLMConfig]:
    """The caller's own entries as ``LLMConfig``; duplicate names are a ``ValueError``."""
    user_models = [LLMConfig.coerce(m) for m in models or []]
    names = [m.name for m in user_models]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"models: duplicate name(s) {dup}; each entry needs its own name")
    return user_models
