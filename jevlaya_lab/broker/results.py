"""What a call returns: ``LLMResult`` (async rating) and ``SyncLLMResult`` (sync rating)."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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
        """Notebook display: the answer as escaped text (never markup) plus a JSON mimetype."""
        usage = ", ".join(f"{k}={v}" for k, v in self.usage.items())
        body = html.escape(self.text) or "<i>(tool calls only)</i>"
        page = (f'<div class="jevlaya-llm-result"><div style="white-space:pre-wrap">{body}</div>'
                f'<small>{html.escape(self.llm_name)} &middot; call {self.call_id[:8]}'
                f'{" &middot; " + html.escape(usage) if usage else ""}</small></div>')
        return {"text/plain": repr(self), "text/html": page,
                "application/vnd.jevlaya+json": self.to_dict()}


@dataclass(eq=False)
class SyncLLMResult(LLMResult):
    """The same answer for synchronous code: ``record_quality`` is a plain method."""

    def record_quality(self, score: float) -> None:  # type: ignore[override]
        self._rate_now(score)

    @classmethod
    def of(cls, result: LLMResult) -> SyncLLMResult:
        return cls(**{f: getattr(result, f) for f in result.__dataclass_fields__})
