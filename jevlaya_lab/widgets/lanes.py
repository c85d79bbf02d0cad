"""The lanes of a StreamView: one per attempt of the call, from the stream or the journal.

A lane read by the view counts the chunks it showed; a lane known only from the journal (a race
loser, a failover, an ``another()`` answer) gets its state, latency and tokens from its journal
row, and its tokens/s over the whole attempt.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = ["JOURNAL_STATES", "apply_journal_rows", "new_lane", "tokens_per_s"]

JOURNAL_STATES = {"ok": "retained", "superseded": "lost", "cancelled": "lost"}


def new_lane(model: str | None, state: str, *, call_id: str | None = None,
          text: str = "") -> dict[str, Any]:
    return {"model": model, "state": state, "call_id": call_id, "text": text, "tokens": 0,
            "chunks": None,
            "ttft_ms": None, "latency_ms": None, "tokens_per_s": None, "detail": None,
            "_first": None}


def tokens_per_s(tokens: int, seconds: float) -> float | None:
    return round(tokens / seconds, 1) if seconds > 0 and tokens else None


def apply_journal_rows(lanes: list[dict[str, Any]], rows: Sequence[Mapping[str, Any]],
                       fetched: Collection[str]) -> None:
    """Add or update a lane in ``lanes`` per journal row; ``fetched``: the call ids of the
    answers ``another()`` brought."""
    by_call = {lane["call_id"]: lane for lane in lanes if lane["call_id"]}
    for row in rows:
        lane = by_call.get(row["call_id"])
        if lane is None:
            lane = new_lane(row["llm_name"], JOURNAL_STATES.get(row["status"], "failed"),
                            call_id=row["call_id"])
            lane["detail"] = row["error_detail"] or row["status"]
            lanes.append(lane)
        if row["call_id"] in fetched:
            lane["state"] = "another"
        elif row["status"] == "cancelled" and lane.get("_first") is not None:
            lane["state"] = "cancelled"  # the view was closed before the answer ended
        lane["latency_ms"] = row["latency_ms"]
        lane["ttft_ms"] = row["first_token_ms"] if row["first_token_ms"] is not None \
            else lane["ttft_ms"]
        if row["completion_tokens"]:
            lane["tokens"] = int(row["completion_tokens"])
            if lane.get("_first") is None:  # not read here: rate over the attempt
                lane["tokens_per_s"] = tokens_per_s(lane["tokens"], (row["latency_ms"] or 0) / 1000.0)
