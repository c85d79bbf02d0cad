"""``AsyncBroker``: the public async API over the parts the runtime assembles.

A call runs top to bottom (``docs/broker.md``): ``scoped`` (the call methods: validate, get
the parts) -> ``racing.route`` (complete answers) or a stream core (``stream_core``,
``stream_race``) -> ``attempt`` (one request, ended and journaled once) -> ``transport``,
``pool``, ``journaling``. ``runtime`` builds and closes the parts; ``registry`` makes the pool.

One call = one ``trace_id`` and one :class:`~jevlaya_lab.broker.budget.Budget`; each request to
a model is an :class:`~jevlaya_lab.broker.attempt.Attempt` (a lane) with its own ``call_id`` and
journal row. ``fastest_of=N`` runs N lanes on distinct models; the first complete answer wins,
the rest are cancelled and journaled ``superseded``; a failed lane is refilled from models this
call has not tried. Journal rows go to a background writer, so the hot path does no disk IO.

Every call has a hard ceiling on its attempts (``max_attempts``, ``max_attempts_per_model``; see
:mod:`jevlaya_lab.broker.limits`), so it writes a bounded number of journal rows whatever its
providers answer. Which models are in the pool, and what happens to an embedded model that
cannot start, is documented in :mod:`jevlaya_lab.broker.pool`.

Choices a user would otherwise have to guess: ``wait=None`` waits for the pool without a
time bound, cooldowns included (as llmbroker; the attempt ceilings still end a call whose
models keep failing), each attempt still times out after 60 s; a negative or NaN ``wait`` is a
``ValueError``; ``optimize=False`` ranks by
registry order only (no learned wait bound, demotion or ratings); prompt and answer text are
journaled only with ``store_text=True``; ``record_quality(trace_id=...)`` refuses to guess when
several answers of that trace succeeded.

Closing (``aclose()``, leaving ``async with``, ``Broker.close()`` from any thread) never loses a
journal row. In order: (1) the broker stops taking calls: a new ``ask``/``chat``/``stream``
raises :class:`~jevlaya_lab.broker.errors.BrokerClosedError` (a ``RuntimeError`` too);
(2) open streams are closed (their lanes journaled ``cancelled``/``superseded``); (3) calls in
flight get ``grace`` seconds (default 0) to finish, then their attempts are cancelled, each
journaled ``cancelled``, and their callers get ``BrokerClosedError``; (4) the journal writer
writes every queued row; (5) HTTP, the embedded server and storage close. A caller who cancels
its own call still gets ``CancelledError``. Closing twice is harmless; a second ``aclose()``
returns once the first has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jevlaya_lab.broker.catalog import CatalogSource, SyncReport
from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.direct import AsyncDirect
from jevlaya_lab.broker.keys import KeyResolver
from jevlaya_lab.broker.pool import empty_pool_error
from jevlaya_lab.broker.registry import Registry
from jevlaya_lab.broker.report import LLMInfo, PoolSnapshot, pool_snapshot, summarize
from jevlaya_lab.broker.runtime import Runtime
from jevlaya_lab.broker.scoped import AsyncCalls, AsyncScopedBroker
from jevlaya_lab.broker.validation import (
    check_grace,
    check_limit,
    check_local,
    check_scope,
    check_sync_interval,
)
from jevlaya_lab.journal.store import Store

__all__ = ["AsyncBroker"]


class AsyncBroker(AsyncCalls):
    """A pool of OpenAI-compatible chat models behind one async API.

    ``source``: ``None`` (a per-user SQLite file), a ``.db``/``.sqlite`` path,
    ``sqlite:///path`` or ``postgresql://user@host/dbname`` (one journal for several processes
    and servers; :mod:`jevlaya_lab.journal.postgresql`). ``models``: the user's own entries
    (``LLMConfig`` or dicts), ranked before the catalog's and never touched by catalog
    updates. ``secrets``: ``{ref: key}`` used before stored keys, ``.env`` and the
    environment. ``catalog``: see :mod:`jevlaya_lab.broker.catalog`. ``local``: whether the
    catalog's embedded local models (``local/smollm2``) are in the pool: ``None`` (default)
    only for a caller with no model of its own and no provider key, ``True`` always,
    ``False`` never (see :mod:`jevlaya_lab.broker.pool`). ``direct``: models reached only with
    ``direct(alias)`` / ``direct(name=...)`` (:mod:`jevlaya_lab.broker.direct`).
    ``sync_interval``: seconds between automatic catalog syncs (:meth:`sync`). ``cooldowns``:
    a cooldown book shared with other brokers (see :class:`~jevlaya_lab.broker.pool.CooldownBook`),
    or ``True`` for one in this journal's database
    (:class:`~jevlaya_lab.journal.cooldowns.SharedCooldowns`: Dask workers on one PostgreSQL journal
    then keep off a model any of them saw fail). ``durable``:
    ``True`` makes every call return only once its journal rows are committed (a crash of the
    process right after loses none); by default a call may return with up to
    ``JOURNAL_WINDOW_ROWS`` rows still being written (:mod:`jevlaya_lab.broker.journaling`). Use it as
    ``async with AsyncBroker() as broker:``. One dropped without ``aclose()`` (a notebook cell run
    again) is released when the garbage collector takes it and every handle made from it: its
    journal rows are written and its thread, database handle and connections closed
    (:func:`jevlaya_lab.broker.runtime.release_dropped`). One still open at interpreter exit (a
    script that ends without ``aclose()``) is released the same way, so the rows of the answers it
    gave are written (they were lost); calls still in flight then are not journaled, and its
    connections are left to the operating system when their loop no longer runs.
    """

    def __init__(self, source: str | Path | None = None, *,
                 models: Sequence[LLMConfig | Mapping[str, Any]] | None = None,
                 secrets: Mapping[str, str] | None = None, optimize: bool = True,
                 home: str | Path | None = None, catalog: CatalogSource = None,
                 retention_days: float = 90.0, store_text: bool = False,
                 dotenv: str | Path | None = None, local: bool | None = None,
                 direct: Sequence[LLMConfig | Mapping[str, Any]] = (),
                 sync_interval: float | None = 86400.0, cooldowns: Any = None,
                 durable: bool = False) -> None:
        self._rt = Runtime(source, models=models, secrets=secrets, optimize=optimize,
                           home=home, catalog=catalog, retention_days=retention_days,
                           store_text=store_text, dotenv=dotenv, local=check_local(local),
                           direct=direct, sync_interval=check_sync_interval(sync_interval),
                           cooldowns=cooldowns, durable=durable)
        self._caller = self._rt.caller()

    @property
    def store(self) -> Store:
        """The database holding the registry, stored keys and the journal."""
        return self._rt.store

    @property
    def keys(self) -> KeyResolver:
        return self._rt.keys

    @property
    def closed(self) -> bool:
        return self._rt.closed

    # lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncBroker:
        """Build the pool. ``async with`` never calls ``__aexit__`` when this raises, so a
        failed entry (a journal that is not a database, a catalogue that cannot be read) closes
        the broker itself: no writer thread, database handle or key filter outlives it."""
        try:
            await self._rt.ready()
        except BaseException as exc:
            try:
                await self._rt.close(0.0)
            except Exception as also:  # noqa: BLE001 - the entry's failure is the one raised
                exc.add_note(f"closing the broker after its failed entry also failed: "
                             f"{type(also).__name__}: {also}")
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, *, grace: float = 0.0) -> None:
        """Refuse new calls, close open streams, let calls in flight finish within ``grace``
        seconds and cancel the rest (journaled ``cancelled``), write every journal row, then
        close HTTP, servers and storage. See the module docstring."""
        await self._rt.close(check_grace(grace))

    def observe(self, observer: Any) -> None:
        """Tell ``observer`` about every pooled call and attempt from now on (a tracer such as
        :class:`jevlaya_lab.telemetry.TraceExporter` uses it). Each method is optional:
        ``call_scope(call)`` is a context manager around one ``ask``/``chat``;
        ``attempt_started(attempt)`` and ``attempt_finished(attempt, row)`` bracket every
        request (``row`` is its journal row). They run on the broker's loop, in the calling
        task's context (the sync ``Broker`` carries the caller's context variables there), must
        not block, and an exception in them is logged without changing the call."""
        if observer not in self._rt.observers:
            self._rt.observers.append(observer)

    # calls (ask, chat, stream, record_quality come from AsyncCalls) ----------------------------
    def for_scope(self, scope: str) -> AsyncScopedBroker:
        """A caller whose keys resolve ``<scope>/<REF>`` first and whose journal rows and
        ratings carry ``scope``."""
        return AsyncScopedBroker(self._rt, self._rt.caller(check_scope(scope)))

    def direct(self, alias: str | None = None, *, name: str | None = None) -> AsyncDirect:
        """One model by alias or ``name=``: no pool, no failover, no journal row
        (:mod:`jevlaya_lab.broker.direct` says which models each reaches)."""
        return AsyncDirect(self._rt, alias, name=name)

    # the journal -------------------------------------------------------------------------------
    async def calls(self, *, call_id: str | None = None, trace_id: str | None = None,
                    llm_name: str | None = None, operation: str | None = None,
                    scope: str | None = None, status: str | None = None,
                    since: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Journal rows (one per attempt) matching every given filter, newest first, each
        with its latest rating as ``score`` (``None`` when unrated); ``limit`` keeps the
        newest rows; ``since`` is an ISO time."""
        check_limit(limit)
        await self._rt.journal.flush()

        def read() -> list[dict[str, Any]]:
            rows = self._rt.store.attempts(
                call_id=call_id, trace_id=trace_id, llm_name=llm_name, operation=operation,
                scope=scope, status=status, since=since, limit=limit, newest_first=True)
            scores = self._rt.store.latest_scores([r["call_id"] for r in rows])
            return [{**row, "score": scores.get(row["call_id"])} for row in rows]
        return await asyncio.to_thread(read)

    async def ratings(self, *, call_id: str | None = None, trace_id: str | None = None,
                      limit: int | None = None) -> list[dict[str, Any]]:
        """Rating rows, oldest first."""
        await self._rt.journal.flush()
        return await asyncio.to_thread(self._rt.store.ratings, call_id=call_id,
                                       trace_id=trace_id, limit=limit)

    async def stats(self, *, operation: str | None = None,
                    since: str | None = None) -> dict[str, dict[str, Any]]:
        """Per model: attempts, counts per status, latency p50/p95 (ms), ratings and priority."""
        pool = (await self._rt.ready()).pool
        rows = await self.calls(operation=operation, since=since)
        return summarize(rows, pool, operation)

    # the pool ----------------------------------------------------------------------------------
    async def snapshot(self) -> PoolSnapshot:
        """Pool state per model: cooldown, slots, disabled, demotions, whether a key resolves,
        whether it is in the pool (in_pool, fallback) and why it cannot start (unavailable);
        its ``.journal`` attribute holds the journal writer's counters (rows waiting, written,
        failed, ...: :meth:`jevlaya_lab.journal.JournalWriter.status`), ``.usable`` the models
        that could take a call now and ``.degraded`` whether none could."""
        pool = (await self._rt.ready()).pool
        return PoolSnapshot(pool_snapshot(pool, self._rt.caller()),
                            journal=self._rt.journal.status(),
                            usable=pool.usable(self._rt.caller()))

    async def count(self) -> int:
        """How many models are in the pool (for this broker's own keys), usable or not."""
        return len((await self._rt.ready()).pool.members(self._rt.caller()))

    async def ensure_pool(self) -> None:
        """Fill the registry and build the pool now (instead of on the first call); raise
        ``NoLLMAvailableError(reason="empty_pool")`` when this broker's pool has no model at
        all. A pool whose models are all cooling, disabled or without a key is not an error
        here (``snapshot().degraded`` says so)."""
        pool = (await self._rt.ready()).pool
        if not pool.members(self._rt.caller()):
            raise empty_pool_error(pool)

    async def get(self, name: str) -> LLMInfo:
        """One registry model by name: its ``config`` and its live ``disabled`` flag and
        ``state()``; a ``KeyError`` naming the known models for an unknown name."""
        pool = (await self._rt.ready()).pool
        return LLMInfo(Registry.state(pool, name), pool, self._rt.caller())

    async def disable_llm(self, name: str) -> None:
        """Take ``name`` out of every caller's pool, in this broker and in every broker that
        opens this database later (the mark is stored), until ``enable_llm(name)``."""
        pool = (await self._rt.ready()).pool
        Registry.state(pool, name).disabled = True
        await asyncio.to_thread(self._rt.store.set_disabled, name, True)

    async def enable_llm(self, name: str) -> None:
        """Enable ``name`` again (here and in the database); for a model marked unavailable
        (it could not start) this also clears the mark, so the next call tries to start it
        once more."""
        pool = (await self._rt.ready()).pool
        state = Registry.state(pool, name)
        state.disabled = False
        state.unavailable = None
        await asyncio.to_thread(self._rt.store.set_disabled, name, False)

    async def sync(self, source: CatalogSource = None) -> SyncReport | None:
        """Read the model catalog again and apply it to the database and the live pool now:
        from ``source`` (a URL, a .json path or a list of entries) or else the configured one
        (``catalog=`` / ``$JEVLAYA_CATALOG_URL``); ``None`` when there is none. An unreachable
        URL leaves everything as it was (``applied=False``, a logged warning). What changes
        and what is kept: :mod:`jevlaya_lab.broker.catalog`."""
        pool = (await self._rt.ready()).pool
        return await self._rt.registry.sync(pool, self._rt.caller(), source)

    @property
    def last_sync_report(self) -> SyncReport | None:
        """The report of the latest ``sync()`` (automatic ones included), or ``None``."""
        return self._rt.registry.last_sync

    async def store_key(self, ref: str, value: str | None) -> None:
        """Keep a key in this broker's database (``None`` deletes it)."""
        await asyncio.to_thread(self._rt.keys.store, ref, value)

    @property
    def llm_names(self) -> list[str]:
        return list(self._rt.pool.states) if self._rt.built else []

    @property
    def location(self) -> str:
        """Where the registry and journal live (e.g. for ``analysis.load_journal``)."""
        return self._rt.store.location

    @property
    def store_text(self) -> bool:
        """Whether the journal keeps each call's prompt and answer text (``store_text=True``),
        which a table run needs to resume from the journal."""
        return self._rt.store_text

    def __repr__(self) -> str:
        return (f"<AsyncBroker {self.location} models={len(self.llm_names)} "
                f"{'closed' if self.closed else 'open'}>")
