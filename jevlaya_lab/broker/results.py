"""What a call returns: ``LLMResult`` (async rating) and ``SyncLLMResult`` (sync rating)."""

from __future__ import annotations

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


@dataclass(eq=False)
class SyncLLMResult(LLMResult):
    """The same answer for synchronous code: ``record_quality`` is a plain method."""

    def record_quality(self, score: float) -> None:  # type: ignore[override]
        self._rate_now(score)

    @classmethod
    def of(cls, result: LLMResult) -> SyncLLMResult:
        return cls(**{f: getattr(result, f) for f in result.__dataclass_fields__})
