"""The PostgreSQL backend: one database that several processes and servers share.

``open_store("postgresql://user@host:5432/dbname")`` returns a :class:`PostgreSQLStore` that
keeps the same tables, rows and rules as the SQLite file (same rows in, same rows out: times stay
the ISO-8601 text the broker writes, compared byte-wise with ``COLLATE "C"`` so ``since=`` and
retention behave as in SQLite). The rules it keeps:

- **Where the tables live.** A shared database belongs to other applications too, so the tables
  go to their own schema, ``jevlaya_lab`` (created when missing). To choose another one, give a
  search path in the URL: ``postgresql://.../db?options=-csearch_path%3Dmy_schema`` (or set one
  with ``ALTER ROLE ... SET search_path``); the first existing schema on it is used, and we do
  not create schemas the user named. Two schemas are two separate journals.
- **Passwords.** Prefer ``PGPASSWORD`` or ``~/.pgpass`` (libpq reads both). A password in the URL
  works but never appears in ``location``, ``repr``, logs or exception messages.
- **Concurrency.** One connection per store behind a lock (every method is thread-safe);
  appends from many processes never conflict (one row per ``call_id``); registry, meta and
  retention writes take a transaction-level advisory lock, so they are serialised across
  processes as SQLite's ``BEGIN IMMEDIATE`` serialises them, and ``purge`` runs at most once per
  interval however many brokers share the database. Lock waits give up after ``lock_timeout_s``
  (SQLite's busy timeout).
- **Failures.** A server that cannot be reached, refuses the login or dies mid-session raises
  :class:`~jevlaya_lab.journal.errors.JournalUnavailableError` naming the source (without its
  password) and what to check. The next call reconnects; reads retry once on a fresh
  connection by themselves, writes do not (the :class:`JournalWriter` retries a failed batch).
  A malformed URL raises :class:`~jevlaya_lab.journal.errors.UnsupportedSourceError`; a missing
  driver a ``ModuleNotFoundError`` saying what to install. A duplicate ``call_id`` raises the
  driver's ``IntegrityError`` (as ``sqlite3.IntegrityError`` does for SQLite).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jevlaya_lab._cache_dir import cache_home
from jevlaya_lab.journal.errors import JournalSchemaError, JournalUnavailableError, UnsupportedSourceError
from jevlaya_lab.journal.pg_tables import DEFAULT_SCHEMA
from jevlaya_lab.journal.pg_tables import TABLES as _TABLES
from jevlaya_lab.journal.pg_tables import WRITE_LOCK as _WRITE_LOCK
from jevlaya_lab.journal.pg_tables import insert_sql as _insert_sql
from jevlaya_lab.journal.pg_tables import put_meta as _put_meta
from jevlaya_lab.journal.rows import (
    ATTEMPT_FIELDS,
    MODEL_FIELDS,
    RATING_FIELDS,
    SCORE_CHUNK,
    attempt_filters,
    equality_filters,
    model_from_row,
    model_values,
    scores_query,
    utc_now,
)
from jevlaya_lab.journal.store import DISABLED_PREFIX, SCHEMA_VERSION, Store, split_password


class PostgreSQLStore(Store):
    """A :class:`Store` in a PostgreSQL database (see the module docstring for the rules)."""

    def __init__(self, url: str, *, lock_timeout_s: float = 30.0,
                 connect_timeout_s: float = 10.0) -> None:
        self.location, self._secrets = split_password(url)
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise ModuleNotFoundError(
                f"source={self.location!r}: the PostgreSQL backend needs the psycopg 3 driver; "
                "install it with pip install 'psycopg[binary]' (or 'jevlaya-lab[postgresql]')"
            ) from None
        self._psycopg = psycopg
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise UnsupportedSourceError(
                f"source={self.location!r}: not a valid PostgreSQL URL "
                f"({self._detail(exc)}); write it as "
                "postgresql://user@host:5432/dbname[?options=-csearch_path%3Dschema]") from None
        self._secrets += [str(v) for k, v in params.items() if k == "password" and v]
        ports = [p for p in str(params.get("port") or "").split(",") if p and not p.isdigit()]
        if ports:
            raise UnsupportedSourceError(
                f"source={self.location!r}: port={ports[0]!r} is not a number; write it as "
                "postgresql://user@host:5432/dbname")
        self._url = url
        self._extra = {k: v for k, v in (("connect_timeout", str(max(1, round(connect_timeout_s)))),
                                         ("application_name", "jevlaya_lab"))
                       if k not in params}
        self._lock_timeout_ms = int(lock_timeout_s * 1000)
        self._lock = threading.Lock()
        self._closed = False
        self._schema: str | None = None
        self._conn: Any = None
        try:
            with self._lock:
                self._conn = self._connect()
                try:
                    self._create_tables()
                    found = self._conn.execute(
                        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                except psycopg.OperationalError as exc:
                    raise self._unavailable(exc) from None
        except BaseException:
            self.close()
            raise
        if int(found["value"]) != SCHEMA_VERSION:
            self.close()
            raise JournalSchemaError(
                f"{self.location}: schema_version={found['value']} but this jevlaya_lab "
                f"expects {SCHEMA_VERSION}; open it with the version that wrote it, or point the "
                "broker at another database or schema (?options=-csearch_path%3Dname)")

    # connection -------------------------------------------------------------------------------
    def _connect(self) -> Any:
        """A new autocommit connection with this store's search path and lock timeout."""
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(self._url, autocommit=True,
                                   row_factory=psycopg.rows.dict_row, **self._extra)
            try:
                conn.execute(f"SET lock_timeout = {self._lock_timeout_ms}")
                if self._schema is not None:
                    conn.execute("SELECT set_config('search_path', %s, false)",
                                 (self._schema_path(),))
            except BaseException:  # a half-set-up connection is closed, never left to the GC
                conn.close()
                raise
        except psycopg.OperationalError as exc:
            raise JournalUnavailableError(
                f"source={self.location!r}: cannot connect ({self._detail(exc)}); "
                "check that the server runs and accepts connections from this host, the user "
                "name, the password (PGPASSWORD or ~/.pgpass) and the database name") from None
        return conn

    def _create_tables(self) -> None:
        """Create the schema and tables once, serialised against other processes doing it."""
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
            source = self._conn.execute(
                "SELECT source FROM pg_settings WHERE name = 'search_path'").fetchone()["source"]
            if source == "default":
                self._conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{DEFAULT_SCHEMA}"')
                self._schema = DEFAULT_SCHEMA
            else:
                self._schema = self._conn.execute("SELECT current_schema() AS s").fetchone()["s"]
                if self._schema is None:
                    path = self._conn.execute("SHOW search_path").fetchone()["search_path"]
                    raise UnsupportedSourceError(
                        f"source={self.location!r}: search_path={path!r} names no existing "
                        "schema; create it first (CREATE SCHEMA name) or leave the option out "
                        f"to use the {DEFAULT_SCHEMA!r} schema")
            self._conn.execute("SELECT set_config('search_path', %s, true)",
                               (self._schema_path(),))
            for statement in filter(str.strip, _TABLES.split(";")):
                self._conn.execute(statement)
        self._conn.execute("SELECT set_config('search_path', %s, false)", (self._schema_path(),))

    def _schema_path(self) -> str:
        return '"' + str(self._schema).replace('"', '""') + '"'

    def _live(self) -> Any:
        if self._closed:
            raise JournalUnavailableError(
                f"{self.location}: this store is closed; open a new one with open_store(...)")
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
                self._conn = None  # a failed reconnect leaves no stale handle behind
            self._conn = self._connect()
        return self._conn

    def _unavailable(self, exc: Exception) -> JournalUnavailableError:
        return JournalUnavailableError(
            f"{self.location}: the database did not answer "
            f"({type(exc).__name__}: {self._detail(exc)}); the next call "
            "reconnects. Check that the server is up and reachable")

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of one query; a connection found dead is replaced and the query tried again."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._live()
                try:
                    rows: list[dict[str, Any]] = conn.execute(sql, args).fetchall()
                    return rows
                except self._psycopg.OperationalError as exc:
                    if attempt == 2 or not conn.broken:
                        raise self._unavailable(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _write(self, *, serialised: bool = True) -> Iterator[Any]:
        """One transaction under the store lock; ``serialised`` also takes the advisory lock."""
        with self._lock:
            conn = self._live()
            try:
                with conn.transaction():
                    if serialised:
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
                    yield conn
            except self._psycopg.OperationalError as exc:
                raise self._unavailable(exc) from None

    def _detail(self, exc: Exception) -> str:
        """The driver's message on one line, with any password in it replaced by ``***``."""
        text = " ".join(str(exc).split())
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    # registry -------------------------------------------------------------------------------
    def registry(self) -> list[dict[str, Any]]:
        rows = self._read(f"SELECT {', '.join(MODEL_FIELDS)}, origin FROM models "
                          "ORDER BY origin = 'catalog', position")
        return [model_from_row(r) for r in rows]

    def replace_catalog(self, entries: Sequence[Mapping[str, Any]]) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM models WHERE origin = 'catalog'")
            user = {r["name"] for r in conn.execute("SELECT name FROM models")}
            rows = [(*model_values(e), "catalog", i) for i, e in enumerate(entries)
                    if e["name"] not in user]
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO models VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)", rows)
            _put_meta(conn, "catalog_at", utc_now())

    def put_user_models(self, entries: Sequence[Mapping[str, Any]]) -> None:
        with self._write() as conn:
            start = conn.execute("SELECT COALESCE(MAX(position), -1) + 1 AS p FROM models "
                                 "WHERE origin = 'user'").fetchone()["p"]
            for i, e in enumerate(entries):
                old = conn.execute("SELECT position FROM models WHERE name = %s AND "
                                   "origin = 'user'", (e["name"],)).fetchone()
                pos = old["position"] if old else start + i
                conn.execute(
                    "INSERT INTO models VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (name) "
                    "DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in (
                        *MODEL_FIELDS[1:], "origin", "position")),
                    (*model_values(e), "user", pos))

    def catalog_filled(self) -> bool:
        return bool(self._read("SELECT 1 FROM meta WHERE key = 'catalog_at'"))

    def disabled_models(self) -> set[str]:
        rows = self._read("SELECT key FROM meta WHERE key LIKE %s", (DISABLED_PREFIX + "%",))
        return {r["key"][len(DISABLED_PREFIX):] for r in rows}

    def set_disabled(self, name: str, disabled: bool) -> None:
        with self._write() as conn:
            if disabled:
                _put_meta(conn, DISABLED_PREFIX + name, utc_now())
            else:
                conn.execute("DELETE FROM meta WHERE key = %s", (DISABLED_PREFIX + name,))

    # keys -----------------------------------------------------------------------------------
    def get_key(self, ref: str) -> str | None:
        rows = self._read("SELECT value FROM keys WHERE ref = %s", (ref,))
        return rows[0]["value"] if rows else None

    def stored_keys(self) -> dict[str, str]:
        return {r["ref"]: r["value"] for r in self._read("SELECT ref, value FROM keys")}

    def set_key(self, ref: str, value: str | None) -> None:
        with self._write(serialised=False) as conn:
            if value is None:
                conn.execute("DELETE FROM keys WHERE ref = %s", (ref,))
            else:
                conn.execute("INSERT INTO keys VALUES (%s, %s) ON CONFLICT (ref) "
                             "DO UPDATE SET value = EXCLUDED.value", (ref, value))

    # journal --------------------------------------------------------------------------------
    def _insert(self, attempts: Iterable[Mapping[str, Any]], ratings: Iterable[Mapping[str, Any]], *,
                timeout_s: float | None = None, block_id: str | None = None, retry: bool = False) -> bool:
        a_rows = [tuple(r.get(f) for f in ATTEMPT_FIELDS) for r in attempts]
        r_rows = [tuple(r.get(f) for f in RATING_FIELDS[1:]) for r in ratings]
        if not a_rows and not r_rows and block_id is None:
            return True
        with self._write(serialised=False) as conn, conn.cursor() as cur:
            if timeout_s is not None:
                for setting in ("lock_timeout", "statement_timeout"):
                    cur.execute("SELECT set_config(%s, %s, true)", (setting, f"{int(timeout_s * 1000)}ms"))
            if block_id is not None:  # the marker's key is unique: a second replay inserts nothing
                cur.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                            (f"spill:{block_id}", utc_now()))
                if cur.rowcount == 0:
                    return False
            if a_rows:
                cur.executemany(_insert_sql("attempts", ATTEMPT_FIELDS)
                                + (" ON CONFLICT (call_id) DO NOTHING" if block_id or retry else ""), a_rows)
            if r_rows:
                cur.executemany(_insert_sql("ratings", RATING_FIELDS[1:]), r_rows)
        return True

    @property
    def spill_path(self) -> Path | None:
        return pg_spill_path(self.location)

    def attempts(self, *, call_id: str | None = None, trace_id: str | None = None,
                 llm_name: str | None = None, operation: str | None = None,
                 scope: str | None = None, status: str | None = None,
                 since: str | None = None, limit: int | None = None,
                 newest_first: bool = False) -> list[dict[str, Any]]:
        where, args = attempt_filters("%s", call_id=call_id, trace_id=trace_id, llm_name=llm_name,
                                      operation=operation, scope=scope, status=status, since=since)
        order = "called_at DESC, seq DESC" if newest_first else "called_at, seq"
        return self._select("attempts", ATTEMPT_FIELDS, where, args, order, limit)

    def ratings(self, *, call_id: str | None = None, trace_id: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        where, args = equality_filters("%s", call_id=call_id, trace_id=trace_id)
        return self._select("ratings", RATING_FIELDS, where, args, "rating_id", limit)

    def latest_scores(self, call_ids: Sequence[str]) -> dict[str, float]:
        ids = list(dict.fromkeys(call_ids))
        scores: dict[str, float] = {}
        for start in range(0, len(ids), SCORE_CHUNK):
            chunk = ids[start:start + SCORE_CHUNK]
            rows = self._read(scores_query("%s", len(chunk)), chunk)
            scores.update((r["call_id"], float(r["score"])) for r in rows)
        return scores

    def rating_totals(self) -> dict[tuple[str, str], tuple[int, float]]:
        rows = self._read("SELECT llm_name, COALESCE(operation, '') AS op, COUNT(*) AS n, "
                          "SUM(score) AS total FROM ratings GROUP BY 1, 2")
        return {(r["llm_name"], r["op"]): (int(r["n"]), float(r["total"])) for r in rows}

    def purge(self, retention_days: float, *, min_interval_s: float = 3600.0) -> int:
        with self._write() as conn:
            last = conn.execute("SELECT value FROM meta WHERE key = 'purged_at'").fetchone()
            now = time.time()
            if last is not None and now - float(last["value"]) < min_interval_s:
                return 0
            cutoff = (datetime.now(UTC) - timedelta(days=retention_days)).isoformat()
            n: int = conn.execute("DELETE FROM attempts WHERE called_at < %s", (cutoff,)).rowcount
            n += conn.execute("DELETE FROM ratings WHERE rated_at < %s", (cutoff,)).rowcount
            _put_meta(conn, "purged_at", str(now))
        return n

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _select(self, table: str, fields: Sequence[str], where: list[str], args: list[Any],
                order: str, limit: int | None) -> list[dict[str, Any]]:
        sql = f"SELECT {', '.join(fields)} FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order}"
        if limit is not None:
            sql += " LIMIT %s"
            args = [*args, int(limit)]
        return self._read(sql, args)

    def __repr__(self) -> str:
        return f"PostgreSQLStore({self.location!r})"


def pg_spill_path(location: str) -> Path:
    """The spill file of the database at ``location`` (its URL without password): one per
    database, in the cache folder, since a server has no folder of ours."""
    digest = hashlib.sha256(location.encode()).hexdigest()[:16]
    return cache_home() / "journal-spill" / f"postgresql-{digest}.jsonl"
