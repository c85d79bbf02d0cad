"""The journal's row shapes: one attempt row per provider request, ratings as separate rows."""

from __future__ import annotations

# Order is the column order in every backend and in ``calls()`` results.
ATTEMPT_FIELDS = (
    "call_id", "trace_id", "llm_name", "operation", "scope", "status", "called_at",
    "latency_ms", "first_token_ms", "http_status", "error_detail", "prompt_tokens",
    "completion_tokens", "cooldown_until", "budget_ms", "prompt_text", "answer_text",
)
# ok: an answer; rate_limited: 429; unavailable: 5xx, transport, timeout with no data;
# error: auth, other 4xx, garbage/empty 200, broken stream; superseded: a race lane that lost;
# cancelled: the application closed the stream before the answer ended.
ATTEMPT_STATUSES = ("ok", "rate_limited", "unavailable", "error", "superseded", "cancelled")
RATING_FIELDS = ("rating_id", "call_id", "trace_id", "llm_name", "operation", "scope", "score",
                 "rated_at")
MAX_DETAIL = 300
