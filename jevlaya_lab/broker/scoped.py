"""Callers: ``AsyncCalls`` (the call methods of a broker, written once) and
``for_scope(scope)``, a caller whose keys resolve ``<scope>/<REF>`` first and whose journal
rows and ratings carry the scope. Both share their broker's parts (pool, journal, transport).

Each call method validates its arguments into one ``Call``, gets the parts once the pool is
ready, and hands them to the call: :func:`~jevlaya_lab.broker.racing.route` for a complete
answer, a stream core (:func:`~jevlaya_lab.broker.stream_race.stream_core`) for a stream."""

from __future__ import annotations

import asyncio
from typing import Any

from jevlaya_lab.broker.pool import Caller
from jevlaya_lab.broker.racing import route
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.runtime import Runtime
from jevlaya_lab.broker.stream_race import stream_core
from jevlaya_lab.broker.streaming import AsyncStream
from jevlaya_lab.broker.validation import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_ATTEMPTS_PER_MODEL,
    DEFAULT_WINDOW_S,
    Messages,
    check_call,
    check_messages,
    check_prompt,
    check_stream_input,
)


class AsyncCalls:
    """``ask``, ``chat``, ``stream`` and ``record_quality`` for one caller of a runtime."""

    _rt: Runtime
    _caller: Caller

    async def ask(self, prompt: str, *, operation: str | None = None,
                  trace_id: str | None = None, wait: float | None = None,
                  fastest_of: int | None = None, parallel_recovery: bool = True,
                  max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                  max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
                  **params: Any) -> LLMResult:
        """One routed answer to ``prompt``; extra keyword args (max_tokens, temperature, ...)
        go to the provider. ``parallel_recovery``: a model back from a cooldown is raced with
        the next model (:mod:`jevlaya_lab.broker.racing`). ``max_attempts`` /
        ``max_attempts_per_model`` cap the requests this call may send
        (:mod:`jevlaya_lab.broker.limits`)."""
        call = check_call(check_prompt(prompt), operation=operation, trace_id=trace_id,
                          wait=wait, fastest_of=fastest_of, max_attempts=max_attempts,
                          max_attempts_per_model=max_attempts_per_model, params=params,
                          parallel_recovery=parallel_recovery)
        return await route(self._rt.ready_now() or await self._rt.ready(), self._rt.gate,
                           self._caller, call)

    async def chat(self, messages: Messages, *, tools: list[dict[str, Any]] | None = None,
                   operation: str | None = None, trace_id: str | None = None,
                   wait: float | None = None, fastest_of: int | None = None,
                   parallel_recovery: bool = True, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                   max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
                   **params: Any) -> LLMResult:
        """One routed answer to a conversation; with ``tools`` the answer may be tool calls."""
        call = check_call(check_messages(messages), tools=tools, operation=operation,
                          trace_id=trace_id, wait=wait, fastest_of=fastest_of,
                          max_attempts=max_attempts,
                          max_attempts_per_model=max_attempts_per_model, params=params,
                          parallel_recovery=parallel_recovery)
        return await route(self._rt.ready_now() or await self._rt.ready(), self._rt.gate,
                           self._caller, call)

    def stream(self, prompt: str | Messages, *, operation: str | None = None,
               trace_id: str | None = None, wait: float | None = None,
               fastest_of: int | None = None, parallel_recovery: bool = True,
               stream_selection_window: float = DEFAULT_WINDOW_S,
               max_attempts: int = DEFAULT_MAX_ATTEMPTS,
               max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
               **params: Any) -> AsyncStream:
        """An async stream of text deltas for a prompt (or a list of messages); see
        :mod:`jevlaya_lab.broker.streaming`. ``max_attempts`` also bounds its ``another()``
        answers."""
        call = check_call(check_stream_input(prompt), operation=operation, trace_id=trace_id,
                          wait=wait, fastest_of=fastest_of, window=stream_selection_window,
                          max_attempts=max_attempts,
                          max_attempts_per_model=max_attempts_per_model, params=params,
                          parallel_recovery=parallel_recovery)
        return AsyncStream(stream_core(self._rt.gate, self._rt.ready, self._caller, call))

    async def record_quality(self, score: float, *, call_id: str | None = None,
                             trace_id: str | None = None) -> None:
        """Rate a past call by ``call_id`` (or by ``trace_id`` when exactly one attempt of it
        succeeded)."""
        if (call_id is None) == (trace_id is None):
            raise ValueError("record_quality needs exactly one of call_id=... or trace_id=...")
        if call_id is None:
            call_id = await self._rt.journal.call_of_trace(trace_id)  # type: ignore[arg-type]
        await asyncio.to_thread(self._rt.journal.rate, call_id, score)


class AsyncScopedBroker(AsyncCalls):
    """The broker's calls for one scope; same signatures as ``AsyncBroker``'s."""

    def __init__(self, rt: Runtime, caller: Caller) -> None:
        self._rt = rt
        self._caller = caller

    @property
    def scope(self) -> str | None:
        return self._caller.scope

    def __repr__(self) -> str:
        return f"<AsyncScopedBroker scope={self.scope!r}>"
