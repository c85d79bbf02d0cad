"""``CallJournal``: the broker's side of the journal (attempt rows, ratings).

Rows go to a :class:`~jevlaya_lab.journal.JournalWriter`, so the call path does no disk IO.
Attempt rows made on the event loop are handed to the writer in batches, at most
``HANDOFF_S`` after the first of a batch (and at once by :meth:`CallJournal.flush`, a rating
or closing): waking the writer's thread for every row would make it take the interpreter
from the event loop once per call, which is most of what a call costs beyond its HTTP round
trip.

What a crash may lose is bounded (:meth:`CallJournal.settled`, run as every call returns,
answer or error): with ``durable=True`` a call returns only once every row taken before it
ended is committed; by default it returns at once unless more than ``JOURNAL_WINDOW_ROWS``
rows are unwritten, in which case it waits (at most ``JOURNAL_WINDOW_WAIT_S``) until the writer
is back within that window, so while the database takes writes a SIGKILL loses at most that
many answered rows. While the database refuses writes nobody waits: rows wait in memory and go
to the spill file (:mod:`jevlaya_lab.journal.writer`).

The identities of the last 100,000 attempts (trace, model, operation, scope, status) are kept
in memory, so rating a recent answer needs no database read; an older one is looked up.
A rating also feeds the pool's learned quality (``quality``, set once the pool is built).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from jevlaya_lab.broker.errors import UnknownCallError
from jevlaya_lab.broker.quality import Quality
from jevlaya_lab.broker.validation import check_score
from jevlaya_lab.journal import JournalWriter
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.broker")
RECENT_CALLS = 100_000
HANDOFF_S = 0.02  # the longest an attempt row waits before it goes to the writer
JOURNAL_WINDOW_ROWS = 256  # default: most rows a call may return with still unwritten
JOURNAL_WINDOW_WAIT_S = 5.0  # ...waiting at most this long for the writer to catch up
_IDENTITY = ("trace_id", "llm_name", "operation", "scope", "status")


class CallJournal:
    """Attempt rows and ratings of one broker (see the module docstring)."""

    def __init__(self, writer: JournalWriter, store: Store, *, durable: bool = False) -> None:
        self.writer = writer
        self.durable = durable
        self.store = store
        self.quality: Quality | None = None  # the pool's, once built: ratings feed it
        self._recent: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()  # ratings and flushes come from other threads
        self._batch: list[dict[str, Any]] = []  # rows not handed to the writer yet
        self._made = 0  # attempt rows made so far (the number attempt() returns)
        self._handed = 0  # of those, handed to the writer
        self._writer_seq: OrderedDict[int, int] = OrderedDict()  # handed, maybe unwritten

    def attempt(self, row: dict[str, Any]) -> int:
        """Take one attempt row (handed to the writer within ``HANDOFF_S``); its number, for
        :meth:`is_written`. The row is kept as given (the writer copies it when it takes it),
        so the caller must not change it afterwards."""
        self._recent[row["call_id"]] = {  # the keys of _IDENTITY, spelled out: made per call
            "trace_id": row["trace_id"], "llm_name": row["llm_name"], "operation": row["operation"],
            "scope": row["scope"], "status": row["status"]}
        if len(self._recent) > RECENT_CALLS:
            self._recent.popitem(last=False)
        with self._lock:
            self._batch.append(row)
            self._made += 1
            number, first = self._made, len(self._batch) == 1
        if first:
            try:
                asyncio.get_running_loop().call_later(HANDOFF_S, self.hand_over)
            except RuntimeError:  # no event loop here: hand it over at once
                self.hand_over()
        return number

    def hand_over(self) -> None:
        """Give the rows taken so far to the writer (any thread)."""
        with self._lock:
            rows, self._batch = self._batch, []
            for row in rows:
                self._handed += 1
                try:
                    self._writer_seq[self._handed] = self.writer.attempt(row)
                except RuntimeError:  # close() settles every call first; if one outlived it, say so
                    log.error("attempt %s (%s, %s) ended after the broker closed; not journaled",
                              row["call_id"], row["llm_name"], row["status"])
            written = self.writer.written
            while self._writer_seq and next(iter(self._writer_seq.values())) <= written:
                self._writer_seq.popitem(last=False)

    def is_written(self, number: int) -> bool:
        """Has the writer settled attempt row ``number`` (see :meth:`attempt`)?"""
        if number > self._handed:
            return False
        seq = self._writer_seq.get(number)
        return seq is None or seq <= self.writer.written

    def status(self) -> dict[str, Any]:
        """The writer's counters, rows not handed to it yet counted as ``waiting``."""
        status = self.writer.status()
        status["waiting"] += len(self._batch)
        return status

    def must_settle(self) -> bool:
        """Would :meth:`settled` wait (``durable``, or too many rows unwritten)? The call
        path asks first, so a call that need not wait makes no coroutine for it."""
        writer = self.writer
        return self.durable or (writer.unwritten + len(self._batch) > JOURNAL_WINDOW_ROWS
                                and writer.last_error is None)

    async def settled(self) -> None:
        """Bound what a crash could lose of the rows of a call that is returning (see the
        module docstring): all of them committed with ``durable``, else at most
        ``JOURNAL_WINDOW_ROWS`` unwritten while the database takes writes."""
        writer = self.writer
        if self.durable:
            self.hand_over()
            if writer.unwritten:
                await asyncio.to_thread(writer.flush)
        elif writer.unwritten + len(self._batch) > JOURNAL_WINDOW_ROWS \
                and writer.last_error is None:
            self.hand_over()
            await asyncio.to_thread(writer.wait_within, JOURNAL_WINDOW_ROWS,
                                    JOURNAL_WINDOW_WAIT_S)

    async def flush(self) -> None:
        """Return once every row taken so far is written."""
        self.hand_over()
        await asyncio.to_thread(self.writer.flush)

    def rate(self, call_id: str, score: float) -> None:
        """Journal a rating of ``call_id`` and feed it to quality learning (any thread)."""
        score = check_score(score)
        self.hand_over()  # the rating's row follows its attempt's
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
