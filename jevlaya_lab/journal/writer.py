"""``JournalWriter``: journal rows written in the background, batched, never dropped silently.

Rows are queued from any thread (the event loop included) without blocking; one daemon thread
appends them in batches. When the database refuses (another process holds the SQLite write lock
for long, a PostgreSQL server is down), the rows stay in memory and the writer retries with a
growing pause (``RETRY_FIRST_S`` doubling to ``RETRY_MAX_S``); each try waits at most
``append_timeout_s`` for locks, so the thread keeps coming back to its queue. The rows held in
memory are bounded by ``max_backlog``: beyond it the oldest rows are saved to the store's spill
file (JSON lines beside the SQLite file, or under the cache folder for PostgreSQL) and written
back as soon as the database takes writes again. ``close()``
keeps trying for ``close_wait_s``, then saves what is left to the spill file and raises
:class:`~jevlaya_lab.journal.errors.JournalWriteError` naming the file and the count. The next
writer on the same journal writes ("replays") the spill file first, exactly once per saved block
even when several processes start together or a replay is interrupted.

Durability: a row is safe from a crash of this process once it is settled (committed; with
SQLite in WAL mode a committed row survives the process being killed, a power loss may take the
last commits). The thread commits as soon as rows arrive, so the rows at risk are those of the
commit in progress plus any that arrived during it; the broker keeps that window bounded
(see :mod:`jevlaya_lab.broker.runtime`: ``durable=True`` waits for every row of a call,
the default lets a call return with at most ``JOURNAL_WINDOW_ROWS`` rows unwritten).

``status()`` gives the counters (``waiting``, ``written``, ``spilled``, ``replayed``, ``lost``,
``retries``, ``last_error``, ``spill_file``) that the broker's ``snapshot().journal`` shows.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jevlaya_lab.journal.errors import JournalWriteError
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.journal")
_STOP = object()

APPEND_TIMEOUT_S = 1.0
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
MAX_BACKLOG = 20_000
CLOSE_WAIT_S = 5.0
WRITER_THREAD = "jevlaya-journal"
"""The name of every writer's thread (a finalizer that may run on it checks by this name)."""

Row = tuple[int, str, dict[str, Any]]  # (sequence number, "a" attempt / "r" rating, row)


class JournalWriter:
    """Queue rows from any thread; one daemon thread appends them (see the module docstring).

    ``flush()`` returns once every row queued before it is settled: written, saved to the spill
    file, or (while the database refuses) tried at least once; ``written`` is the sequence
    number of the last settled row.
    """

    def __init__(self, store: Store, *, batch: int = 256, max_backlog: int | None = None,
                 append_timeout_s: float | None = None, close_wait_s: float | None = None) -> None:
        self.store = store
        self._batch = batch
        self._max_backlog = MAX_BACKLOG if max_backlog is None else max_backlog
        self._append_timeout_s = APPEND_TIMEOUT_S if append_timeout_s is None else append_timeout_s
        self._close_wait_s = CLOSE_WAIT_S if close_wait_s is None else close_wait_s
        self._replay_done = threading.Event()
        self._replay_again = False  # saved rows went back to the spill file: try them later
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: deque[Row] = deque()
        self._settled = threading.Condition()
        self._closed = False
        self._queued = 0  # rows handed in so far (the last sequence number)
        self.written = 0  # sequence number of the last settled row
        self.stored = 0  # rows in the database
        self.spilled = 0  # this writer's rows now in the spill file (not written back yet)
        self._own_blocks: dict[str, int] = {}  # block id -> rows, for blocks this writer saved
        self.replayed = 0  # rows of earlier spill files written by this writer
        self.lost = 0  # rows neither written nor saved (each logged at ERROR)
        self.retries = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=WRITER_THREAD, daemon=True)
        self._thread.start()

    # producers ------------------------------------------------------------------------------
    def attempt(self, row: Mapping[str, Any]) -> int:
        """Queue an attempt row; returns its sequence number (see ``written``)."""
        return self._put("a", row)

    def rating(self, row: Mapping[str, Any]) -> int:
        return self._put("r", row)

    def _put(self, kind: str, row: Mapping[str, Any]) -> int:
        if self._closed:
            raise RuntimeError("the journal writer is closed; open a new broker to journal more")
        with self._settled:
            self._queued += 1
            seq = self._queued
        self._queue.put((seq, kind, dict(row)))
        return seq

    # state ----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Counters: rows ``waiting`` (queued or held for a retry), ``written`` to the database,
        ``failed`` (not in the database: ``spilled`` to the spill file and not written back yet,
        or ``lost``), ``replayed`` from earlier runs' spill files, write ``retries``, the
        ``last_error`` (None once writes succeed again) and the ``spill_file``."""
        spill = self.store.spill_path
        return {"waiting": self._queued - self.stored - self.spilled - self.lost,
                "written": self.stored, "failed": self.spilled + self.lost, "spilled": self.spilled,
                "lost": self.lost, "replayed": self.replayed, "retries": self.retries,
                "last_error": self.last_error, "spill_file": str(spill) if spill else None}

    def flush(self, timeout: float | None = None) -> None:
        """Wait until rows saved by earlier runs are replayed and every row queued before this
        call is settled (see the class docstring), or ``timeout`` seconds."""
        self._replay_done.wait(timeout)
        target = self._queued
        with self._settled:
            self._settled.wait_for(lambda: self.written >= target or not self._thread.is_alive(), timeout)

    @property
    def queued(self) -> int:
        """Rows handed in so far (the sequence number of the newest)."""
        return self._queued

    @property
    def unwritten(self) -> int:
        """Rows handed in and not settled yet: what a crash of this process now would lose."""
        return self._queued - self.written

    def wait_within(self, rows: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until at most ``rows`` rows are unwritten; True if so."""
        with self._settled:
            return self._settled.wait_for(
                lambda: self._queued - self.written <= rows or not self._thread.is_alive(),
                timeout)

    def close(self) -> None:
        """Write what is queued (trying for ``close_wait_s`` while the database refuses), stop
        the thread; raise ``JournalWriteError`` if rows had to be saved to the spill file."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._report_unwritten()

    # the writer thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._replay()
        finally:
            self._replay_done.set()
        pause = RETRY_FIRST_S
        stopping_at: float | None = None
        while True:
            stop = self._drain(block=not self._pending and stopping_at is None)
            if stop and stopping_at is None:
                stopping_at = time.monotonic() + self._close_wait_s
            if self._pending:
                if self._write_batch():
                    pause = RETRY_FIRST_S
                    if self._replay_again:  # the database takes writes again: saved rows too
                        self._replay()
                    continue
                if stopping_at is not None and time.monotonic() >= stopping_at:
                    self._spill(len(self._pending), "the broker closed while the journal refused writes")
                    return
                self._overflow()
                if self._pause(pause, stopping_at) and stopping_at is None:
                    stopping_at = time.monotonic() + self._close_wait_s
                pause = min(pause * 2, RETRY_MAX_S)
            elif stopping_at is not None:
                return

    def _drain(self, *, block: bool) -> bool:
        """Move queued rows to ``_pending``; True once the stop signal came."""
        stop = False
        try:
            item = self._queue.get() if block else self._queue.get_nowait()
            while True:
                if item is _STOP:
                    stop = True
                else:
                    self._pending.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return stop

    def _write_batch(self) -> bool:
        """Try to append the oldest ``batch`` rows; False (rows kept) when the database refuses."""
        chunk = [self._pending[i] for i in range(min(self._batch, len(self._pending)))]
        try:
            self.store.append([r for _, kind, r in chunk if kind == "a"],
                              [r for _, kind, r in chunk if kind == "r"], timeout_s=self._append_timeout_s,
                              retry=self.last_error is not None)
        except Exception as exc:  # noqa: BLE001 - kept and retried; a journal failure must not kill calls
            self.retries += 1
            if self.last_error is None:
                log.warning("journal %s refused %d row(s) (%s: %s); keeping them and retrying",
                            self.store.location, len(self._pending), type(exc).__name__, exc)
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._settle(self._pending[-1][0])  # flush() waiters: their rows were tried
            return False
        for _ in chunk:
            self._pending.popleft()
        self.stored += len(chunk)
        if self.last_error is not None:
            log.warning("journal %s accepts writes again", self.store.location)
        self.last_error = None
        self._settle(chunk[-1][0])
        return True

    def _settle(self, seq: int) -> None:
        with self._settled:
            self.written = max(self.written, seq)
            self._settled.notify_all()

    def _pause(self, seconds: float, stopping_at: float | None) -> bool:
        """Wait before the next try, moving rows that arrive to ``_pending`` meanwhile; True if
        the stop signal came (closing then keeps trying for ``close_wait_s``)."""
        until = time.monotonic() + seconds
        if stopping_at is not None:
            until = min(until, stopping_at)
        while (left := until - time.monotonic()) > 0:
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if item is _STOP:
                return True
            self._pending.append(item)
        return False

    def _overflow(self) -> None:
        extra = len(self._pending) - self._max_backlog
        if extra > 0:
            self._spill(extra, f"more than {self._max_backlog} rows waited for the journal")

    # the spill file -------------------------------------------------------------------------
    def _spill(self, count: int, why: str) -> None:
        """Save the oldest ``count`` pending rows as one block of the spill file."""
        rows = [self._pending.popleft() for _ in range(count)]
        if not rows:
            return
        path = self.store.spill_path
        block_id = uuid.uuid4().hex
        block = {"block": block_id, "journal": self.store.location, "why": why,
                 "error": self.last_error, "rows": [[kind, row] for _, kind, row in rows]}
        try:
            if path is None:
                raise OSError("this journal has no spill file (an in-memory database)")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, (json.dumps(block, default=str) + "\n").encode())  # one write: one whole line
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.lost += len(rows)
            for _, kind, row in rows:
                log.error("journal row lost (%s; spill file %s: %s): %s %s", why, path, exc, kind,
                          json.dumps(row, default=str))
        else:
            self.spilled += len(rows)
            self._own_blocks[block_id] = len(rows)
            self._replay_again = True  # written back once the database takes writes again
            log.warning("journal %s: %d row(s) saved to %s (%s); the next broker on this journal "
                        "writes them", self.store.location, len(rows), path, why)
        self._settle(rows[-1][0])

    def _report_unwritten(self) -> None:
        if not self.spilled and not self.lost:
            return
        path = self.store.spill_path
        saved = (f"{self.spilled} row(s) are saved in {path}; the next Broker opened on this journal "
                 "writes them first" if self.spilled else "")
        lost = (f"{self.lost} row(s) could not be saved anywhere (each is logged at ERROR)"
                if self.lost else "")
        raise JournalWriteError(
            f"journal {self.store.location}: {self.spilled + self.lost} row(s) could not be written "
            f"({self.last_error or 'no error recorded'}); " + "; ".join(p for p in (saved, lost) if p)
            + ". If another process holds the database for long, let it finish; if the file is "
            "read-only or damaged, fix it (see the error) before the next run",
            spilled=self.spilled, lost=self.lost, spill_path=str(path) if path else None)

    def _replay(self) -> None:
        """Write the blocks of earlier spill files (claimed by renaming, so one replayer each)."""
        self._replay_again = False
        path = self.store.spill_path
        if path is None:
            return
        try:
            found = [path, *path.parent.glob(path.name + ".replaying-*")] if path.parent.is_dir() else []
        except OSError:
            return
        for spill in found:
            claimed = spill.with_name(f"{path.name}.replaying-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                spill.rename(claimed)
            except OSError:
                continue  # gone, or another process claimed it first
            self._replay_file(claimed, path)

    def _replay_file(self, claimed: Path, path: Path) -> None:
        try:
            lines = [line for line in claimed.read_text("utf-8").splitlines() if line.strip()]
        except OSError as exc:
            log.error("journal spill file %s cannot be read (%s); its rows wait there", claimed, exc)
            return
        retry, damaged = [], []
        for line in lines:
            try:
                block = json.loads(line)
                rows, block_id = block["rows"], block["block"]
            except (ValueError, KeyError, TypeError):
                damaged.append(line)
                continue
            try:
                written = self.store.append_spilled(block_id, [r for k, r in rows if k == "a"],
                                                    [r for k, r in rows if k == "r"],
                                                    timeout_s=self._append_timeout_s)
                own = self._own_blocks.pop(block_id, None)
                if own is not None:  # this writer's overflow, back in the database
                    self.spilled -= own
                    self.stored += own
                elif written:
                    self.replayed += len(rows)
            except Exception as exc:  # noqa: BLE001 - the block goes back to the file for the next try
                log.warning("journal %s: could not write %d saved row(s) yet (%s); they stay in %s",
                            self.store.location, len(rows), exc, path)
                retry.append(line)
        self._replay_again = self._replay_again or bool(retry)
        try:
            for lines_out, target in ((retry, path), (damaged, path.with_name(path.name + ".damaged"))):
                if lines_out:
                    with target.open("a", encoding="utf-8") as f:
                        f.write("".join(line + "\n" for line in lines_out))
            claimed.unlink()
        except OSError as exc:
            log.error("journal spill file %s could not be rewritten (%s); it is left as %s", path, exc, claimed)
        if damaged:
            log.error("journal spill file %s had %d damaged line(s); they are kept in %s.damaged",
                      path, len(damaged), path)
        if self.replayed:
            log.warning("journal %s: wrote %d row(s) saved by an earlier run", self.store.location, self.replayed)
