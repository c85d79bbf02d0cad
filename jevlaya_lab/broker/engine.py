"""``AsyncBroker``: the engine every other surface (sync facade, scopes, streams) shares.

One call = one ``trace_id`` and one :class:`~jevlaya_lab.broker.budget.Budget`; each request to
a model is an :class:`~jevlaya_lab.broker.attempt.Attempt` (a lane) with its own ``call_id`` and
journal row. ``fastest_of=N`` runs N lanes on distinct models; the first complete answer wins,
the rest are cancelled and journaled ``superseded``; a failed lane is refilled from models this
call has not tried. Journal rows go to a background writer, so the hot path does no disk IO.

Every call has a hard ceiling on its attempts (``max_attempts``, ``max_attempts_per_model``; see
:mod:`jevlaya_lab.broker.limits`), so it writes a bounded number of journal rows whatever its
providers answer. Which models are in the pool, and what happens to an embedded model that
cannot start, is documented in :mod:`jevlaya_lab.broker.pool`.

Choices the spec leaves open (documented here): ``wait=None`` waits for a cooling or busy model
only when it returns within 60 s; ``wait`` < 0 is a ``ValueError``; ``optimize=False`` ranks by
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
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

from jevlaya_lab.broker.attempt import Attempt
from jevlaya_lab.broker.budget import ATTEMPT_TIMEOUT_S, Budget
from jevlaya_lab.broker.catalog import CatalogSource, fill_store
from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.embedded import EmbeddedServer
from jevlaya_lab.broker.errors import (
    LLMRequestError,
    NoLLMAvailableError,
    ProviderError,
    closed_error,
)
from jevlaya_lab.broker.http import Failure, Reply, build_body, post_chat
from jevlaya_lab.broker.keys import KeyResolver, redact
from jevlaya_lab.broker.limits import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_ATTEMPTS_PER_MODEL,
    AttemptLimit,
)
from jevlaya_lab.broker.pool import DEFAULT_COOLDOWN_S, Caller, ModelState, Pool, utc
from jevlaya_lab.broker.quality import Quality
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.journal import JournalWriter, open_store
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.broker")
Messages = list[dict[str, Any]]
_RECENT_CALLS = 100_000
PURGE_INTERVAL_S = 3600.0  # journal retention is enforced at most hourly
SETTLE_TIMEOUT_S = 10.0  # how long aclose() waits for cancelled calls to journal their rows
T = TypeVar("T")


def check_fastest_of(fastest_of: int | None) -> int:
    if fastest_of is None:
        return 1
    if isinstance(fastest_of, bool) or not isinstance(fastest_of, int) or fastest_of < 1:
        raise ValueError(f"fastest_of={fastest_of!r}: must be None or an integer >= 1 (the "
                         "number of models to race)")
    return fastest_of


def check_messages(messages: Any) -> Messages:
    if isinstance(messages, str) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"messages={messages!r:.80}: must be a non-empty list of "
                         "{'role': ..., 'content': ...} dicts (use ask() for a plain prompt)")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"messages[{i}]={m!r:.80}: each message must be a dict with a "
                             "'role' (system/user/assistant/tool) and 'content'")
    return [dict(m) for m in messages]


def check_prompt(prompt: Any) -> Messages:
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt={prompt!r:.80}: must be a non-empty string (use chat() for a "
                         "list of messages)")
    return [{"role": "user", "content": prompt}]


RESERVED_PARAMS = ("model", "messages", "stream", "stream_options", "tools")


def check_call(operation: Any, trace_id: Any, params: Mapping[str, Any]) -> None:
    """Labels are non-empty strings; extra provider params may not override the broker's."""
    for name, value in (("operation", operation), ("trace_id", trace_id)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"{name}={value!r}: must be a non-empty string or None")
    clash = sorted(set(params) & set(RESERVED_PARAMS))
    if clash:
        raise ValueError(f"{clash[0]}=...: the broker sets this request field itself; pass the "
                         "prompt, messages or tools as arguments and let the pool pick the model")


def check_stream_input(prompt: Any) -> Messages:
    """``stream()`` takes a prompt string or, like ``chat()``, a list of messages."""
    return check_prompt(prompt) if isinstance(prompt, str) else check_messages(prompt)


def check_grace(grace: Any) -> float:
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < math.inf:
        raise ValueError(f"grace={grace!r}: must be a number of seconds >= 0 (how long calls in "
                         "flight may still finish before closing cancels them)")
    return float(grace)


def check_score(score: Any) -> float:
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score) \
            or not 0.0 <= score <= 1.0:
        raise ValueError(f"score={score!r}: must be a number between 0 (bad) and 1 (good)")
    return float(score)


class AsyncBroker:
    """A pool of OpenAI-compatible chat models behind one async API.

    ``source``: ``None`` (a per-user SQLite file), a ``.db``/``.sqlite`` path,
    ``sqlite:///path`` or ``postgresql://user@host/dbname`` (one journal for several processes
    and servers; :mod:`jevlaya_lab.journal.postgresql`). ``models``: the user's own entries (``LLMConfig`` or dicts), ranked
    before the catalog's and never touched by catalog updates. ``secrets``: ``{ref: key}``
    used before stored keys, ``.env`` and the environment. ``catalog``: see
    :mod:`jevlaya_lab.broker.catalog`. ``local``: whether the catalog's embedded local models
    (``local/smollm2``) are in the pool: ``None`` (default) only for a caller with no model of
    its own and no provider key, ``True`` always, ``False`` never (see
    :mod:`jevlaya_lab.broker.pool`). Use it as ``async with AsyncBroker() as broker:``.
    """

    def __init__(self, source: str | Path | None = None, *,
                 models: Sequence[LLMConfig | Mapping[str, Any]] | None = None,
                 secrets: Mapping[str, str] | None = None, optimize: bool = True,
                 home: str | Path | None = None, catalog: CatalogSource = None,
                 retention_days: float = 90.0, store_text: bool = False,
                 dotenv: str | Path | None = None, local: bool | None = None) -> None:
        if local not in (None, True, False):
            raise ValueError(f"local={local!r}: must be None (the embedded local models join "
                             "only a caller without other models), True (always) or False "
                             "(never)")
        self._local = local
        self._user_models = [LLMConfig.coerce(m) for m in models or []]
        names = [m.name for m in self._user_models]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"models: duplicate name(s) {dup}; each entry needs its own name")
        if retention_days <= 0:
            raise ValueError(f"retention_days={retention_days!r}: must be a positive number")
        self.store: Store = open_store(source, home=home)
        self.keys = KeyResolver(self.store, secrets, Path(dotenv) if dotenv else None)
        self._catalog = catalog
        self._optimize = optimize
        self._retention_days = retention_days
        self._store_text = store_text
        self._writer = JournalWriter(self.store)
        self._pool: Pool | None = None
        self._client: httpx.AsyncClient | None = None
        self._ready_lock: asyncio.Lock | None = None
        self._embedded = EmbeddedServer()
        self._callers: dict[str | None, Caller] = {None: Caller()}
        self._journaled: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._streams: set[Any] = set()  # open stream cores, closed with the broker
        self._next_purge = math.inf
        self._calls: set[asyncio.Task[Any]] = set()  # calls in flight, settled by aclose()
        self._close_done: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    # lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncBroker:
        await self._ready()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _ready(self) -> Pool:
        if self.closed:
            raise closed_error(self._name)
        if self._pool is not None:
            if self._loop is not asyncio.get_running_loop():
                raise RuntimeError("this AsyncBroker belongs to another event loop (its HTTP "
                                   "connections live there); create one broker per loop, or "
                                   "use the sync Broker from several threads")
            if time.monotonic() > self._next_purge:
                self._next_purge = time.monotonic() + PURGE_INTERVAL_S
                asyncio.get_running_loop().run_in_executor(
                    None, self.store.purge, self._retention_days)
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
        fill_store(self.store, self._catalog)
        if self._user_models:
            self.store.put_user_models([m.to_dict() for m in self._user_models])
        self.store.purge(self._retention_days)
        self._next_purge = time.monotonic() + PURGE_INTERVAL_S
        rows = self.store.registry()
        entries = [LLMConfig.coerce({k: v for k, v in row.items() if k != "origin"})
                   for row in rows]
        fallback = frozenset(row["name"] for row, entry in zip(rows, entries, strict=True)
                             if row.get("origin") == "catalog" and entry.is_local)
        # this broker's own entries first, in the order given; the rest keep registry order
        mine = {m.name: i for i, m in enumerate(self._user_models)}
        entries.sort(key=lambda e: mine.get(e.name, len(mine)))
        return Pool(entries, self.keys, Quality(self.store.rating_totals()),
                    optimize=self._optimize, fallback=fallback, local=self._local)

    async def aclose(self, *, grace: float = 0.0) -> None:
        """Refuse new calls, close open streams, let calls in flight finish within ``grace``
        seconds and cancel the rest (journaled ``cancelled``), write every journal row, then
        close HTTP, servers and storage. See the module docstring."""
        grace = check_grace(grace)
        if self.closed:
            if self._close_done is not None:
                await self._close_done.wait()
            return
        self.closed = True
        self._close_done = asyncio.Event()
        try:
            for core in list(self._streams):
                await core.aclose()
            await self._settle_calls(grace)
            if self._pool is not None:
                self._pool.notify()  # wake streams waiting for a slot: they now see the close
            await asyncio.to_thread(self._writer.close)
            if self._client is not None:
                await self._client.aclose()
            await asyncio.to_thread(self._embedded.stop)
            self.store.close()
        finally:
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

    async def _guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (a call or lane that journals rows) as a task that ``aclose()`` waits
        for and may cancel; a cancellation by closing reaches the caller as
        ``BrokerClosedError``, a cancellation of the caller itself stays ``CancelledError``."""
        task = asyncio.ensure_future(coro)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if self.closed and task.cancelled() and (me is None or not me.cancelling()):
                raise closed_error(self._name, in_flight=True) from None
            raise

    @property
    def _name(self) -> str:
        return f"the broker at {self.store.location}"

    # public calls ------------------------------------------------------------------------------
    async def ask(self, prompt: str, *, operation: str | None = None,
                  trace_id: str | None = None, wait: float | None = None,
                  fastest_of: int | None = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                  max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
                  **params: Any) -> LLMResult:
        """One routed answer to ``prompt``; extra keyword args (max_tokens, temperature, ...)
        go to the provider. ``max_attempts`` / ``max_attempts_per_model`` cap the requests
        this call may send (:mod:`jevlaya_lab.broker.limits`)."""
        return await self._complete(self._callers[None], check_prompt(prompt), None, operation,
                                    trace_id, wait, fastest_of, params, max_attempts,
                                    max_attempts_per_model)

    async def chat(self, messages: Messages, *, tools: list[dict[str, Any]] | None = None,
                   operation: str | None = None, trace_id: str | None = None,
                   wait: float | None = None, fastest_of: int | None = None,
                   max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                   max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
                   **params: Any) -> LLMResult:
        """One routed answer to a conversation; with ``tools`` the answer may be tool calls."""
        return await self._complete(self._callers[None], check_messages(messages), tools,
                                    operation, trace_id, wait, fastest_of, params, max_attempts,
                                    max_attempts_per_model)

    def stream(self, prompt: str | Messages, *, operation: str | None = None,
               trace_id: str | None = None, wait: float | None = None,
               fastest_of: int | None = None, stream_selection_window: float = 1.0,
               max_attempts: int = DEFAULT_MAX_ATTEMPTS,
               max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
               **params: Any) -> Any:
        """An async stream of text deltas for a prompt (or a list of messages); see
        :mod:`jevlaya_lab.broker.streaming`. ``max_attempts`` also bounds its ``another()``
        answers."""
        from jevlaya_lab.broker.streaming import AsyncStream

        return AsyncStream(self, self._callers[None], check_stream_input(prompt),
                           operation=operation, trace_id=trace_id, wait=wait,
                           fastest_of=fastest_of, window=stream_selection_window, params=params,
                           max_attempts=max_attempts,
                           max_attempts_per_model=max_attempts_per_model)

    def for_scope(self, scope: str) -> Any:
        from jevlaya_lab.broker.scoped import AsyncScopedBroker

        if not isinstance(scope, str) or not scope or "/" in scope:
            raise ValueError(f"scope={scope!r}: must be a non-empty string without '/'")
        return AsyncScopedBroker(self, self._callers.setdefault(scope, Caller(scope)))

    def direct(self, name: str) -> Any:
        from jevlaya_lab.broker.direct import AsyncDirect

        return AsyncDirect(self, name)

    async def record_quality(self, score: float, *, call_id: str | None = None,
                             trace_id: str | None = None) -> None:
        """Rate a past call by ``call_id`` (or by ``trace_id`` when exactly one attempt of it
        succeeded)."""
        if (call_id is None) == (trace_id is None):
            raise ValueError("record_quality needs exactly one of call_id=... or trace_id=...")
        if call_id is None:
            call_id = await self._call_of_trace(trace_id)  # type: ignore[arg-type]
        await asyncio.to_thread(self._rate, call_id, score)

    async def calls(self, **filters: Any) -> list[dict[str, Any]]:
        """Journal rows (one per attempt), oldest first; filters: call_id, trace_id, llm_name,
        operation, scope, status, since (ISO time), limit."""
        await asyncio.to_thread(self._writer.flush)
        return await asyncio.to_thread(lambda: self.store.attempts(**filters))

    async def ratings(self, **filters: Any) -> list[dict[str, Any]]:
        await asyncio.to_thread(self._writer.flush)
        return await asyncio.to_thread(lambda: self.store.ratings(**filters))

    async def stats(self, *, operation: str | None = None,
                    since: str | None = None) -> dict[str, dict[str, Any]]:
        """Per model: attempts, counts per status, latency p50/p95 (ms), ratings and priority."""
        from jevlaya_lab.broker.report import summarize

        pool = await self._ready()
        rows = await self.calls(operation=operation, since=since)
        return summarize(rows, pool, operation)

    async def snapshot(self) -> dict[str, dict[str, Any]]:
        """Pool state per model: cooldown, slots, disabled, demotions, whether a key resolves,
        whether it is in the pool (in_pool, fallback) and why it cannot start (unavailable)."""
        from jevlaya_lab.broker.report import pool_snapshot

        return pool_snapshot(await self._ready(), self._callers[None])

    async def disable_llm(self, name: str) -> None:
        self._state(await self._ready(), name).disabled = True

    async def enable_llm(self, name: str) -> None:
        """Enable ``name`` again; for a model marked unavailable (it could not start) this
        also clears the mark, so the next call tries to start it once more."""
        state = self._state(await self._ready(), name)
        state.disabled = False
        state.unavailable = None

    async def store_key(self, ref: str, value: str | None) -> None:
        """Keep a key in this broker's database (``None`` deletes it)."""
        await asyncio.to_thread(self.keys.store, ref, value)

    @property
    def llm_names(self) -> list[str]:
        return list(self._pool.states) if self._pool else []

    @property
    def location(self) -> str:
        """Where the registry and journal live (e.g. for ``analysis.load_journal``)."""
        return self.store.location

    def __repr__(self) -> str:
        return (f"<AsyncBroker {self.store.location} models={len(self.llm_names)} "
                f"{'closed' if self.closed else 'open'}>")

    # the routed call ---------------------------------------------------------------------------
    async def _complete(self, caller: Caller, messages: Messages,
                        tools: list[dict[str, Any]] | None, operation: str | None,
                        trace_id: str | None, wait: float | None, fastest_of: int | None,
                        params: Mapping[str, Any], max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                        max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL
                        ) -> LLMResult:
        check_call(operation, trace_id, params)
        budget = Budget(wait)
        lanes_wanted = check_fastest_of(fastest_of)
        limit = AttemptLimit(max_attempts, max_attempts_per_model, lanes=lanes_wanted)
        pool = await self._ready()
        if self.closed:  # closed while this call waited for the registry
            raise closed_error(self._name)
        return await self._guarded(self._route(
            pool, caller, messages, tools, operation, trace_id or uuid.uuid4().hex, budget,
            lanes_wanted, params, limit))

    async def _route(self, pool: Pool, caller: Caller, messages: Messages,
                     tools: list[dict[str, Any]] | None, operation: str | None, trace_id: str,
                     budget: Budget, lanes_wanted: int, params: Mapping[str, Any],
                     limit: AttemptLimit) -> LLMResult:
        """The routed call proper: start lanes, queue, fail over, return the first answer;
        never more attempts than ``limit`` allows."""
        queue_until = time.monotonic() + ATTEMPT_TIMEOUT_S
        excluded: set[str] = set()
        errors: list[BaseException] = []
        last_rejection: ProviderError | None = None
        running: dict[asyncio.Task[Reply], Attempt] = {}
        won = False
        try:
            while True:
                pick = None
                while len(running) < lanes_wanted:
                    if limit.spent:
                        if running:
                            break
                        raise self._exhausted(pool, caller, limit, errors, last_rejection)
                    busy = excluded | limit.used_up() | {a.llm_name for a in running.values()}
                    try:
                        pick = pool.pick(caller, busy, operation, budget.wait)
                    except NoLLMAvailableError as exc:
                        if running:
                            break
                        if exc.reason in ("excluded", "no_keys") and last_rejection is not None:
                            raise last_rejection from None
                        if exc.reason == "excluded" and limit.used_up():
                            raise self._exhausted(pool, caller, limit, errors, None) from None
                        exc.errors = tuple(errors)
                        raise
                    if not pick.ready or budget.too_late_to_start():
                        break
                    attempt = self._attempt(pick.ready[0], caller, trace_id, operation, budget,
                                            messages, limit)
                    body = build_body(attempt.state.entry.model, messages, stream=False,
                                      tools=tools, params=params)
                    task = asyncio.ensure_future(self._run_lane(attempt, caller, body, budget))
                    running[task] = attempt
                if not running:
                    await self._queue(pool, pick, budget, queue_until, errors)
                    continue
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    attempt = running.pop(task)
                    exc = task.exception()
                    if exc is None:
                        won = True
                        return self._result(attempt)
                    errors.append(exc)
                    if isinstance(exc, ProviderError) and exc.status is not None \
                            and 400 <= exc.status < 500 and exc.status not in (408, 429):
                        excluded.add(attempt.llm_name)
                        last_rejection = exc
        finally:
            for task, attempt in running.items():  # race losers, or the caller gave up
                attempt.cancel_status = "superseded" if won else "cancelled"
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    def _exhausted(self, pool: Pool, caller: Caller, limit: AttemptLimit,
                   errors: list[BaseException],
                   last_rejection: ProviderError | None) -> LLMRequestError:
        """The call reached an attempt ceiling: end it as when every candidate is ruled out."""
        if last_rejection is not None:
            return last_rejection
        now = time.time()
        cooling = [s.cooldown_until for s in pool.members(caller) if s.cooling(now)]
        retry_at = min(cooling) if cooling else None
        last = f"; last error: {errors[-1]}" if errors else ""
        return NoLLMAvailableError(
            f"no model answered this call{limit.note()}{last}",
            reason="timeout" if retry_at else "excluded", retry_at=utc(retry_at),
            errors=tuple(errors))

    async def _queue(self, pool: Pool, pick: Any, budget: Budget, queue_until: float,
                     errors: list[BaseException]) -> None:
        """Nothing can start now: wait for a slot or a cooldown within the budget, or raise."""
        retry_at = pick.retry_at if pick is not None else None
        left = budget.remaining() if budget.limited else queue_until - time.monotonic()
        coming = (retry_at - time.time()) if retry_at else 0.0
        if not budget.queues or left is None or left <= 0 or coming > left \
                or budget.too_late_to_start():
            raise NoLLMAvailableError(
                "no model could answer in time"
                + (f"; the first cooling model returns at {utc(retry_at):%H:%M:%S} UTC"
                   if retry_at else "")
                + (f" (wait={budget.wait:g})" if budget.wait is not None else ""),
                reason="timeout", retry_at=utc(retry_at), errors=tuple(errors))
        await pool.changed(min(left, coming) if coming > 0 else left)

    def _attempt(self, state: ModelState, caller: Caller, trace_id: str,
                 operation: str | None, budget: Budget, messages: Messages,
                 limit: AttemptLimit) -> Attempt:
        """A new attempt (a journal row to be), counted against the call's ceilings."""
        limit.count(state.entry.name)
        prompt_text = None
        if self._store_text:
            prompt_text = "\n".join(str(m.get("content") or "") for m in messages)
        return Attempt(state, self._pool, self._journal_row,  # type: ignore[arg-type]
                       trace_id=trace_id, operation=operation, scope=caller.scope,
                       budget_ms=budget.budget_ms, prompt_text=prompt_text)

    async def _run_lane(self, attempt: Attempt, caller: Caller, body: dict[str, Any],
                        budget: Budget) -> Reply:
        """One non-streaming attempt; failures are applied to the pool and raised as
        ``ProviderError``; a cancellation journals ``attempt.cancel_status``."""
        timeout = budget.attempt_timeout()
        try:
            url, key = await self._endpoint(attempt.state, caller)
            async with asyncio.timeout(timeout):
                reply = await post_chat(self._client, url, key, body)  # type: ignore[arg-type]
        except Failure as failure:
            raise self._failed(attempt, caller, failure) from None
        except TimeoutError:
            raise self._timed_out(attempt, budget).to_error(attempt.llm_name) from None
        except asyncio.CancelledError:
            attempt.finish(attempt.cancel_status)
            raise
        except Exception as exc:  # noqa: BLE001 - a surprise is this attempt's failure, journaled
            log.exception("attempt %s of %s failed", attempt.call_id, attempt.llm_name)
            raise self._failed(attempt, caller, Failure(
                "invalid", redact(f"{type(exc).__name__}: {exc}"))) from None
        self._pool.succeeded(attempt.llm_name)  # type: ignore[union-attr]
        attempt.succeed(reply)
        return reply

    def _failed(self, attempt: Attempt, caller: Caller, failure: Failure) -> ProviderError:
        until = self._pool.failed(attempt.llm_name, failure, caller)  # type: ignore[union-attr]
        attempt.fail(failure, until)
        return failure.to_error(attempt.llm_name)

    def _timed_out(self, attempt: Attempt, budget: Budget) -> Failure:
        """Nothing (or not all) arrived in time: a model that sent nothing is cooled; either
        way a missed ``wait`` steers the next equally short request away."""
        pool = self._pool
        assert pool is not None
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

    async def _endpoint(self, state: ModelState, caller: Caller) -> tuple[str, str | None]:
        pool = self._pool
        assert pool is not None
        _, key = pool.key_for(state, caller)
        if state.entry.is_local:
            try:
                return await self._embedded.base_url(state.entry), key
            except Exception as exc:  # noqa: BLE001 - any loading failure: it cannot start
                raise Failure("cannot_start", redact(f"{type(exc).__name__}: {exc}")) from None
        return state.entry.base_url.rstrip("/"), key

    def _result(self, attempt: Attempt) -> LLMResult:
        return LLMResult(text=attempt.text, llm_name=attempt.llm_name, call_id=attempt.call_id,
                         trace_id=attempt.trace_id, usage=dict(attempt.usage),
                         tool_calls=list(attempt.tool_calls),
                         finish_reason=attempt.finish_reason, operation=attempt.operation,
                         _rate=self._rate)

    # journal and ratings -----------------------------------------------------------------------
    def _journal_row(self, row: dict[str, Any]) -> int:
        self._journaled[row["call_id"]] = {k: row[k] for k in (
            "trace_id", "llm_name", "operation", "scope", "status")}
        if len(self._journaled) > _RECENT_CALLS:
            self._journaled.popitem(last=False)
        try:
            return self._writer.attempt(row)
        except RuntimeError:  # aclose() settles every call first; if one still outlived it, say so
            log.error("attempt %s (%s, %s) ended after the broker closed; not journaled",
                      row["call_id"], row["llm_name"], row["status"])
            return 0

    def _rate(self, call_id: str, score: float) -> None:
        """Journal a rating of ``call_id`` and feed it to quality learning (any thread)."""
        score = check_score(score)
        info = self._journaled.get(call_id)
        if info is None:
            self._writer.flush()
            rows = self.store.attempts(call_id=call_id)
            info = rows[0] if rows else None
        if info is None:
            raise ValueError(f"call_id={call_id!r}: no journaled answer with this id (yet); rate "
                             "an answer after it has ended, using the id of this broker's "
                             "result or stream")
        if self._pool is not None:
            self._pool.quality.add(info["llm_name"], info["operation"], score)
        from datetime import UTC, datetime

        self._writer.rating({"call_id": call_id, "trace_id": info["trace_id"],
                             "llm_name": info["llm_name"], "operation": info["operation"],
                             "scope": info["scope"], "score": score,
                             "rated_at": datetime.now(UTC).isoformat()})

    async def _call_of_trace(self, trace_id: str) -> str:
        rows = [r for r in await self.calls(trace_id=trace_id) if r["status"] == "ok"]
        if len(rows) != 1:
            ids = [r["call_id"] for r in rows]
            raise ValueError(f"trace_id={trace_id!r}: {len(rows)} successful answers "
                             f"{ids if ids else ''}; rate by call_id (the result's or stream's "
                             "record_quality) so the rating names the answer that was shown")
        return str(rows[0]["call_id"])

    def _state(self, pool: Pool, name: str) -> ModelState:
        if name not in pool.states:
            raise KeyError(f"llm name {name!r} is not in the registry; known: "
                           f"{', '.join(pool.states) or '(none)'}")
        return pool.states[name]

