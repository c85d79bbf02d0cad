"""The SQLite backend: one file, WAL mode, busy timeout; several processes may share it."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jevlaya_lab.journal.errors import JournalSchemaError
from jevlaya_lab.journal.rows import (
    ATTEMPT_FIELDS,
    RATING_FIELDS,
    attempt_filters,
    equality_filters,
    model_from_row,
    model_values,
    utc_now,
)
from jevlaya_lab.journal.store import SCHEMA_VERSION, Store

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (
    name TEXT PRIMARY KEY, base_url TEXT NOT NULL, model TEXT NOT NULL, api_key_ref TEXT,
    parallel INTEGER NOT NULL, weight REAL NOT NULL, labels TEXT NOT NULL,
    origin TEXT NOT NULL, position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS keys (ref TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    call_id TEXT PRIMARY KEY, trace_id TEXT NOT NULL, llm_name TEXT NOT NULL, operation TEXT,
    scope TEXT, status TEXT NOT NULL, called_at TEXT NOT NULL, latency_ms REAL,
    first_token_ms REAL, http_status INTEGER, error_detail TEXT, prompt_tokens INTEGER,
    completion_tokens INTEGER, cooldown_until TEXT, budget_ms REAL, prompt_text TEXT,
    answer_text TEXT);
CREATE INDEX IF NOT EXISTS attempts_trace ON attempts(trace_id);
CREATE INDEX IF NOT EXISTS attempts_called ON attempts(called_at);
CREATE TABLE IF NOT EXISTS ratings (
    rating_id INTEGER PRIMARY KEY AUTOINCREMENT, call_id TEXT NOT NULL, trace_id TEXT,
    llm_name TEXT NOT NULL, operation TEXT, scope TEXT, score REAL NOT NULL,
    rated_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS ratings_called ON ratings(rated_at);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');
"""


class SQLiteStore(Store):
    """A :class:`Store` in one SQLite file (``":memory:"`` for a private in-memory database)."""

    def __init__(self, path: Path | str, *, busy_timeout_s: float = 30.0) -> None:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        self.location = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        if self.location != ":memory:":
            self._enable_wal(busy_timeout_s)
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._tx():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
        found = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if int(found[0]) != SCHEMA_VERSION:
            self._db.close()
            raise JournalSchemaError(
                f"{self.location}: schema_version={found[0]} but this jevlaya_lab expects "
                f"{SCHEMA_VERSION}; open it with the version that wrote it, or point the broker "
                "at a new file")

    def _enable_wal(self, timeout_s: float) -> None:
        """Switch to WAL, retrying while another process creates or converts the same file.

        Changing the journal mode needs an exclusive lock, and SQLite answers "database is
        locked" at once (without its busy handler) when processes open a new file together.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _tx(self) -> _Transaction:
        return _Transaction(self)

    # registry -------------------------------------------------------------------------------
    def registry(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM models ORDER BY origin = 'catalog', position").fetchall()
        return [model_from_row(r) for r in rows]

    def replace_catalog(self, entries: Sequence[Mapping[str, Any]]) -> None:
        with self._tx():
            self._db.execute("DELETE FROM models WHERE origin = 'catalog'")
            user = {r[0] for r in self._db.execute("SELECT name FROM models")}
            for i, e in enumerate(entries):
                if e["name"] not in user:
                    self._db.execute("INSERT INTO models VALUES (?,?,?,?,?,?,?,?,?)",
                                     (*model_values(e), "catalog", i))
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('catalog_at', ?)", (utc_now(),))

    def put_user_models(self, entries: Sequence[Mapping[str, Any]]) -> None:
        with self._tx():
            start = self._db.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM models "
                                     "WHERE origin = 'user'").fetchone()[0]
            for i, e in enumerate(entries):
                old = self._db.execute("SELECT position FROM models WHERE name = ? AND "
                                       "origin = 'user'", (e["name"],)).fetchone()
                pos = old[0] if old else start + i
                self._db.execute("INSERT OR REPLACE INTO models VALUES (?,?,?,?,?,?,?,?,?)",
                                 (*model_values(e), "user", pos))

    def catalog_filled(self) -> bool:
        with self._lock:
            return self._db.execute(
                "SELECT 1 FROM meta WHERE key = 'catalog_at'").fetchone() is not None

    # keys -----------------------------------------------------------------------------------
    def get_key(self, ref: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM keys WHERE ref = ?", (ref,)).fetchone()
        return row[0] if row else None

    def set_key(self, ref: str, value: str | None) -> None:
        with self._tx():
            if value is None:
                self._db.execute("DELETE FROM keys WHERE ref = ?", (ref,))
            else:
                self._db.execute("INSERT OR REPLACE INTO keys VALUES (?, ?)", (ref, value))

    # journal --------------------------------------------------------------------------------
    def append(self, attempts: Iterable[Mapping[str, Any]],
               ratings: Iterable[Mapping[str, Any]] = ()) -> None:
        a_rows = [tuple(r.get(f) for f in ATTEMPT_FIELDS) for r in attempts]
        r_rows = [tuple(r.get(f) for f in RATING_FIELDS[1:]) for r in ratings]
        if not a_rows and not r_rows:
            return
        with self._tx():
            self._db.executemany(
                f"INSERT INTO attempts ({','.join(ATTEMPT_FIELDS)}) VALUES "
                f"({','.join('?' * len(ATTEMPT_FIELDS))})", a_rows)
            self._db.executemany(
                f"INSERT INTO ratings ({','.join(RATING_FIELDS[1:])}) VALUES "
                f"({','.join('?' * (len(RATING_FIELDS) - 1))})", r_rows)

    def attempts(self, *, call_id: str | None = None, trace_id: str | None = None,
                 llm_name: str | None = None, operation: str | None = None,
                 scope: str | None = None, status: str | None = None,
                 since: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        where, args = attempt_filters("?", call_id=call_id, trace_id=trace_id, llm_name=llm_name,
                                      operation=operation, scope=scope, status=status, since=since)
        return self._select("attempts", where, args, "called_at, rowid", limit)

    def ratings(self, *, call_id: str | None = None, trace_id: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        where, args = equality_filters("?", call_id=call_id, trace_id=trace_id)
        return self._select("ratings", where, args, "rating_id", limit)

    def rating_totals(self) -> dict[tuple[str, str], tuple[int, float]]:
        with self._lock:
            rows = self._db.execute("SELECT llm_name, COALESCE(operation, ''), COUNT(*), "
                                    "SUM(score) FROM ratings GROUP BY 1, 2").fetchall()
        return {(r[0], r[1]): (int(r[2]), float(r[3])) for r in rows}

    def purge(self, retention_days: float, *, min_interval_s: float = 3600.0) -> int:
        with self._tx():
            last = self._db.execute("SELECT value FROM meta WHERE key = 'purged_at'").fetchone()
            now = time.time()
            if last is not None and now - float(last[0]) < min_interval_s:
                return 0
            cutoff = (datetime.now(UTC) - timedelta(days=retention_days)).isoformat()
            n = self._db.execute("DELETE FROM attempts WHERE called_at < ?", (cutoff,)).rowcount
            n += self._db.execute("DELETE FROM ratings WHERE rated_at < ?", (cutoff,)).rowcount
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('purged_at', ?)", (str(now),))
        return n

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:  # pragma: no cover - closing twice is harmless
                pass

    def _select(self, table: str, where: list[str], args: list[Any], order: str,
                limit: int | None) -> list[dict[str, Any]]:
        sql = f"SELECT * FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order}"
        if limit is not None:
            sql += " LIMIT ?"
            args = [*args, int(limit)]
        with self._lock:
            return [dict(r) for r in self._db.execute(sql, args).fetchall()]

    def __repr__(self) -> str:
        return f"SQLiteStore({self.location!r})"


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the connection lock (rollback on error)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store._lock.acquire()
        try:
            self.store._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.store._lock.release()
            raise

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            self.store._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.store._lock.release()

