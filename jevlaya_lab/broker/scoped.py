"""``for_scope(scope)``: a caller whose keys resolve ``<scope>/<REF>`` first and whose journal
rows and ratings carry the scope. It holds its broker (and shares its pool and journal)."""

from __future__ import annotations

from typing import Any

from jevlaya_lab.broker.limits import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS_PER_MODEL
from jevlaya_lab.broker.pool import Caller


class AsyncScopedBroker:
    def __init__(self, broker: Any, caller: Caller) -> None:
        self.broker = broker
        self.caller = caller

    @property
    def scope(self) -> str | None:
        return self.caller.scope

    async def ask(self, prompt: str, **kwargs: Any) -> Any:
        from jevlaya_lab.broker.engine import check_prompt

        return await self._call(check_prompt(prompt), None, **kwargs)

    async def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None
                   = None, **kwargs: Any) -> Any:
        from jevlaya_lab.broker.engine import check_messages

        return await self._call(check_messages(messages), tools, **kwargs)

    async def _call(self, messages: list[dict[str, Any]], tools: Any, *,
                    operation: str | None = None, trace_id: str | None = None,
                    wait: float | None = None, fastest_of: int | None = None,
                    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                    max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
                    **params: Any) -> Any:
        return await self.broker._complete(self.caller, messages, tools, operation, trace_id,
                                           wait, fastest_of, params, max_attempts,
                                           max_attempts_per_model)

    def stream(self, prompt: str | list[dict[str, Any]], *, operation: str | None = None, trace_id: str | None = None,
               wait: float | None = None, fastest_of: int | None = None,
               stream_selection_window: float = 1.0, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
               max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
               **params: Any) -> Any:
        from jevlaya_lab.broker.engine import check_stream_input
        from jevlaya_lab.broker.streaming import AsyncStream

        return AsyncStream(self.broker, self.caller, check_stream_input(prompt),
                           operation=operation, trace_id=trace_id, wait=wait,
                           fastest_of=fastest_of, window=stream_selection_window, params=params,
                           max_attempts=max_attempts,
                           max_attempts_per_model=max_attempts_per_model)

    async def record_quality(self, score: float, *, call_id: str | None = None,
                             trace_id: str | None = None) -> None:
        await self.broker.record_quality(score, call_id=call_id, trace_id=trace_id)

    def __repr__(self) -> str:
        return f"<AsyncScopedBroker scope={self.scope!r}>"
