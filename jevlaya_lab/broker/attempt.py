"""``Attempt``: one request to one model (a *lane*), journaled exactly once.

Creating an attempt takes a slot of its model; ``finish`` releases the slot, applies nothing to
the pool (the engine does that) and hands one row to the journal writer.

``observers`` (the runtime's list, see :meth:`AsyncBroker.observe`) are told when an attempt
starts and when it has its row, so a tracer can draw one span per attempt and race lane. An
observer that raises is logged and never changes the call.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jevlaya_lab.broker.http import Failure, Reply, merge_tool_calls
from jevlaya_lab.broker.pool import ModelState, Pool, utc
from jevlaya_lab.journal.rows import MAX_DETAIL

log = logging.getLogger(__name__)


def notify(observers: list[Any], event: str, *args: Any) -> None:
    """Call ``observer.<event>(*args)`` on every observer that has it; errors are logged."""
    for observer in observers:
        method = getattr(observer, event, None)
        if method is None:
            continue
        try:
            method(*args)
        except Exception:  # noqa: BLE001 - an observer never breaks a call
            log.exception("broker observer %r failed in %s", observer, event)


class Attempt:
    def __init__(self, state: ModelState, pool: Pool, journal: Callable[[dict[str, Any]], int], *,
                 trace_id: str, operation: str | None, scope: str | None,
                 budget_ms: float | None, prompt_text: str | None = None,
                 observers: list[Any] | None = None) -> None:
        self.state = state
        self.llm_name = state.entry.name
        self.call_id = uuid.uuid4().hex
        self.trace_id = trace_id
        self.operation = operation
        self.scope = scope
        self.budget_ms = budget_ms
        self.prompt_text = prompt_text
        self.called_at = datetime.now(UTC).isoformat()
        self.started = time.perf_counter()
        self.first_token_ms: float | None = None
        self.pieces: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.usage: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.status: str | None = None  # set once, by finish()
        self.journal_seq = 0  # the writer's sequence number of this attempt's row
        self.cancel_status = "superseded"  # what a cancellation journals as
        self._pool = pool
        self._journal = journal
        self._observers = observers if observers is not None else []
        pool.acquire(self.llm_name)
        notify(self._observers, "attempt_started", self)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def started_answer(self) -> bool:
        return self.first_token_ms is not None

    def add(self, text: str, tool_calls: list[dict[str, Any]] | None = None) -> None:
        if (text or tool_calls) and self.first_token_ms is None:
            self.first_token_ms = (time.perf_counter() - self.started) * 1000.0
        if text:
            self.pieces.append(text)
        if tool_calls:
            merge_tool_calls(self.tool_calls, tool_calls)

    def succeed(self, reply: Reply | None = None) -> None:
        if reply is not None:
            self.add(reply.text, None)
            self.tool_calls = reply.tool_calls
            self.usage = reply.usage
            self.finish_reason = reply.finish_reason
        self.finish("ok")

    def fail(self, failure: Failure, cooldown_until: float | None = None) -> None:
        self.finish(failure.journal_status, http_status=failure.status, detail=str(failure),
                    cooldown_until=cooldown_until)

    def finish(self, status: str, *, http_status: int | None = None, detail: str | None = None,
               cooldown_until: float | None = None) -> None:
        if self.status is not None:
            return
        self.status = status
        self._pool.release(self.llm_name)
        row = {
            "call_id": self.call_id, "trace_id": self.trace_id, "llm_name": self.llm_name,
            "operation": self.operation, "scope": self.scope, "status": status,
            "called_at": self.called_at,
            "latency_ms": (time.perf_counter() - self.started) * 1000.0,
            "first_token_ms": self.first_token_ms,
            "http_status": http_status if http_status is not None else (
                200 if status == "ok" else None),
            "error_detail": detail[:MAX_DETAIL] if detail else None,
            "prompt_tokens": self.usage.get("prompt_tokens"),
            "completion_tokens": self.usage.get("completion_tokens"),
            "cooldown_until": (utc(cooldown_until).isoformat()  # type: ignore[union-attr]
                               if cooldown_until else None),
            "budget_ms": self.budget_ms, "prompt_text": self.prompt_text,
            "answer_text": self.text if self.prompt_text is not None else None,
        }
        self.journal_seq = self._journal(row)
        if self._observers:
            notify(self._observers, "attempt_finished", self, dict(row))

    def __repr__(self) -> str:
        return f"<Attempt {self.llm_name} {self.call_id[:8]} {self.status or 'open'}>"
