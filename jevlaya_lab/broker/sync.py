"""``Broker``: the synchronous facade over one background event-loop thread.

Every blocking method submits a coroutine of the shared :class:`AsyncBroker` to that loop, so
many threads may call one ``Broker`` at once. Closing is idempotent; a broker dropped without
``close()`` is closed in the background by a finalizer that never blocks the collecting thread.
``close()`` may come from any thread while others are in calls: it follows the engine's order
(refuse new calls, cancel the ones in flight with a journaled ``cancelled`` row and a
``BrokerClosedError`` for their threads, flush the journal, close); no calling thread is left
waiting on a loop that has stopped, and a second ``close()`` returns once the first is done.
Streams and scoped callers hold their broker until they are done. A broker still open at
interpreter exit (a script that ends without ``close()``) is closed then, with its whole ordered
close, so the journal rows of the answers it gave are written: by the time Python runs its exit
steps it has joined the script's non-daemon threads, and the loop thread (a daemon) still runs.

Every method has the signature of its async twin (``AsyncBroker``, ``AsyncScopedBroker``,
``AsyncDirect``), written out, so IDEs and type checkers see the same API on both sides.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from jevlaya_lab.broker.catalog import CatalogSource, SyncReport
from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.direct import AsyncDirect
from jevlaya_lab.broker.engine import AsyncBroker
from jevlaya_lab.broker.lanes import LaneView
from jevlaya_lab.broker.loop_thread import LoopThread, close_at_exit, close_in_background, closed_before_exit
from jevlaya_lab.broker.report import LLMInfo, PoolSnapshot
from jevlaya_lab.broker.results import LLMResult, StreamProtocol, SyncLLMResult
from jevlaya_lab.broker.scoped import AsyncCalls, AsyncScopedBroker
from jevlaya_lab.broker.streaming import AsyncStream, stream_mimebundle
from jevlaya_lab.broker.validation import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_ATTEMPTS_PER_MODEL,
    DEFAULT_WINDOW_S,
    Messages,
    check_grace,
)

T = TypeVar("T")


class SyncCalls:
    """``ask``, ``chat``, ``stream`` and ``record_quality`` of one caller, without ``await``
    (the sync twin of ``AsyncCalls``)."""

    _async: AsyncCalls

    @property
    def _owner(self) -> Broker:
        raise NotImplementedError

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._owner._runner.run(coro)

    def ask(self, prompt: str, *, operation: str | None = None, trace_id: str | None = None,
            wait: float | None = None, fastest_of: int | None = None,
            parallel_recovery: bool = True, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
            max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
            **params: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._run(self._async.ask(
            prompt, operation=operation, trace_id=trace_id, wait=wait, fastest_of=fastest_of,
            parallel_recovery=parallel_recovery, max_attempts=max_attempts,
            max_attempts_per_model=max_attempts_per_model, **params)))

    def chat(self, messages: Messages, *, tools: list[dict[str, Any]] | None = None,
             operation: str | None = None, trace_id: str | None = None,
             wait: float | None = None, fastest_of: int | None = None,
             parallel_recovery: bool = True, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
             max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
             **params: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._run(self._async.chat(
            messages, tools=tools, operation=operation, trace_id=trace_id, wait=wait,
            fastest_of=fastest_of, parallel_recovery=parallel_recovery,
            max_attempts=max_attempts, max_attempts_per_model=max_attempts_per_model,
            **params)))

    def stream(self, prompt: str | Messages, *, operation: str | None = None,
               trace_id: str | None = None, wait: float | None = None,
               fastest_of: int | None = None, parallel_recovery: bool = True,
               stream_selection_window: float = DEFAULT_WINDOW_S,
               max_attempts: int = DEFAULT_MAX_ATTEMPTS,
               max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
               **params: Any) -> SyncStream:
        return SyncStream(self._owner, self._async.stream(
            prompt, operation=operation, trace_id=trace_id, wait=wait, fastest_of=fastest_of,
            parallel_recovery=parallel_recovery,
            stream_selection_window=stream_selection_window, max_attempts=max_attempts,
            max_attempts_per_model=max_attempts_per_model, **params))

    def record_quality(self, score: float, *, call_id: str | None = None,
                       trace_id: str | None = None) -> None:
        self._run(self._async.record_quality(score, call_id=call_id, trace_id=trace_id))


def _sync(result: LLMResult | None) -> SyncLLMResult | None:
    return SyncLLMResult.of(result) if result is not None else None


class Broker(SyncCalls):
    """Same arguments and methods as :class:`AsyncBroker`, called without ``await``."""

    def __init__(self, source: str | Path | None = None, *,
                 models: Sequence[LLMConfig | Mapping[str, Any]] | None = None,
                 secrets: Mapping[str, str] | None = None, optimize: bool = True,
                 home: str | Path | None = None, catalog: CatalogSource = None,
                 retention_days: float = 90.0, store_text: bool = False,
                 dotenv: str | Path | None = None, local: bool | None = None,
                 direct: Sequence[LLMConfig | Mapping[str, Any]] = (),
                 sync_interval: float | None = 86400.0, cooldowns: Any = None,
                 durable: bool = False) -> None:
        self._engine = AsyncBroker(source, models=models, secrets=secrets, optimize=optimize,
                                   home=home, catalog=catalog, retention_days=retention_days,
                                   store_text=store_text, dotenv=dotenv, local=local,
                                   direct=direct, sync_interval=sync_interval, cooldowns=cooldowns,
                                   durable=durable)
        self._async = self._engine
        self._runner = LoopThread()
        self._closed = False
        self._close_done = threading.Event()
        self._finalizer = weakref.finalize(self, close_in_background, self._runner, self._engine)
        # at interpreter exit the broker is closed and waited for (a finalizer never waits); the
        # engine's runtime is this broker's to close then
        self._finalizer.atexit = False
        self._engine._rt.closed_by_owner_at_exit()
        close_at_exit(self)

    @property
    def engine(self) -> AsyncBroker:
        """The shared async engine (to use from async code on the broker's loop only)."""
        return self._engine

    @property
    def store_text(self) -> bool:
        """See ``AsyncBroker.store_text``."""
        return self._engine.store_text

    @property
    def _owner(self) -> Broker:
        return self

    def observe(self, observer: Any) -> None:
        """See ``AsyncBroker.observe``: a tracer told of every call and attempt."""
        self._engine.observe(observer)

    def __enter__(self) -> Broker:
        """Build the pool; when that fails the broker is closed (its loop thread too) and the
        failure raised, as ``with`` never calls ``__exit__`` then."""
        try:
            self._run(self._engine.__aenter__())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, *, grace: float = 0.0) -> None:
        """Refuse new calls, close open streams, give calls in flight ``grace`` seconds and
        cancel the rest (journaled ``cancelled``), flush the journal, close HTTP and storage.
        Any thread may call it, any number of times; it returns once the broker is closed."""
        grace = check_grace(grace)
        if self._closed:
            if threading.current_thread() is not self._runner.thread:
                self._close_done.wait()
            return
        self._closed = True
        self._finalizer.detach()
        closed_before_exit(self)
        try:
            self._run(self._engine.aclose(grace=grace))
        finally:
            self._runner.stop()
            self._close_done.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def for_scope(self, scope: str) -> ScopedBroker:
        return ScopedBroker(self, self._engine.for_scope(scope))

    def direct(self, alias: str | None = None, *, name: str | None = None) -> Direct:
        """The model is looked up now: an unknown alias or name raises here."""
        direct = self._engine.direct(alias, name=name)
        self._run(direct._ready())
        return Direct(self, direct)

    def calls(self, *, call_id: str | None = None, trace_id: str | None = None,
              llm_name: str | None = None, operation: str | None = None,
              scope: str | None = None, status: str | None = None, since: str | None = None,
              limit: int | None = None) -> list[dict[str, Any]]:
        return self._run(self._engine.calls(
            call_id=call_id, trace_id=trace_id, llm_name=llm_name, operation=operation,
            scope=scope, status=status, since=since, limit=limit))

    def ratings(self, *, call_id: str | None = None, trace_id: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        return self._run(self._engine.ratings(call_id=call_id, trace_id=trace_id, limit=limit))

    def stats(self, *, operation: str | None = None,
              since: str | None = None) -> dict[str, dict[str, Any]]:
        return self._run(self._engine.stats(operation=operation, since=since))

    def snapshot(self) -> PoolSnapshot:
        return self._run(self._engine.snapshot())

    def count(self) -> int:
        return self._run(self._engine.count())

    def ensure_pool(self) -> None:
        self._run(self._engine.ensure_pool())

    def get(self, name: str) -> LLMInfo:
        return self._run(self._engine.get(name))

    def disable_llm(self, name: str) -> None:
        self._run(self._engine.disable_llm(name))

    def enable_llm(self, name: str) -> None:
        self._run(self._engine.enable_llm(name))

    def sync(self, source: CatalogSource = None) -> SyncReport | None:
        return self._run(self._engine.sync(source))

    @property
    def last_sync_report(self) -> SyncReport | None:
        return self._engine.last_sync_report

    def store_key(self, ref: str, value: str | None) -> None:
        self._run(self._engine.store_key(ref, value))

    @property
    def llm_names(self) -> list[str]:
        return self._engine.llm_names

    @property
    def location(self) -> str:
        return self._engine.location

    def __repr__(self) -> str:
        return repr(self._engine).replace("AsyncBroker", "Broker", 1)


class SyncStream:
    """A stream read with ``for``: each pull is one step on the broker's loop (nothing read
    ahead). It wraps any async stream (:class:`StreamProtocol`) and holds its broker;
    dropping it unclosed cancels the provider request."""

    def __init__(self, broker: Broker, stream: StreamProtocol) -> None:
        self._broker = broker
        self._stream = stream

    @property
    def llm_name(self) -> str | None:
        return self._stream.llm_name

    @property
    def call_id(self) -> str | None:
        return self._stream.call_id

    @property
    def trace_id(self) -> str:
        return self._stream.trace_id

    @property
    def usage(self) -> dict[str, int] | None:
        return self._stream.usage

    @property
    def text(self) -> str:
        return self._stream.text

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return self._stream.tool_calls

    @property
    def closed(self) -> bool:
        return self._stream.closed

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        try:
            return self._broker._run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def another(self) -> SyncLLMResult | None:
        return _sync(self._broker._run(self._stream.another()))

    def record_quality(self, score: float) -> None:
        """Rate the answer this stream names (after a replacement: the winner)."""
        self._broker._run(self._stream.record_quality(score))

    def close(self) -> None:
        if not self._broker.closed:
            self._broker._run(self._stream.aclose())

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def lanes(self) -> list[LaneView]:
        """Every attempt of a pool stream so far (a ``direct()`` stream has none)."""
        return self._stream.lanes if isinstance(self._stream, AsyncStream) else []

    def add_listener(self, listener: Callable[[LaneView], None]) -> None:
        """See ``AsyncStream.add_listener``: called on the broker's loop thread."""
        if not isinstance(self._stream, AsyncStream):
            raise TypeError("add_listener: a direct() stream has no pool lanes to report; "
                            "listen to a pool stream (broker.stream)")
        self._stream.add_listener(listener)

    def __repr__(self) -> str:
        return repr(self._stream).replace("AsyncStream", "Stream", 1)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display from any thread, even mid-pull (see ``stream_mimebundle``)."""
        if not isinstance(self._stream, AsyncStream):
            return {"text/plain": repr(self)}
        return stream_mimebundle(self._stream, "Stream")


class ScopedBroker(SyncCalls):
    """``Broker.for_scope(scope)``: the broker's calls with scoped keys and journal rows."""

    def __init__(self, broker: Broker, scoped: AsyncScopedBroker) -> None:
        self._broker = broker
        self._async = scoped
        self._scoped = scoped

    @property
    def _owner(self) -> Broker:
        return self._broker

    @property
    def scope(self) -> str | None:
        return self._scoped.scope

    def __repr__(self) -> str:
        return f"<ScopedBroker scope={self.scope!r}>"


class Direct:
    """``Broker.direct(alias)`` / ``direct(name=...)``: one model, no pool, no failover, no
    journal row."""

    def __init__(self, broker: Broker, direct: AsyncDirect) -> None:
        self._broker = broker
        self._direct = direct

    @property
    def name(self) -> str:
        return self._direct.name

    def ask(self, prompt: str, *, wait: float | None = None, **params: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._broker._run(self._direct.ask(prompt, wait=wait,
                                                                   **params)))

    def chat(self, messages: Messages, *, tools: list[dict[str, Any]] | None = None,
             wait: float | None = None, **params: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._broker._run(self._direct.chat(
            messages, tools=tools, wait=wait, **params)))

    def stream(self, prompt: str | Messages, *, wait: float | None = None,
               **params: Any) -> SyncStream:
        return SyncStream(self._broker, self._direct.stream(prompt, wait=wait, **params))
