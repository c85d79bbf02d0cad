"""A background writer that keeps journal inserts off the event loop and batches them."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from typing import Any

from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.journal")
_STOP = object()


class JournalWriter:
    """Queue rows from any thread; one daemon thread appends them in batches.

    ``flush()`` returns once every row queued before it is in the database; ``close()`` flushes
    and stops the thread. A failed insert is logged and retried once, never silently lost.
    """

    def __init__(self, store: Store, *, batch: int = 256) -> None:
        self.store = store
        self._batch = batch
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._queued = 0  # rows handed in so far
        self.written = 0  # rows in the database (or logged as failed) so far
        self._thread = threading.Thread(target=self._run, name="jevlaya-journal", daemon=True)
        self._thread.start()

    def attempt(self, row: Mapping[str, Any]) -> int:
        """Queue an attempt row; returns its sequence number (see ``written``)."""
        return self._put(("a", dict(row)))

    def rating(self, row: Mapping[str, Any]) -> int:
        return self._put(("r", dict(row)))

    def _put(self, item: tuple[str, dict[str, Any]]) -> int:
        if self._closed:
            raise RuntimeError("the journal writer is closed; open a new broker to journal more")
        self._queued += 1
        self._queue.put(item)
        return self._queued

    def flush(self) -> None:
        if self._thread.is_alive():
            self._queue.join()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while len(items) < self._batch:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(i is _STOP for i in items)
            rows = [i for i in items if i is not _STOP]
            if rows:
                self._write(rows)
                self.written += len(rows)
            for _ in items:
                self._queue.task_done()
            if stop:
                return

    def _write(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        attempts = [r for kind, r in rows if kind == "a"]
        ratings = [r for kind, r in rows if kind == "r"]
        for tries in (1, 2):
            try:
                self.store.append(attempts, ratings)
                return
            except Exception:  # noqa: BLE001 - logged; a journal failure must not kill calls
                log.exception("journal write of %d rows failed (try %d of 2)", len(rows), tries)
