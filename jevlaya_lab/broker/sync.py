"""``Broker``: the synchronous facade over one background event-loop thread.

Every blocking method submits a coroutine of the shared :class:`AsyncBroker` to that loop, so
many threads may call one ``Broker`` at once. Closing is idempotent; a broker dropped without
``close()`` is closed in the background by a finalizer that never blocks the collecting thread.
``close()`` may come from any thread while others are in calls: it follows the engine's order
(refuse new calls, cancel the ones in flight with a journaled ``cancelled`` row and a
``BrokerClosedError`` for their threads, flush the journal, close); no calling thread is left
waiting on a loop that has stopped, and a second ``close()`` returns once the first is done.
Streams and scoped callers hold their broker until they are done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import weakref
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from jevlaya_lab.broker.engine import AsyncBroker, check_grace
from jevlaya_lab.broker.errors import closed_error
from jevlaya_lab.broker.results import SyncLLMResult
from jevlaya_lab.broker.streaming import stream_mimebundle

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._pending: set[cf.Future[Any]] = set()  # calls submitted from other threads
        self._lock = threading.Lock()
        self._finished = False
        self.thread = threading.Thread(target=self._main, name="jevlaya-broker-loop", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
        finally:
            with self._lock:  # a call the stopped loop will never finish must not hang its thread
                self._finished = True
                pending, self._pending = self._pending, set()
            for future in pending:
                if not future.done():
                    try:
                        future.set_exception(closed_error("this broker", in_flight=True))
                    except cf.InvalidStateError:
                        pass

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync Broker method was called from the broker's own event "
                               "loop; use the AsyncBroker (await) there")
        with self._lock:
            if self._finished or self.loop.is_closed():
                coro.close()
                raise closed_error("this broker")
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            self._pending.add(future)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the caller cancels the call
            raise
        finally:
            with self._lock:
                self._pending.discard(future)

    def stop(self, *, join: bool = True) -> None:
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:
                return
        if join and threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)


def _close_in_background(runner: LoopThread, engine: AsyncBroker) -> None:
    """Finalizer of a dropped Broker: close it on its own loop, then stop the loop."""
    async def close_then_stop() -> None:
        try:
            await engine.aclose()
        finally:
            runner.loop.stop()

    try:
        runner.loop.call_soon_threadsafe(lambda: runner.loop.create_task(close_then_stop()))
    except RuntimeError:  # loop already closed
        pass


class Broker:
    """Same arguments and methods as :class:`AsyncBroker`, called without ``await``."""

    def __init__(self, source: str | Path | None = None, **kwargs: Any) -> None:
        self._engine = AsyncBroker(source, **kwargs)
        self._runner = LoopThread()
        self._closed = False
        self._close_done = threading.Event()
        self._finalizer = weakref.finalize(self, _close_in_background, self._runner, self._engine)

    @property
    def engine(self) -> AsyncBroker:
        """The shared async engine (to use from async code on the broker's loop only)."""
        return self._engine

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def __enter__(self) -> Broker:
        self._run(self._engine._ready())
        return self

    def __exit__(self, *exc: Any) -> None:
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
        try:
            self._run(self._engine.aclose(grace=grace))
        finally:
            self._runner.stop()
            self._close_done.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def ask(self, prompt: str, **kwargs: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._run(self._engine.ask(prompt, **kwargs)))

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._run(self._engine.chat(messages, **kwargs)))

    def stream(self, prompt: str, **kwargs: Any) -> SyncStream:
        return SyncStream(self, self._engine.stream(prompt, **kwargs))

    def for_scope(self, scope: str) -> ScopedBroker:
        return ScopedBroker(self, self._engine.for_scope(scope))

    def direct(self, name: str) -> Direct:
        return Direct(self, self._engine.direct(name))

    def record_quality(self, score: float, *, call_id: str | None = None,
                       trace_id: str | None = None) -> None:
        self._run(self._engine.record_quality(score, call_id=call_id, trace_id=trace_id))

    def calls(self, **filters: Any) -> list[dict[str, Any]]:
        return self._run(self._engine.calls(**filters))

    def ratings(self, **filters: Any) -> list[dict[str, Any]]:
        return self._run(self._engine.ratings(**filters))

    def stats(self, **kwargs: Any) -> dict[str, dict[str, Any]]:
        return self._run(self._engine.stats(**kwargs))

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return self._run(self._engine.snapshot())

    def disable_llm(self, name: str) -> None:
        self._run(self._engine.disable_llm(name))

    def enable_llm(self, name: str) -> None:
        self._run(self._engine.enable_llm(name))

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
    ahead). It holds its broker; dropping it unclosed cancels the provider request."""

    def __init__(self, broker: Broker, stream: Any) -> None:
        self._broker = broker
        self._stream = stream

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        try:
            return self._broker._run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def another(self) -> SyncLLMResult | None:
        result = self._broker._run(self._stream.another())
        return SyncLLMResult.of(result) if result is not None else None

    def record_quality(self, score: float) -> None:
        """Rate the answer this stream names (after a replacement: the winner)."""
        self._broker._run(self._stream.record_quality(score))

    def close(self) -> None:
        if not self._broker.closed:
            self._broker._run(self._stream.aclose())

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def add_listener(self, listener: Any) -> None:
        """See ``AsyncStream.add_listener``: called on the broker's loop thread."""
        self._stream.add_listener(listener)

    def __getattr__(self, name: str) -> Any:
        if name in ("llm_name", "call_id", "trace_id", "usage", "text", "tool_calls", "lanes"):
            return getattr(self._stream, name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        return repr(self._stream).replace("AsyncStream", "Stream", 1)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display from any thread, even mid-pull (see ``stream_mimebundle``)."""
        return stream_mimebundle(self._stream, "Stream")


class ScopedBroker:
    """``Broker.for_scope(scope)``: the broker's calls with scoped keys and journal rows."""

    def __init__(self, broker: Broker, scoped: Any) -> None:
        self._broker = broker
        self._scoped = scoped

    @property
    def scope(self) -> str:
        return self._scoped.scope

    def ask(self, prompt: str, **kwargs: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._broker._run(self._scoped.ask(prompt, **kwargs)))

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._broker._run(self._scoped.chat(messages, **kwargs)))

    def stream(self, prompt: str, **kwargs: Any) -> SyncStream:
        return SyncStream(self._broker, self._scoped.stream(prompt, **kwargs))

    def record_quality(self, score: float, **kwargs: Any) -> None:
        self._broker._run(self._scoped.record_quality(score, **kwargs))

    def __repr__(self) -> str:
        return f"<ScopedBroker scope={self.scope!r}>"


class Direct:
    """``Broker.direct(name)``: one model, no pool, no failover, no journal row."""

    def __init__(self, broker: Broker, direct: Any) -> None:
        self._broker = broker
        self._direct = direct

    def ask(self, prompt: str, **kwargs: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._broker._run(self._direct.ask(prompt, **kwargs)))

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> SyncLLMResult:
        return SyncLLMResult.of(self._broker._run(self._direct.chat(messages, **kwargs)))

    def stream(self, prompt: str, **kwargs: Any) -> SyncStream:
        return SyncStream(self._broker, self._direct.stream(prompt, **kwargs))
