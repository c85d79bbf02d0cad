"""``CallJournal``: the broker's side of the journal (attempt rows, ratings).

Rows go to a :class:`~jevlaya_lab.journal.JournalWriter`, so the call path does no disk IO.
The identities of the last 100,000 attempts (trace, model, operation, scope, status) are kept
in memory, so rating a recent answer needs no database read; an older one is looked up.
A rating also feeds the pool's learned quality (``quality``, set once the pool is built).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from jevlaya_lab.broker.errors import UnknownCallError
from jevlaya_lab.broker.quality import Quality
from jevlaya_lab.broker.validation import check_score
from jevlaya_lab.journal import JournalWriter
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.broker")
RECENT_CALLS = 100_000
_IDENTITY = ("trace_id", "llm_name", "operation", "scope", "status")


class CallJournal:
    """Attempt rows and ratings of one broker (see the module docstring)."""

    def __init__(self, writer: JournalWriter, store: Store) -> None:
        self.writer = writer
        self.store = store
        self.quality: Quality | None = None  # the pool's, once built: ratings feed it
        self._recent: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def attempt(self, row: Mapping[str, Any]) -> int:
        """Queue one attempt row; its writer sequence number (0 when the writer is closed)."""
        self._recent[row["call_id"]] = {k: row[k] for k in _IDENTITY}
        if len(self._recent) > RECENT_CALLS:
            self._recent.popitem(last=False)
        try:
            return self.writer.attempt(row)
        except RuntimeError:  # close() settles every call first; if one still outlived it, say so
            log.error("attempt %s (%s, %s) ended after the broker closed; not journaled",
                      row["call_id"], row["llm_name"], row["status"])
            return 0

    @property
    def written(self) -> int:
        """The sequence number of the last row the writer has settled."""
        return self.writer.written

    async def flush(self) -> None:
        """Return once every row queued so far is written."""
        await asyncio.to_thread(self.writer.flush)

    def rate(self, call_id: str, score: float) -> None:
        """Journal a rating of ``call_id`` and feed it to quality learning (any thread)."""
        score = check_score(score)
        info = self._recent.get(call_id)
        if info is None:
            self.writer.flush()
            rows = self.store.attempts(call_id=call_id)
            info = rows[0] if rows else None
        if info is None:
            raise UnknownCallError(f"call_id={call_id!r}: no journaled answer with this id (yet); rate "
                                   "an answer after it has ended, using the id of this broker's "
                                   "result or stream")
        if self.quality is not None:
            self.quality.add(info["llm_name"], info["operation"], score, call_id)
        self.writer.rating({"call_id": call_id, "trace_id": info["trace_id"],
                            "llm_name": info["llm_name"], "operation": info["operation"],
                            "scope": info["scope"], "score": score,
                            "rated_at": datetime.now(UTC).isoformat()})

    async def call_of_trace(self, trace_id: str) -> str:
        """The one successful attempt of ``trace_id`` (a ``ValueError`` when not exactly one)."""
        await self.flush()
        rows = [r for r in await asyncio.to_thread(self.store.attempts, trace_id=trace_id)
                if r["status"] == "ok"]
        if len(rows) != 1:
            ids = [r["call_id"] for r in rows]
            raise ValueError(f"trace_id={trace_id!r}: {len(rows)} successful answers "
                             f"{ids if ids else ''}; rate by call_id (the result's or stream's "
                             "record_quality) so the rating names the answer that was shown")
        return str(rows[0]["call_id"])
