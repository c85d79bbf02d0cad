"""``Runtime``: one broker's parts, built and closed in order (package-internal).

It is the assembly, not a step of any call. It builds the parts a call uses and hands them
out: the storage and keys, the :class:`~jevlaya_lab.broker.journaling.CallJournal` over a
background :class:`~jevlaya_lab.journal.JournalWriter`, the
:class:`~jevlaya_lab.broker.transport.Transport`, the :class:`~jevlaya_lab.broker.gate.Gate`,
the :class:`~jevlaya_lab.broker.registry.Registry` and, on first use, the pool and the
:class:`~jevlaya_lab.broker.attempt.Attempts` that make requests (:meth:`Runtime.ready`
returns them as :class:`Parts`). A call then runs top to bottom on those parts
(``docs/broker.md``); nothing calls back into the runtime. Closing is described in
:mod:`jevlaya_lab.broker.engine`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jevlaya_lab.broker.attempt import Attempts, Parts
from jevlaya_lab.broker.catalog import CatalogSource
from jevlaya_lab.broker.config import LLMConfig, check_direct
from jevlaya_lab.broker.embedded import EmbeddedServer
from jevlaya_lab.broker.gate import Gate, OpenStream
from jevlaya_lab.broker.journaling import JOURNAL_WINDOW_ROWS as JOURNAL_WINDOW_ROWS
from jevlaya_lab.broker.journaling import CallJournal
from jevlaya_lab.broker.keys import KeyResolver, guard_library_logs
from jevlaya_lab.broker.pool import Caller, CooldownBook, ModelState, Pool
from jevlaya_lab.broker.registry import Registry, check_user_models
from jevlaya_lab.broker.transport import Transport
from jevlaya_lab.journal import JournalWriter, open_store
from jevlaya_lab.journal.errors import JournalWriteError
from jevlaya_lab.journal.store import Store
from jevlaya_lab.journal.writer import WRITER_THREAD

log = logging.getLogger("jevlaya_lab.broker")

if TYPE_CHECKING:
    from jevlaya_lab.journal.cooldowns import SharedCooldowns


async def off_loop(step: Callable[[], None]) -> None:
    """Run a blocking step of closing in a worker thread, so the loop keeps serving the streams
    being closed; or on the loop itself when Python's thread pools take no new work, which is the
    case in an ``atexit`` handler (a script's or a Dask worker's ``atexit.register(broker.close)``):
    the journal must still be written then, and nothing else runs on the loop by that time."""
    loop = asyncio.get_running_loop()
    try:
        done = loop.run_in_executor(None, step)
    except RuntimeError:  # "cannot schedule new futures after shutdown": the interpreter is exiting
        step()
        return
    await done


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Runtime:
    def __init__(self, source: str | Path | None, *,
                 models: Sequence[LLMConfig | Mapping[str, Any]] | None,
                 secrets: Mapping[str, str] | None, optimize: bool,
                 home: str | Path | None, catalog: CatalogSource, retention_days: float,
                 store_text: bool, dotenv: str | Path | None, local: bool | None,
                 direct: Sequence[LLMConfig | Mapping[str, Any]] = (),
                 sync_interval: float | None = None, cooldowns: Any = None,
                 durable: bool = False) -> None:
        if not isinstance(durable, bool):
            raise ValueError(f"durable={durable!r}: must be True (a call returns once its journal "
                             "rows are committed) or False (rows are committed in the background)")
        self.durable = durable
        user_models = check_user_models(models)
        # models reached only with direct(): never pool members, never stored
        direct_states = {e.name: ModelState(e, -1) for e in check_direct(user_models, direct)}
        if retention_days <= 0:
            raise ValueError(f"retention_days={retention_days!r}: must be a positive number")
        # made inside a running event loop, the store opens on first use, from a worker thread,
        # never on the loop; otherwise (the sync Broker) here, so a broken file fails at once
        self.store: Store = open_store(source, home=home, deferred=_in_event_loop())
        try:  # what can still be refused, before anything else opens; a refusal leaves nothing open
            self.keys = KeyResolver(self.store, secrets, Path(dotenv) if dotenv else None)
            book = shared_cooldowns(cooldowns, source, self.store.location)
        except BaseException:
            self.store.close()
            raise
        # a book the broker made (cooldowns=True) is closed with it; one the caller gave is theirs
        self.own_book = cast("SharedCooldowns", book) if cooldowns is True else None
        guard_library_logs(self.keys)  # until close(): keys never reach httpx/httpcore logs
        self.writer = JournalWriter(self.store)
        self.journal = CallJournal(self.writer, self.store, durable=durable)
        self.embedded = EmbeddedServer()
        self.transport = Transport(self.embedded)
        self.gate = Gate(f"the broker at {self.store.location}")
        self.observers: list[Any] = []  # tracers told of calls and attempts (AsyncBroker.observe)
        self.registry = Registry(self.store, self.keys, user_models=user_models,
                                 direct_states=direct_states, catalog=catalog,
                                 optimize=optimize, local=local, retention_days=retention_days,
                                 sync_interval=sync_interval, cooldowns=book)
        self.callers: dict[str | None, Caller] = {None: Caller()}
        self.store_text = store_text
        self._parts: Parts | None = None
        self._ready_lock: asyncio.Lock | None = None
        self._close_done: asyncio.Event | None = None
        # the loop the pool was built on (one element once built): a list, so that the finalizer
        # below holds it without holding the runtime
        self._loop_box: list[asyncio.AbstractEventLoop] = []
        # dropped without close() (an AsyncBroker re-made in a notebook cell, its handles gone), or
        # still open at interpreter exit: write its journal rows and release what would otherwise
        # live on, a writer thread, a database handle, the key filter
        self._dropped = weakref.finalize(self, release_dropped, self.journal, self.writer, self.store,
                                         self.keys, self.embedded, self.own_book, self.transport,
                                         self._loop_box, os.getpid())

    def closed_by_owner_at_exit(self) -> None:
        """A sync ``Broker`` drives this runtime on its loop thread and closes it at interpreter exit
        itself (the whole ordered close): this runtime's finalizer then stays out at exit, or both
        would close the same parts at once. Still a finalizer when the runtime is collected."""
        self._dropped.atexit = False

    # what tests and the engine read ------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.gate.name

    @property
    def closed(self) -> bool:
        return self.gate.closed

    @property
    def streams(self) -> set[OpenStream]:
        return self.gate.streams

    @property
    def pool(self) -> Pool:
        """The pool (only after :meth:`ready`)."""
        if self._parts is None:
            raise RuntimeError("the broker's pool is not built yet; await ready() first")
        return self._parts.pool

    @property
    def built(self) -> bool:
        return self._parts is not None

    async def flush(self) -> None:
        """Return once every journal row queued so far is written."""
        await self.journal.flush()

    def caller(self, scope: str | None = None) -> Caller:
        return self.callers.setdefault(scope, Caller(scope))

    # readiness ---------------------------------------------------------------------------------
    def ready_now(self) -> Parts | None:
        """The parts when the pool is built already (``None`` before: await :meth:`ready`),
        with the same checks, without a coroutine: every call after the first takes this."""
        self.gate.check()
        parts = self._parts
        if parts is not None:
            if self._loop_box[0] is not asyncio.get_running_loop():
                raise RuntimeError("this AsyncBroker belongs to another event loop (its HTTP "
                                   "connections live there); create one broker per loop, or "
                                   "use the sync Broker from several threads")
            self.registry.housekeeping(parts.pool, self.callers[None])
        return parts

    async def ready(self) -> Parts:
        """The parts of a call: the pool is built on first use; refused when closed."""
        parts = self.ready_now()
        if parts is not None:
            return parts
        if self._ready_lock is None:
            self._ready_lock = asyncio.Lock()
        async with self._ready_lock:
            if self._parts is None:
                self._loop_box[:] = [asyncio.get_running_loop()]
                pool = await asyncio.to_thread(self.registry.build_pool)
                self.journal.quality = pool.quality
                self._parts = Parts(pool, Attempts(pool, self.journal, self.transport,
                                                   store_text=self.store_text,
                                                   observers=self.observers), self.journal)
        return self._parts

    # closing -----------------------------------------------------------------------------------
    async def close(self, grace: float) -> None:
        gate = self.gate
        if gate.closed:
            if self._close_done is not None:
                await self._close_done.wait()
            return
        gate.closed = True
        self._dropped.detach()
        self._close_done = asyncio.Event()
        try:
            await self.registry.stop()
            await gate.close_streams()
            await gate.settle(grace)
            if self._parts is not None:
                self._parts.pool.notify()  # wake streams waiting for a slot: they now see the close
            unwritten: JournalWriteError | None = None
            self.journal.hand_over()
            try:
                await off_loop(self.writer.close)
            except JournalWriteError as exc:  # rows saved for the next broker: say so, after closing
                unwritten = exc
            await self.transport.aclose()
            for step in _after_http(self.embedded, self.store, self.own_book):
                await off_loop(step)
            if unwritten is not None:
                raise unwritten
        finally:
            guard_library_logs(self.keys, on=False)
            self._close_done.set()


def _after_http(embedded: EmbeddedServer, store: Store,
                own_book: SharedCooldowns | None) -> list[Callable[[], None]]:
    """The blocking steps of closing once the journal is written and HTTP is closed, in order (both
    :meth:`Runtime.close` and :func:`release_dropped` take them)."""
    return [embedded.stop, store.close, *([own_book.close] if own_book is not None else [])]


def release_dropped(journal: CallJournal, writer: JournalWriter, store: Store, keys: KeyResolver,
                    embedded: EmbeddedServer, own_book: SharedCooldowns | None, transport: Transport,
                    loop_box: list[asyncio.AbstractEventLoop], pid: int) -> None:
    """A runtime's finalizer, when it was never closed and nothing refers to it any more (no
    broker, scoped or direct handle, stream or call), or at interpreter exit when it is still open
    (an ``AsyncBroker`` a script never closed: its last answers' rows were lost).

    It hands the call journal's last rows to the writer (they wait there for a batch to fill, and
    were lost with a dropped broker), writes them and stops the writer thread, stops local servers,
    closes the store and the cooldown book the broker made, takes its keys off the library
    loggers' filter, and closes its HTTP connections on the loop they belong to when that loop is
    still open (else the garbage collector closes them). Each step runs even when one before it
    failed; a failure is logged (rows saved to the spill file name it), never raised into the
    thread that happened to collect the runtime. A sync ``Broker``'s runtime is left to that
    Broker at exit (:meth:`Runtime.closed_by_owner_at_exit`), which closes it on its loop thread.
    In a forked child (``pid`` is not this process's) it does nothing: the writer thread is the
    parent's, and the rows it would write are the parent's copy."""
    if os.getpid() != pid:
        return
    def release() -> None:
        def write() -> None:
            journal.hand_over()
            writer.close()

        def unguard() -> None:
            guard_library_logs(keys, on=False)

        for step in [write, *_after_http(embedded, store, own_book), unguard]:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - logged: a finalizer has no caller to raise to
                log.warning("releasing a broker dropped without close(): %s: %s", type(exc).__name__, exc)

    loop = loop_box[0] if loop_box else None
    if loop is not None and not loop.is_closed():
        try:
            loop.call_soon_threadsafe(_close_soon, transport)
        except RuntimeError:  # closed in between
            pass
    if threading.current_thread().name == WRITER_THREAD:  # collected on the writer's own thread
        threading.Thread(target=release, name="jevlaya-journal-release").start()
    else:
        release()


_closing: set[asyncio.Task[None]] = set()  # held until done: the loop keeps only weak references


def _close_soon(transport: Transport) -> None:
    task = asyncio.get_running_loop().create_task(transport.aclose())
    _closing.add(task)
    task.add_done_callback(_closing.discard)


def shared_cooldowns(cooldowns: Any, source: str | Path | None, location: str) -> CooldownBook | None:
    """``cooldowns=`` of a broker: ``None``/``False`` (this pool's own), ``True`` (a book in the
    journal's own database, shared by every broker with ``cooldowns=True`` on it) or a book."""
    if cooldowns is None or cooldowns is False:
        return None
    if cooldowns is True:
        from jevlaya_lab.journal.cooldowns import SharedCooldowns

        return SharedCooldowns(source if source is not None else location)
    if not (callable(getattr(cooldowns, "until", None)) and callable(getattr(cooldowns, "extend", None))):
        raise TypeError(f"cooldowns={cooldowns!r}: expected True, None or a cooldown book with until(name) "
                        "and extend(name, until) (jevlaya_lab.broker.pool.MemoryCooldowns, SharedCooldowns)")
    return cast(CooldownBook, cooldowns)
