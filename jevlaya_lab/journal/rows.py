"""The journal's row shapes and the helpers both backends use to write and read them.

One attempt row per provider request, ratings as separate rows, one models row per registry
entry. The SQLite and PostgreSQL backends share these helpers so that the same entry goes in
and comes out the same way whichever database holds it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

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
# A registry entry's columns, in table order; the table adds ``origin`` and ``position``.
MODEL_FIELDS = ("name", "base_url", "model", "api_key_ref", "parallel", "weight", "labels")
MAX_DETAIL = 300


def model_values(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """A registry entry as the values of :data:`MODEL_FIELDS`, defaults filled in.

    ``parallel`` defaults to 4 and ``weight`` to 0.5; ``labels`` is stored as a JSON list.
    """
    return (entry["name"], entry["base_url"], entry["model"], entry.get("api_key_ref"),
            int(entry.get("parallel", 4)), float(entry.get("weight", 0.5)),
            json.dumps(list(entry.get("labels", ()))))


def model_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A registry entry back from a models row (any row indexable by column name).

    The inverse of :func:`model_values`, plus the row's ``origin`` (``"user"``/``"catalog"``);
    ``labels`` comes back as a tuple.
    """
    entry = {f: row[f] for f in MODEL_FIELDS}
    entry["labels"] = tuple(json.loads(entry["labels"]))
    entry["origin"] = row["origin"]
    return entry


def utc_now() -> str:
    """The current time as the ISO-8601 UTC text every journal timestamp uses."""
    return datetime.now(UTC).isoformat()


def equality_filters(placeholder: str, **given: Any) -> tuple[list[str], list[Any]]:
    """``(["col = ?", ...], [value, ...])`` for each ``col=value`` given that is not None.

    ``placeholder`` is the driver's parameter mark (``"?"`` for sqlite3, ``"%s"`` for psycopg);
    the column names come from our own code, never from the caller's data.
    """
    pairs = [(column, value) for column, value in given.items() if value is not None]
    return [f"{column} = {placeholder}" for column, _ in pairs], [value for _, value in pairs]


def attempt_filters(placeholder: str, *, since: str | None = None,
                    **given: Any) -> tuple[list[str], list[Any]]:
    """:func:`equality_filters` for attempt rows, plus ``called_at >= since`` when ``since`` is given."""
    where, args = equality_filters(placeholder, **given)
    if since is not None:
        where.append(f"called_at >= {placeholder}")
        args.append(since)
    return where, args


SCORE_CHUNK = 500  # call ids per query when looking up their latest ratings


def scores_query(placeholder: str, count: int) -> str:
    """Ratings of ``count`` call ids, oldest first (so the last one per id is its latest)."""
    return (f"SELECT call_id, score FROM ratings WHERE call_id IN "
            f"({', '.join([placeholder] * count)}) ORDER BY rating_id")
