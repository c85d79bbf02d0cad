"""The call machinery every surface of the broker shares (package-internal).

One :class:`Runtime` per broker holds the storage, keys, journal writer, pool, HTTP client,
embedded servers and open streams, and does the steps of a call: get ready (fill the registry,
build the pool), start an attempt (a lane: one journal row), find its endpoint, run a
non-streaming lane, apply a failure or a timeout to the pool, journal, rate, close. ``engine``
(the public ``AsyncBroker``), ``scoped``, ``direct``, ``racing`` and ``streaming`` use it
through the methods below and nothing else; it imports none of them.

Journal rows go to a background writer, so the hot path does no disk IO. What a crash may lose
is bounded (:meth:`Runtime.journal_settled`, run as every call returns, answer or error):
with ``durable=True`` a call returns only once every row queued before it ended is committed;
by default it returns at once unless more than ``JOURNAL_WINDOW_ROWS`` rows are unwritten, in
which case it waits (at most ``JOURNAL_WINDOW_WAIT_S``) until the writer is back within that
window, so while the database takes writes a SIGKILL loses at most that many answered rows.
While the database refuses writes nobody waits: rows wait in memory and go to the spill file
(:mod:`jevlaya_lab.journal.writer`). Closing is described in :mod:`jevlaya_lab.broker.engine`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx

from jevlaya_lab.broker.attempt import Attempt
from jevlaya_lab.broker.budget import ATTEMPT_TIMEOUT_S, Budget
from jevlaya_lab.broker.catalog import (
    CatalogSource,
    SyncReport,
    configured,
    describe,
    fill_store,
    sync_store,
)
from jevlaya_lab.broker.config import LLMConfig, check_direct
from jevlaya_lab.broker.embedded import EmbeddedServer
from jevlaya_lab.broker.errors import (
    ProviderError,
    UnknownCallError,
    UnknownLLMError,
    closed_error,
)
from jevlaya_lab.broker.http import Failure, Reply, post_chat
from jevlaya_lab.broker.keys import KeyResolver, guard_library_logs, redact
from jevlaya_lab.broker.limits import AttemptLimit
from jevlaya_lab.broker.pool import DEFAULT_COOLDOWN_S, Caller, ModelState, Pool
from jevlaya_lab.broker.quality import Quality
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.validation import Call, check_score
from jevlaya_lab.journal import JournalWriter, open_store
from jevlaya_lab.journal.errors import JournalWriteError
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.broker")
_RECENT_CALLS = 100_000
PURGE_INTERVAL_S = 3600.0  # journal retention is enforced at most hourly
SETTLE_TIMEOUT_S = 10.0  # how long closing waits for cancelled calls to journal their rows
JOURNAL_WINDOW_ROWS = 256  # default: most rows a call may return with still unwritten
JOURNAL_WINDOW_WAIT_S = 5.0  # ...waiting at most this long for the writer to catch up
T = TypeVar("T")


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class OpenStream(Protocol):
    """What closing the broker needs of an open stream."""

    async def aclose(self) -> None: ...


class Runtime:
    def __init__(self, source: str | Path | None, *,
                 models: Sequence[LLMConfig | Mapping[str, Any]] | None,
                 secrets: Mapping[str, str] | None, optimize: bool,
                 home: str | Path | None, catalog: CatalogSource, retention_days: float,
                 store_text: bool, dotenv: str | Path | None, local: bool | None,
                 direct: Sequence[LLMConfig | Mapping[str, Any]] = (),
                 sync_interval: float | None = None, durable: bool = False) -> None:
        if not isinstance(durable, bool):
            raise ValueError(f"durable={durable!r}: must be True (a call returns once its journal "
                             "rows are committed) or False (rows are committed in the background)")
        self.durable = durable
        self.user_models = [LLMConfig.coerce(m) for m in models or []]
        names = [m.name for m in self.user_models]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"models: duplicate name(s) {dup}; each entry needs its own name")
        # models reached only with direct(): never pool members, never stored
        self.direct_states = {e.name: ModelState(e, -1)
                              for e in check_direct(self.user_models, direct)}
        if retention_days <= 0:
            raise ValueError(f"retention_days={retention_days!r}: must be a positive number")
        # made inside a running event loop, the store opens on first use, from a worker thread,
        # never on the loop; otherwise (the sync Broker) here, so a broken file fails at once
        self.store: Store = open_store(source, home=home, deferred=_in_event_loop())
        self.keys = KeyResolver(self.store, secrets, Path(dotenv) if dotenv else None)
        guard_library_logs(self.keys)  # until close(): keys never reach httpx/httpcore logs
        self.writer = JournalWriter(self.store)
        self.embedded = EmbeddedServer()
        self.callers: dict[str | None, Caller] = {None: Caller()}
        self.streams: set[OpenStream] = set()  # open stream cores, closed with the broker
        self.closed = False
        self._catalog = catalog
        self._optimize = optimize
        self._local = local
        self._retention_days = retention_days
        self._store_text = store_text
        self._pool: Pool | None = None
        self._client: httpx.AsyncClient | None = None
        self._ready_lock: asyncio.Lock | None = None
        self._journaled: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._next_purge = math.inf
        self._sync_interval = sync_interval
        self._next_sync = math.inf
        self._sync_task: asyncio.Task[None] | None = None
        self.last_sync: SyncReport | None = None
        self._calls: set[asyncio.Task[Any]] = set()  # calls in flight, settled by close()
        self._close_done: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # readiness ---------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"the broker at {self.store.location}"

    @property
    def pool(self) -> Pool:
        """The pool (only after :meth:`ready`)."""
        if self._pool is None:
            raise RuntimeError("the broker's pool is not built yet; await ready() first")
        return self._pool

    @property
    def built(self) -> bool:
        return self._pool is not None

    @property
    def client(self) -> httpx.AsyncClient:
        assert self._client is not None, "ready() builds the HTTP client"
        return self._client

    def caller(self, scope: str | None = None) -> Caller:
        return self.callers.setdefault(scope, Caller(scope))

    async def ready(self) -> Pool:
        """Fill the registry and build the pool on first use; refuse when closed."""
        if self.closed:
            raise closed_error(self.name)
        if self._pool is not None:
            if self._loop is not asyncio.get_running_loop():
                raise RuntimeError("this AsyncBroker belongs to another event loop (its HTTP "
                                   "connections live there); create one broker per loop, or "
                                   "use the sync Broker from several threads")
            if time.monotonic() > self._next_purge:
                self._next_purge = time.monotonic() + PURGE_INTERVAL_S
                asyncio.get_running_loop().run_in_executor(
                    None, self.store.purge, self._retention_days)
            if time.monotonic() > self._next_sync:
                self._sync_soon()
            return self._pool
        if self._ready_lock is None:
            self._ready_lock = asyncio.Lock()
        async with self._ready_lock:
            if self._pool is None:
                self._loop = asyncio.get_running_loop()
                self._pool = await asyncio.to_thread(self._build_pool)
                self._client = httpx.AsyncClient(
                    timeout=httpx.Timeout(connect=10.0, read=None, write=30.0, pool=None),
                    limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        return self._pool

    def _build_pool(self) -> Pool:
        self.keys.load_stored()  # routing reads this copy: no key lookup queries the database
        fill_store(self.store, self._catalog)
        if self.user_models:
            self.store.put_user_models([m.to_dict() for m in self.user_models])
        self.store.purge(self._retention_days)
        self._next_purge = time.monotonic() + PURGE_INTERVAL_S
        self._next_sync = time.monotonic() + (self._sync_interval or math.inf)
        entries, fallback = self._registry()
        pool = Pool(entries, self.keys, Quality(self.store.ratings()),
                    optimize=self._optimize, fallback=fallback, local=self._local)
        for name in self.store.disabled_models() & pool.states.keys():  # disable_llm persists
            pool.states[name].disabled = True
        return pool

    def _registry(self) -> tuple[list[LLMConfig], frozenset[str]]:
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

    # the catalog ---------------------------------------------------------------------------
    async def sync(self, source: CatalogSource) -> SyncReport | None:
        """Read the catalog source again and apply it to the database and the live pool
        (:mod:`jevlaya_lab.broker.catalog`); ``None`` when no source is configured."""
        pool = await self.ready()
        source = configured(source if source is not None else self._catalog)
        if source is None:
            return None
        caller = self.caller()
        before = len(pool.usable(caller))

        def apply() -> tuple[tuple[bool, tuple[str, ...], tuple[str, ...], tuple[str, ...]],
                             tuple[list[LLMConfig], frozenset[str]] | None, set[str]]:
            done = sync_store(self.store, source)
            return done, (self._registry() if done[0] else None), self.store.disabled_models()
        (applied, added, updated, removed), registry, disabled = await asyncio.to_thread(apply)
        if registry is not None:
            pool.update(*registry, disabled)
        report = SyncReport(describe(source), applied, added, updated, removed, before,
                            len(pool.usable(caller)))
        self.last_sync = report
        return report

    def _sync_soon(self) -> None:
        """Start a background ``sync()`` when the interval has passed (from ``ready()``)."""
        if self._sync_task is not None and not self._sync_task.done():
            return
        self._next_sync = time.monotonic() + (self._sync_interval or math.inf)
        source = self._catalog if self._catalog is not None else configured(None)
        if not isinstance(source, (str, os.PathLike)):
            return  # a list (or nothing) does not change by itself

        async def run() -> None:
            try:
                await self.sync(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed refresh must not break calls
                log.warning("automatic catalog sync from %s failed (%s: %s); the current list "
                            "stands", describe(source), type(exc).__name__, redact(str(exc)))
        self._sync_task = asyncio.ensure_future(run())

    def direct_state(self, alias: str | None, name: str | None) -> ModelState:
        """The model ``direct(alias)`` / ``direct(name=...)`` means (after :meth:`ready`).

        ``name=`` looks in the ``direct=`` entries, then the registry. An alias looks in the
        aliases of this broker's entries; when none matches, a name (so ``direct("a")``
        reaches registry model ``a``, as this package always did)."""
        pool = self.pool
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

    def state(self, name: str) -> ModelState:
        pool = self.pool
        if name not in pool.states:
            raise KeyError(f"llm name {name!r} is not in the registry; known: "
                           f"{', '.join(pool.states) or '(none)'}")
        return pool.states[name]

    # closing -----------------------------------------------------------------------------------
    async def close(self, grace: float) -> None:
        if self.closed:
            if self._close_done is not None:
                await self._close_done.wait()
            return
        self.closed = True
        self._close_done = asyncio.Event()
        try:
            if self._sync_task is not None and not self._sync_task.done():
                self._sync_task.cancel()
                await asyncio.gather(self._sync_task, return_exceptions=True)
            for core in list(self.streams):
                await core.aclose()
            await self._settle_calls(grace)
            if self._pool is not None:
                self._pool.notify()  # wake streams waiting for a slot: they now see the close
            unwritten: JournalWriteError | None = None
            try:
                await asyncio.to_thread(self.writer.close)
            except JournalWriteError as exc:  # rows saved for the next broker: say so, after closing
                unwritten = exc
            if self._client is not None:
                await self._client.aclose()
            await asyncio.to_thread(self.embedded.stop)
            await asyncio.to_thread(self.store.close)
            if unwritten is not None:
                raise unwritten
        finally:
            guard_library_logs(self.keys, on=False)
            self._close_done.set()

    async def _settle_calls(self, grace: float) -> None:
        """Wait up to ``grace`` for calls in flight, then cancel them and wait for their rows."""
        calls = set(self._calls)
        if not calls:
            return
        if grace > 0:
            await asyncio.wait(calls, timeout=grace)
        for call in calls:
            call.cancel()
        _, stuck = await asyncio.wait(calls, timeout=SETTLE_TIMEOUT_S)
        if stuck:
            log.warning("%d call(s) did not end within %g s of closing the broker",
                        len(stuck), SETTLE_TIMEOUT_S)

    async def guarded(self, coro: Coroutine[Any, Any, T], attempt: Attempt | None = None) -> T:
        """Run ``coro`` (a call or lane that journals rows) as a task that closing waits for
        and may cancel; a cancellation by closing reaches the caller as
        ``BrokerClosedError``, a cancellation of the caller itself stays ``CancelledError``.
        ``attempt``: the lane ``coro`` runs, settled however the task ends (:meth:`lane_task`)."""
        task = self.lane_task(attempt, coro) if attempt is not None else asyncio.ensure_future(coro)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if self.closed and task.cancelled() and (me is None or not me.cancelling()):
                raise closed_error(self.name, in_flight=True) from None
            raise

    # attempts ----------------------------------------------------------------------------------
    @staticmethod
    def lane_task(attempt: Attempt, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro``, the lane of ``attempt``, as a task whose end always settles the
        attempt. A task cancelled before its first step never runs its own ``except``
        blocks, so without this its slot would stay taken and no row be written; the done
        callback journals such an attempt as its ``cancel_status`` (``error`` if it ended by
        an exception without settling) and so releases the slot on every path."""
        task = asyncio.ensure_future(coro)

        def settle(done: asyncio.Task[T]) -> None:
            if attempt.status is None:
                if done.cancelled():
                    attempt.finish(attempt.cancel_status)
                else:
                    exc = done.exception()
                    attempt.finish("error", detail=redact(
                        f"the lane ended without a result: {type(exc).__name__}: {exc}"))
        task.add_done_callback(settle)
        return task

    def attempt(self, state: ModelState, caller: Caller, call: Call, budget: Budget,
                limit: AttemptLimit) -> Attempt:
        """A new attempt (a journal row to be), counted against the call's ceilings."""
        limit.count(state.entry.name)
        prompt_text = None
        if self._store_text:
            prompt_text = "\n".join(str(m.get("content") or "") for m in call.messages)
        return Attempt(state, self.pool, self._journal_row, trace_id=call.trace_id,
                       operation=call.operation, scope=caller.scope,
                       budget_ms=budget.budget_ms, prompt_text=prompt_text)

    async def endpoint(self, state: ModelState, caller: Caller) -> tuple[str, str | None]:
        """(base URL, key) for ``state``; an embedded model is started first (a failure to
        start is a ``cannot_start`` :class:`Failure`)."""
        _, key = self.pool.key_for(state, caller)
        if state.entry.is_local:
            try:
                return await self.embedded.base_url(state.entry), key
            except Exception as exc:  # noqa: BLE001 - any loading failure: it cannot start
                raise Failure("cannot_start", redact(f"{type(exc).__name__}: {exc}")) from None
        return state.entry.base_url.rstrip("/"), key

    async def run_lane(self, attempt: Attempt, caller: Caller, body: dict[str, Any],
                       budget: Budget) -> Reply:
        """One non-streaming attempt; failures are applied to the pool and raised as
        ``ProviderError``; a cancellation journals ``attempt.cancel_status``."""
        timeout = budget.attempt_timeout()
        try:
            url, key = await self.endpoint(attempt.state, caller)
            async with asyncio.timeout(timeout):
                reply = await post_chat(self.client, url, key, body)
        except Failure as failure:
            raise self.failed(attempt, caller, failure) from None
        except TimeoutError:
            raise self.timed_out(attempt, budget).to_error(attempt.llm_name) from None
        except asyncio.CancelledError:
            attempt.finish(attempt.cancel_status)
            raise
        except Exception as exc:  # noqa: BLE001 - a surprise is this attempt's failure, journaled
            log.exception("attempt %s of %s failed", attempt.call_id, attempt.llm_name)
            raise self.failed(attempt, caller, Failure(
                "invalid", redact(f"{type(exc).__name__}: {exc}"))) from None
        self.pool.succeeded(attempt.llm_name)
        attempt.succeed(reply)
        return reply

    def failed(self, attempt: Attempt, caller: Caller, failure: Failure) -> ProviderError:
        """Apply ``failure`` to the pool, journal it, and return it as the caller's error."""
        until = self.pool.failed(attempt.llm_name, failure, caller)
        attempt.fail(failure, until)
        return failure.to_error(attempt.llm_name)

    def timed_out(self, attempt: Attempt, budget: Budget) -> Failure:
        """Nothing (or not all) arrived in time: a model that sent nothing is cooled; either
        way a missed ``wait`` steers the next equally short request away."""
        pool = self.pool
        if budget.limited:
            pool.missed_wait(attempt.llm_name, budget.wait)  # type: ignore[arg-type]
        limit = f"wait={budget.wait:g} s" if budget.limited else f"{ATTEMPT_TIMEOUT_S:g} s"
        if attempt.started_answer:
            failure = Failure("interrupted", f"the answer did not complete within {limit}")
            attempt.fail(failure)
        else:
            failure = Failure("unavailable", f"no data within {limit}")
            attempt.fail(failure, pool.cool(attempt.llm_name, DEFAULT_COOLDOWN_S))
        return failure

    def result(self, attempt: Attempt) -> LLMResult:
        return LLMResult(text=attempt.text, llm_name=attempt.llm_name, call_id=attempt.call_id,
                         trace_id=attempt.trace_id, usage=dict(attempt.usage),
                         tool_calls=list(attempt.tool_calls),
                         finish_reason=attempt.finish_reason, operation=attempt.operation,
                         _rate=self.rate)

    # journal and ratings -----------------------------------------------------------------------
    def _journal_row(self, row: dict[str, Any]) -> int:
        self._journaled[row["call_id"]] = {k: row[k] for k in (
            "trace_id", "llm_name", "operation", "scope", "status")}
        if len(self._journaled) > _RECENT_CALLS:
            self._journaled.popitem(last=False)
        try:
            return self.writer.attempt(row)
        except RuntimeError:  # close() settles every call first; if one still outlived it, say so
            log.error("attempt %s (%s, %s) ended after the broker closed; not journaled",
                      row["call_id"], row["llm_name"], row["status"])
            return 0

    async def journal_settled(self) -> None:
        """Bound what a crash could lose of the rows of a call that is returning (see the
        module docstring): all of them committed with ``durable``, else at most
        ``JOURNAL_WINDOW_ROWS`` unwritten while the database takes writes."""
        writer = self.writer
        if self.durable:
            if writer.unwritten:
                await asyncio.to_thread(writer.flush)
        elif writer.unwritten > JOURNAL_WINDOW_ROWS and writer.last_error is None:
            await asyncio.to_thread(writer.wait_within, JOURNAL_WINDOW_ROWS,
                                    JOURNAL_WINDOW_WAIT_S)

    async def flush(self) -> None:
        """Return once every journal row queued so far is written."""
        await asyncio.to_thread(self.writer.flush)

    def rate(self, call_id: str, score: float) -> None:
        """Journal a rating of ``call_id`` and feed it to quality learning (any thread)."""
        score = check_score(score)
        info = self._journaled.get(call_id)
        if info is None:
            self.writer.flush()
            rows = self.store.attempts(call_id=call_id)
            info = rows[0] if rows else None
        if info is None:
            raise UnknownCallError(f"call_id={call_id!r}: no journaled answer with this id (yet); rate "
                             "an answer after it has ended, using the id of this broker's "
                             "result or stream")
        if self._pool is not None:
            self._pool.quality.add(info["llm_name"], info["operation"], score, call_id)
        self.writer.rating({"call_id": call_id, "trace_id": info["trace_id"],
                            "llm_name": info["llm_name"], "operation": info["operation"],
                            "scope": info["scope"], "score": score,
                            "rated_at": datetime.now(UTC).isoformat()})

    async def call_of_trace(self, trace_id: str) -> str:
        """The one successful attempt of ``trace_id`` (a ``ValueError`` when not exactly one)."""
        await self.flush()
        rows = [r for r in await asyncio.to_thread(self.store.attempts, trace_id=trace_id)
                if r["status"] == "ok"]
        if len(rows) != 1:
            ids = [r["call_id"] for r in rows]
            raise ValueError(f"trace_id={trace_id!r}: {len(rows)} successful answers "
                             f"{ids if ids else ''}; rate by call_id (the result's or stream's "
                             "record_quality) so the rating names the answer that was shown")
        return str(rows[0]["call_id"])
