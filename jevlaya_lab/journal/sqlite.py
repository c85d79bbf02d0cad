"""The SQLite backend: one file, WAL mode, busy timeout; several processes may share it."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jevlaya_lab.journal.errors import JournalFileError, JournalSchemaError
from jevlaya_lab.journal.rows import (
    ATTEMPT_FIELDS,
    RATING_FIELDS,
    SCORE_CHUNK,
    attempt_filters,
    equality_filters,
    model_from_row,
    model_values,
    scores_query,
    utc_now,
)
from jevlaya_lab.journal.store import DISABLED_PREFIX, SCHEMA_VERSION, Store

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
    """A :class:`Store` in one SQLite file (``":memory:"`` for a private in-memory database).

    Opening checks the file before trusting it: that it is a SQLite database, that this user
    may write it and its folder (WAL keeps ``-wal`` and ``-shm`` files beside it), and, with
    ``check_integrity`` (the default), SQLite's ``quick_check`` over every page, so a damaged
    file fails here, naming the file and the way out, rather than on some later call. The check
    reads the whole file once (about a second per few hundred MB). Tables are created only when
    missing, so opening an existing journal never waits for another process's write lock.
    """

    def __init__(self, path: Path | str, *, busy_timeout_s: float = 30.0,
                 check_integrity: bool = True) -> None:
        self.location = str(path)
        self._lock = threading.Lock()
        if isinstance(path, Path):
            _check_file(path)
        try:
            self._db = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as exc:
            raise file_error(self.location, exc) from None
        self._busy_ms = int(busy_timeout_s * 1000)
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            if self.location != ":memory:":
                self._enable_wal(busy_timeout_s)
                if check_integrity:
                    self._check_integrity()
            self._db.execute("PRAGMA synchronous = NORMAL")
            found = self._schema_version()
            if found is None:
                with self._tx():
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        self._db.execute(statement)
                found = self._schema_version()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise file_error(self.location, exc) from None
        if int(found) != SCHEMA_VERSION:  # type: ignore[arg-type]
            self._db.close()
            raise JournalSchemaError(
                f"{self.location}: schema_version={found} but this jevlaya_lab expects "
                f"{SCHEMA_VERSION}; open it with the version that wrote it, or point the broker "
                "at a new file")

    def _schema_version(self) -> str | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return None
        return None if row is None else row[0]

    def _check_integrity(self) -> None:
        problems = [r[0] for r in self._db.execute("PRAGMA quick_check(5)").fetchall()]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError("database disk image is malformed: " + "; ".join(problems))

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

    def _tx(self, timeout_s: float | None = None) -> _Transaction:
        return _Transaction(self, None if timeout_s is None else int(timeout_s * 1000))

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

    def disabled_models(self) -> set[str]:
        with self._lock:
            rows = self._db.execute("SELECT key FROM meta WHERE key LIKE ?",
                                    (DISABLED_PREFIX + "%",)).fetchall()
        return {r[0][len(DISABLED_PREFIX):] for r in rows}

    def set_disabled(self, name: str, disabled: bool) -> None:
        with self._tx():
            if disabled:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 (DISABLED_PREFIX + name, utc_now()))
            else:
                self._db.execute("DELETE FROM meta WHERE key = ?", (DISABLED_PREFIX + name,))

    # keys -----------------------------------------------------------------------------------
    def get_key(self, ref: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM keys WHERE ref = ?", (ref,)).fetchone()
        return row[0] if row else None

    def stored_keys(self) -> dict[str, str]:
        with self._lock:
            return {r[0]: r[1] for r in self._db.execute("SELECT ref, value FROM keys")}

    def set_key(self, ref: str, value: str | None) -> None:
        with self._tx():
            if value is None:
                self._db.execute("DELETE FROM keys WHERE ref = ?", (ref,))
            else:
                self._db.execute("INSERT OR REPLACE INTO keys VALUES (?, ?)", (ref, value))

    # journal --------------------------------------------------------------------------------
    def _insert(self, attempts: Iterable[Mapping[str, Any]], ratings: Iterable[Mapping[str, Any]], *,
                timeout_s: float | None = None, block_id: str | None = None, retry: bool = False) -> bool:
        a_rows = [tuple(r.get(f) for f in ATTEMPT_FIELDS) for r in attempts]
        r_rows = [tuple(r.get(f) for f in RATING_FIELDS[1:]) for r in ratings]
        if not a_rows and not r_rows and block_id is None:
            return True
        verb = "INSERT" if block_id is None and not retry else "INSERT OR IGNORE"
        with self._tx(timeout_s):
            if block_id is not None:
                marker = f"spill:{block_id}"
                if self._db.execute("SELECT 1 FROM meta WHERE key = ?", (marker,)).fetchone():
                    return False
                self._db.execute("INSERT INTO meta VALUES (?, ?)", (marker, utc_now()))
            self._db.executemany(
                f"{verb} INTO attempts ({','.join(ATTEMPT_FIELDS)}) VALUES "
                f"({','.join('?' * len(ATTEMPT_FIELDS))})", a_rows)
            self._db.executemany(
                f"INSERT INTO ratings ({','.join(RATING_FIELDS[1:])}) VALUES "
                f"({','.join('?' * (len(RATING_FIELDS) - 1))})", r_rows)
        return True

    @property
    def spill_path(self) -> Path | None:
        return None if self.location == ":memory:" else Path(self.location + SPILL_SUFFIX)

    def attempts(self, *, call_id: str | None = None, trace_id: str | None = None,
                 llm_name: str | None = None, operation: str | None = None,
                 scope: str | None = None, status: str | None = None,
                 since: str | None = None, limit: int | None = None,
                 newest_first: bool = False) -> list[dict[str, Any]]:
        where, args = attempt_filters("?", call_id=call_id, trace_id=trace_id, llm_name=llm_name,
                                      operation=operation, scope=scope, status=status, since=since)
        order = "called_at DESC, rowid DESC" if newest_first else "called_at, rowid"
        return self._select("attempts", where, args, order, limit)

    def ratings(self, *, call_id: str | None = None, trace_id: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        where, args = equality_filters("?", call_id=call_id, trace_id=trace_id)
        return self._select("ratings", where, args, "rating_id", limit)

    def latest_scores(self, call_ids: Sequence[str]) -> dict[str, float]:
        ids = list(dict.fromkeys(call_ids))
        scores: dict[str, float] = {}
        for start in range(0, len(ids), SCORE_CHUNK):
            chunk = ids[start:start + SCORE_CHUNK]
            with self._lock:
                rows = self._db.execute(scores_query("?", len(chunk)), chunk).fetchall()
            scores.update((r[0], float(r[1])) for r in rows)
        return scores

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
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the connection lock (rollback on error), waiting
    at most ``busy_ms`` for other writers when given (the store's busy timeout otherwise)."""

    def __init__(self, store: SQLiteStore, busy_ms: int | None = None) -> None:
        self.store = store
        self.busy_ms = busy_ms

    def __enter__(self) -> None:
        self.store._lock.acquire()
        try:
            if self.busy_ms is not None:
                self.store._db.execute(f"PRAGMA busy_timeout = {self.busy_ms}")
            self.store._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._restore()
            self.store._lock.release()
            raise

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            self.store._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._restore()
            self.store._lock.release()

    def _restore(self) -> None:
        if self.busy_ms is not None:
            self.store._db.execute(f"PRAGMA busy_timeout = {self.store._busy_ms}")


SPILL_SUFFIX = ".spill.jsonl"
_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_file(path: Path) -> None:
    """Fail early, naming the file, when it cannot be a journal this user can write."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalFileError(f"{path}: cannot create its folder ({exc.strerror}); choose a path in a "
                               "folder you can write, or set JEVLAYA_HOME") from None
    if path.is_dir():
        raise JournalFileError(f"{path}: is a folder, not a journal file; pass a file path such as "
                               f"{path / 'journal.db'}")
    if path.exists() and path.stat().st_size:
        try:
            with path.open("rb") as f:
                head = f.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise JournalFileError(f"{path}: cannot be read ({exc.strerror}); give this user read and "
                                   "write permission on it, or point the broker at another file") from None
        if head != _SQLITE_HEADER:
            raise JournalFileError(
                f"{path}: is not a SQLite database (it starts with {head[:16]!r}); if it is your "
                "journal, restore it from a backup; otherwise move it away (or delete it) and a new "
                "journal is created there, or point the broker at another file")
    if path.exists() and not os.access(path, os.W_OK):
        raise JournalFileError(f"{path}: is read-only for this user; give write permission "
                               f"(chmod u+w {path}) or point the broker at a writable file")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise JournalFileError(f"{path}: its folder {path.parent} is read-only for this user, and SQLite "
                               "needs to write its -wal and -shm files there; give write permission on "
                               "the folder or point the broker at a writable path")


def file_error(location: str, exc: sqlite3.Error) -> JournalFileError:
    """What an SQLite error at open means for the user, naming the file and the fix."""
    text = str(exc)
    if "not a database" in text:
        why = ("is not a SQLite database (or is encrypted); if it is your journal, restore it "
               "from a backup; otherwise move it away (or delete it) to start a new journal")
    elif "malformed" in text or "corrupt" in text:
        why = (f"is damaged ({text}); restore it from a backup, or save what is readable with "
               f"sqlite3 {location} .recover | sqlite3 recovered.db and point the broker at "
               "recovered.db, or move it away to start a new journal")
    elif "locked" in text:
        why = (f"stayed locked by another process longer than the busy timeout ({text}); "
               "try again when that process has finished writing")
    elif "readonly" in text or "unable to open" in text or "permission" in text.lower():
        why = (f"cannot be opened for writing ({text}); give this user write permission on the "
               "file and its folder (SQLite writes -wal and -shm files beside it), or point the "
               "broker at a writable path")
    else:
        why = f"cannot be used ({type(exc).__name__}: {text}); check the file, or move it away"
    return JournalFileError(f"{location}: {why}")
