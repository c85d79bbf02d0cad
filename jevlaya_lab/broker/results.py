"""What a call returns: ``LLMResult`` (async rating), ``SyncLLMResult`` (sync rating), and the
``StreamProtocol`` every stream kind implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jevlaya_lab._rendering import MIME, render


@dataclass(eq=False)
class LLMResult:
    """A complete answer from one attempt.

    ``record_quality(score)`` (a coroutine here) rates exactly this attempt (``call_id``).
    """

    text: str
    llm_name: str
    call_id: str
    trace_id: str
    usage: dict[str, int] = field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    operation: str | None = None
    messages: list[dict[str, Any]] | None = field(default=None, repr=False)  # tool loops
    _rate: Callable[[str, float], None] | None = field(default=None, repr=False)

    async def record_quality(self, score: float) -> None:
        self._rate_now(score)

    def _rate_now(self, score: float) -> None:
        if self._rate is None:
            raise ValueError(f"call_id={self.call_id!r}: this answer came from direct() and has "
                             "no journal row to rate")
        self._rate(self.call_id, score)

    def message(self) -> dict[str, Any]:
        """The assistant message to append to a conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "llm_name": self.llm_name, "call_id": self.call_id,
                "trace_id": self.trace_id, "operation": self.operation, "usage": self.usage,
                "tool_calls": self.tool_calls, "finish_reason": self.finish_reason}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: the answer as escaped text (never markup) in the package's card,
        plus the JSON payload."""
        return {"text/plain": repr(self), "text/html": render("llm", self), MIME: self.to_dict()}


@dataclass(eq=False)
class SyncLLMResult(LLMResult):
    """The same answer for synchronous code: ``record_quality`` is a plain method."""

    def record_quality(self, score: float) -> None:  # type: ignore[override]
        self._rate_now(score)

    @classmethod
    def of(cls, result: LLMResult) -> SyncLLMResult:
        """The same fields as ``result`` (shared, not copied), as the sync class: its instance
        dict is taken over directly, cheaper than the dataclass ``__init__`` with every field
        by keyword (the sync ``Broker`` makes one per call)."""
        synced = cls.__new__(cls)
        synced.__dict__.update(result.__dict__)
        return synced


@runtime_checkable
class StreamProtocol(Protocol):
    """What every async stream of the broker offers (``AsyncStream`` from the pool,
    ``DirectStream`` from ``direct()``); the sync ``Stream`` wraps any of them.

    ``llm_name``/``call_id`` are ``None`` until the first delta, ``usage`` until the end;
    ``text`` is the answer so far; ``another()`` gives the next complete answer or ``None``.
    """

    @property
    def llm_name(self) -> str | None: ...
    @property
    def call_id(self) -> str | None: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def usage(self) -> dict[str, int] | None: ...
    @property
    def text(self) -> str: ...
    @property
    def tool_calls(self) -> list[dict[str, Any]]: ...
    @property
    def closed(self) -> bool: ...

    def __aiter__(self) -> AsyncIterator[str]: ...
    async def __anext__(self) -> str: ...
    async def another(self) -> LLMResult | None: ...
    async def record_quality(self, score: float) -> None: ...
    async def aclose(self) -> None: ...
