"""``direct(alias)`` / ``direct(name=...)``: one model, no pool, no failover, no journal row.

Errors surface as they happen (``ProviderError`` and subclasses); results cannot be rated
because nothing was journaled. Useful to compare one model with the pool, or to debug it.

Which models (as llmbroker 1.11, with one extension): ``direct(name=...)`` reaches a model of
the broker's ``direct=[...]`` entries (models reached only this way: never pool members, never
stored) or of its registry; ``direct(alias)`` reaches the entry whose ``alias`` it is (an
``LLMConfig.alias`` of ``models=`` or ``direct=``), and, when no alias matches, the model of
that name (llmbroker keeps the two keyspaces apart; here ``direct("a")`` keeps working for
registry model ``a``). Exactly one of the two; an unknown one is ``UnknownLLMError`` (a
``KeyError``) listing the aliases and names; a model whose key does not resolve is
``NoLLMAvailableError(reason="no_keys")`` before any request. Calls take the pool's
validation (unknown keywords, reserved fields) and ``wait`` bounds the whole answer.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from jevlaya_lab.broker.budget import Budget
from jevlaya_lab.broker.errors import LLMTimeoutError, NoLLMAvailableError, StreamInterruptedError
from jevlaya_lab.broker.http import Failure, build_body, read_deltas
from jevlaya_lab.broker.pool import ModelState
from jevlaya_lab.broker.results import LLMResult
from jevlaya_lab.broker.runtime import Runtime
from jevlaya_lab.broker.validation import (
    Call,
    Messages,
    check_call,
    check_messages,
    check_prompt,
    check_stream_input,
)


class AsyncDirect:
    """``direct(alias)`` or ``direct(name=...)``: calls to one model (see the module
    docstring). The model is looked up when the pool is ready: at once when it is, else on the
    first call (the sync ``Broker.direct`` always looks it up at once)."""

    def __init__(self, rt: Runtime, alias: str | None = None, *,
                 name: str | None = None) -> None:
        if (alias is None) == (name is None):
            raise ValueError("direct() takes exactly one of an alias (positional) or name=...; "
                             "e.g. direct('fast') or direct(name='openai/gpt-4o-mini')")
        for field, value in (("alias", alias), ("name", name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"direct({field}={value!r}): must be a non-empty string")
        self._rt = rt
        self._alias = alias
        self._name = name
        self._state: ModelState | None = None
        self.name: str = name or alias  # type: ignore[assignment]  # the model's name once known
        if rt.built:
            self._resolve()

    def _resolve(self) -> ModelState:
        if self._state is None:
            self._state = self._rt.registry.direct_state(self._rt.pool, self._alias, self._name)
            self.name = self._state.entry.name
        return self._state

    async def _ready(self) -> ModelState:
        """The model, once the pool is ready (the sync facade calls this at ``direct()``)."""
        await self._rt.ready()
        return self._resolve()

    async def _target(self) -> tuple[str, str | None, str]:
        state = await self._ready()
        ref = state.entry.api_key_ref
        if ref is not None and self._rt.keys.resolve(ref, None) is None:
            raise NoLLMAvailableError(
                f"direct({self.name!r}): no key for {ref}; set it in the environment, a .env "
                "file, secrets= or the database (store_key)", reason="no_keys")
        _, key = self._rt.pool.key_for(state, self._rt.caller())
        try:
            url = await self._rt.transport.base_url(state.entry)
        except Failure as failure:  # an embedded model that cannot start
            raise failure.to_error(self.name) from None
        return url, key, state.entry.model

    async def ask(self, prompt: str, *, wait: float | None = None, **params: Any) -> LLMResult:
        return await self.chat(check_prompt(prompt), wait=wait, **params)

    async def chat(self, messages: Messages, *, tools: list[dict[str, Any]] | None = None,
                   wait: float | None = None, **params: Any) -> LLMResult:
        call = check_call(check_messages(messages), tools=tools, wait=wait, params=params)
        budget = Budget(call.wait)
        url, key, model = await self._target()
        body = build_body(model, call.messages, stream=False, tools=call.tools,
                          params=call.params)
        try:
            async with asyncio.timeout(budget.attempt_timeout()):
                reply = await self._rt.transport.post(url, key, body)
        except Failure as failure:
            raise failure.to_error(self.name) from None
        except TimeoutError:
            raise timed_out(self.name, budget) from None
        return LLMResult(reply.text, self.name, uuid.uuid4().hex, call.trace_id,
                         reply.usage, reply.tool_calls, reply.finish_reason)

    def stream(self, prompt: str | Messages, *, wait: float | None = None,
               **params: Any) -> DirectStream:
        """Deltas from this model; ``wait`` bounds the whole answer like a pooled stream's
        (the clock pauses while a delta is in the application's hands)."""
        return DirectStream(self, check_call(check_stream_input(prompt), wait=wait,
                                             params=params))


def timed_out(name: str, budget: Budget) -> LLMTimeoutError:
    limit = f"wait={budget.wait:g} s" if budget.limited else "60 s"
    return LLMTimeoutError(f"{name}: the answer did not complete within {limit}")


class DirectStream:
    """Text deltas from one model; a failure at any point raises (no failover). It has the
    attributes and methods of every broker stream (``StreamProtocol``); ``another()`` returns
    ``None`` (there is no other model) and nothing can be rated (nothing is journaled)."""

    def __init__(self, direct: AsyncDirect, call: Call) -> None:
        self._direct = direct
        self._call = call
        self._budget = Budget(call.wait, paused=True)
        self._gen: AsyncIterator[str] | None = None
        self._pieces: list[str] = []
        self.trace_id = call.trace_id
        self.call_id: str | None = None
        self.llm_name: str | None = None
        self.usage: dict[str, int] | None = None
        self.tool_calls: list[dict[str, Any]] = []
        self.closed = False

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def __aiter__(self) -> DirectStream:
        return self

    async def __anext__(self) -> str:
        if self.closed:
            raise StopAsyncIteration
        if self._gen is None:
            self._gen = self._deltas()
        self._budget.resume()
        try:
            async with asyncio.timeout(self._budget.attempt_timeout()):
                return await self._gen.__anext__()
        except TimeoutError:
            await self.aclose()
            raise timed_out(self._direct.name, self._budget) from None
        finally:
            self._budget.pause()

    async def _deltas(self) -> AsyncIterator[str]:
        url, key, model = await self._direct._target()
        body = build_body(model, self._call.messages, stream=True, params=self._call.params)
        transport = self._direct._rt.transport
        started = False
        try:
            response = await transport.open_stream(url, key, body)
        except Failure as failure:
            raise failure.to_error(self._direct.name) from None
        try:
            async for delta in read_deltas(response, key):
                if delta.usage:
                    self.usage = delta.usage
                if delta.text:
                    started = True
                    self.llm_name = self._direct.name
                    self.call_id = self.call_id or uuid.uuid4().hex
                    self._pieces.append(delta.text)
                    yield delta.text
        except Failure as failure:
            if started:
                raise StreamInterruptedError(f"{self._direct.name}: {failure}",
                                             llm_name=self._direct.name) from None
            raise failure.to_error(self._direct.name) from None
        finally:
            await response.aclose()

    async def another(self) -> LLMResult | None:
        """``None``: a direct stream has no other model to ask."""
        return None

    async def record_quality(self, score: float) -> None:
        raise ValueError(f"direct({self._direct.name!r}) streams write no journal row, so there "
                         "is nothing to rate; use the pool (broker.stream) to rate answers")

    async def aclose(self) -> None:
        self.closed = True
        if self._gen is not None:
            await self._gen.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> DirectStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
