"""``direct(name)``: one model, no pool, no failover, no journal row.

Errors surface as they happen (``ProviderError`` and subclasses); results cannot be rated
because nothing was journaled. Useful to compare one model with the pool, or to debug it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from jevlaya_lab.broker.budget import ATTEMPT_TIMEOUT_S, check_wait
from jevlaya_lab.broker.errors import LLMTimeoutError, StreamInterruptedError
from jevlaya_lab.broker.http import Failure, build_body, open_stream, post_chat, read_deltas
from jevlaya_lab.broker.results import LLMResult


class AsyncDirect:
    def __init__(self, broker: Any, name: str) -> None:
        self.broker = broker
        self.name = name

    async def _target(self) -> tuple[str, str | None, str]:
        pool = await self.broker._ready()
        state = self.broker._state(pool, self.name)
        try:
            url, key = await self.broker._endpoint(state, self.broker._callers[None])
        except Failure as failure:  # an embedded model that cannot start
            raise failure.to_error(self.name) from None
        return url, key, state.entry.model

    async def ask(self, prompt: str, *, wait: float | None = None, **params: Any) -> LLMResult:
        from jevlaya_lab.broker.engine import check_prompt

        return await self.chat(check_prompt(prompt), wait=wait, **params)

    async def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None
                   = None, wait: float | None = None, **params: Any) -> LLMResult:
        from jevlaya_lab.broker.engine import check_messages

        messages = check_messages(messages)
        url, key, model = await self._target()
        body = build_body(model, messages, stream=False, tools=tools, params=params)
        try:
            async with asyncio.timeout(check_wait(wait) or ATTEMPT_TIMEOUT_S):
                reply = await post_chat(self.broker._client, url, key, body)
        except Failure as failure:
            raise failure.to_error(self.name) from None
        except TimeoutError:
            raise LLMTimeoutError(f"{self.name}: no answer within the time allowed") from None
        return LLMResult(reply.text, self.name, uuid.uuid4().hex, uuid.uuid4().hex,
                         reply.usage, reply.tool_calls, reply.finish_reason)

    def stream(self, prompt: str, **params: Any) -> DirectStream:
        return DirectStream(self, prompt, params)


class DirectStream:
    """Text deltas from one model; a failure at any point raises (no failover)."""

    def __init__(self, direct: AsyncDirect, prompt: str, params: dict[str, Any]) -> None:
        from jevlaya_lab.broker.engine import check_stream_input

        self._direct = direct
        self._messages = check_stream_input(prompt)
        self._params = params
        self._gen: AsyncIterator[str] | None = None
        self.llm_name: str | None = None
        self.usage: dict[str, int] | None = None

    def __aiter__(self) -> DirectStream:
        return self

    async def __anext__(self) -> str:
        if self._gen is None:
            self._gen = self._deltas()
        return await self._gen.__anext__()

    async def _deltas(self) -> AsyncIterator[str]:
        url, key, model = await self._direct._target()
        body = build_body(model, self._messages, stream=True, params=self._params)
        client = self._direct.broker._client
        started = False
        try:
            response = await open_stream(client, url, key, body)
        except Failure as failure:
            raise failure.to_error(self._direct.name) from None
        try:
            async for delta in read_deltas(response, key):
                if delta.usage:
                    self.usage = delta.usage
                if delta.text:
                    started = True
                    self.llm_name = self._direct.name
                    yield delta.text
        except Failure as failure:
            if started:
                raise StreamInterruptedError(f"{self._direct.name}: {failure}") from None
            raise failure.to_error(self._direct.name) from None
        finally:
            await response.aclose()

    async def record_quality(self, score: float) -> None:
        raise ValueError(f"direct({self._direct.name!r}) streams write no journal row, so there "
                         "is nothing to rate; use the pool (broker.stream) to rate answers")

    async def aclose(self) -> None:
        if self._gen is not None:
            await self._gen.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> DirectStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
