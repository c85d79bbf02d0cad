"""Cooldowns shared by every broker on one database: what one worker learns, all of them know.

:class:`SharedCooldowns` keeps, per model name, when its cooldown ends, in a table of the journal's
own database (a SQLite file shared by the processes of one machine, or a PostgreSQL database shared
by machines). It has the two methods a pool's cooldown book has (``until`` and ``extend``), so a
broker made with ``Broker(source, cooldowns=True)`` writes every cooldown it sets there and reads
the others' before it picks a model: a 429, an outage or a refused key seen by one Dask worker
keeps every worker off that model until the cooldown ends.

When a cooldown ends, one process gets to send the probe: the first to ask claims it (an atomic
update), the others see the model cooling for ``probe_s`` more seconds. If the probe fails, its
cooldown is written and everyone waits again; if nothing is written within ``probe_s`` the model
counts as healthy for all. So a provider sees at most one request per cooldown from the whole
fleet, rather than one per worker.

``limits={"model": (n, per_s)}`` adds a rate limit every broker on the book keeps together: at most
``n`` requests to that model in any ``per_s`` seconds, spaced evenly and counted in the database by
an atomic conditional update (see :meth:`SharedCooldowns.take`); a broker whose request finds no
free slot waits for the next one instead of sending.

Reads are cached for ``refresh_s`` (default 0.25 s) so a busy pool does not query the database on
every pick; a cooldown written elsewhere is seen within that time.

Every time a caller gives or gets is on its own clock (``time.time()``, what a broker uses). On
PostgreSQL, which machines share, the times stored are on the database server's clock: each book
measures how far its clock is from the server's when it opens, and again every
:data:`CLOCK_CHECK_S` seconds (the query with the shortest round trip of three, the offset taken at
its midpoint), and converts both ways. So a Dask worker whose clock runs seconds ahead or behind
still sees a cooldown end when the others do and takes its rate slots in turn, to within half a
round trip to the server. A SQLite file is shared by the processes of one machine only, which share
one clock: its times are stored as they are.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jevlaya_lab.journal.errors import JournalUnavailableError, UnsupportedSourceError
from jevlaya_lab.journal.pg_tables import DEFAULT_SCHEMA, WRITE_LOCK
from jevlaya_lab.journal.store import redact_url

__all__ = ["SharedCooldowns"]

TABLE = "shared_cooldowns"
RATES = "shared_rate_slots"
DEFAULT_PROBE_S = 2.0
DEFAULT_REFRESH_S = 0.25
CLOCK_CHECK_S = 60.0
"""How often (seconds) a book on PostgreSQL measures its clock's offset from the server's again:
NTP slews a clock slowly, and a clock set by hand jumps."""


class SharedCooldowns:
    """A cooldown book in the database ``source`` names (a path / ``sqlite:///`` or a
    ``postgresql://`` URL, as for a Broker); see the module docstring.

    ``clock`` is the clock of the times given to and returned by the book: ``time.time``, the one a
    broker's pool reads (another only where every time the caller passes is on it)."""

    def __init__(self, source: str | os.PathLike[str], *, probe_s: float = DEFAULT_PROBE_S,
                 refresh_s: float = DEFAULT_REFRESH_S,
                 limits: dict[str, tuple[int, float]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        text = os.fspath(source)
        self.clock = clock
        self._offset = 0.0  # the database's clock less ours (PostgreSQL: measured; SQLite: one machine)
        self._offset_checked = -math.inf
        self.location = redact_url(text)
        self.probe_s = float(probe_s)
        self.refresh_s = float(refresh_s)
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, float]] = {}  # name -> (value, read at)
        self._claimed: dict[str, float] = {}  # name -> end of the probe window this process holds
        self.limits = {name: _check_limit(name, limit) for name, limit in (limits or {}).items()}
        if text.startswith(("postgresql://", "postgres://")):
            self._pg = True
            self._conn = self._pg_connect(text)
        else:
            if text.startswith("sqlite:///"):
                text = text[len("sqlite:///"):]
            elif "://" in text:
                raise UnsupportedSourceError(f"SharedCooldowns(source={self.location!r}): use a .db path, "
                                             "sqlite:///path or postgresql://user@host:5432/dbname")
            self._pg = False
            self._conn = sqlite3.connect(Path(text), timeout=30, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._schema: str | None = None
            self._table = TABLE
        self._rates = self._table.replace(TABLE, RATES)
        try:
            self._create_tables()
            self._check_clock()
        except BaseException:  # a book that failed to open leaves no connection behind
            self._conn.close()
            raise

    def _create_tables(self) -> None:
        """Create the two tables once, whichever process comes first.

        PostgreSQL's ``CREATE ... IF NOT EXISTS`` is not safe against itself: two workers that
        start together can both find the table missing, and the second fails on the catalogue's
        unique index. So the creation runs in one transaction under the advisory lock the
        journal store creates its own tables under, and the workers take turns."""
        statements = [f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"'] if self._schema else []
        statements += [f"CREATE TABLE IF NOT EXISTS {self._table} (name TEXT PRIMARY KEY, "
                       "cool_until DOUBLE PRECISION NOT NULL, probe_until DOUBLE PRECISION NOT NULL)",
                       f"CREATE TABLE IF NOT EXISTS {self._rates} (name TEXT PRIMARY KEY, "
                       "tat DOUBLE PRECISION NOT NULL)"]
        if not self._pg:
            for sql in statements:
                self._conn.execute(sql)
            return
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            for sql in statements:
                self._conn.execute(sql)

    def _check_clock(self) -> None:
        """Measure the offset of the server's clock from ours again when it is due (PostgreSQL)."""
        if not self._pg or time.monotonic() - self._offset_checked < CLOCK_CHECK_S:
            return
        samples = []
        for _ in range(3):
            before = self.clock()
            with self._lock:
                server = float(self._conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])
            after = self.clock()
            samples.append((after - before, server - (before + after) / 2))
        self._offset = min(samples)[1]
        self._offset_checked = time.monotonic()

    @property
    def clock_offset(self) -> float:
        """Seconds the database's clock is ahead of ``clock`` (``0.0`` on SQLite)."""
        return self._offset

    def _to_db(self, t: float) -> float:
        return t + self._offset if t else 0.0

    def _from_db(self, t: float) -> float:
        return t - self._offset if t else 0.0

    def _pg_connect(self, url: str) -> Any:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the postgresql extra is missing
            raise JournalUnavailableError(f"{self.location}: pip install 'jevlaya-lab[postgresql]'") from exc
        try:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise JournalUnavailableError(f"SharedCooldowns: cannot reach {self.location}: "
                                          f"{type(exc).__name__}; check the server and the URL") from None
        # the journal's own schema, as the PostgreSQL store uses it, unless the URL sets a search path
        self._schema = None if "search_path" in url else DEFAULT_SCHEMA
        self._table = TABLE if self._schema is None else f"{self._schema}.{TABLE}"
        return conn

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._pg else sql

    def _execute(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self._lock:  # one connection, used from the broker's loop thread and others
            return self._conn.execute(self._sql(sql), args)

    def _row(self, name: str) -> tuple[float, float] | None:
        """``(cool_until, probe_until)`` as stored, on the database's clock: compared and written back
        as they are (a round trip through our clock could change a float's last bit)."""
        row = self._execute(f"SELECT cool_until, probe_until FROM {self._table} WHERE name = ?", (name,)).fetchone()
        return None if row is None else (float(row[0]), float(row[1]))

    # -- the cooldown book --------------------------------------------------------------------
    def until(self, name: str) -> float:
        """When ``name``'s cooldown ends for this process (``0.0``: none, or its probe is ours)."""
        self._check_clock()
        now = self.clock()
        cached = self._seen.get(name)
        if cached is not None and now - cached[1] < self.refresh_s and (cached[0] == 0.0 or cached[0] > now):
            return cached[0]
        value = self._read(name, now)
        self._seen[name] = (value, now)
        return value

    def _read(self, name: str, now: float) -> float:
        """``until``'s answer from the stored row; ``now`` is on our clock, the row on the database's."""
        if self._claimed.get(name, 0.0) > now:
            return 0.0  # this process holds the probe
        row = self._row(name)
        if row is None or row[0] == 0.0:
            return 0.0
        until, probe_until = row
        db_now = self._to_db(now)
        if until > db_now:
            return self._from_db(until)
        if probe_until == 0.0:  # the cooldown is over and nobody probes yet: try to be the one
            done = self._execute(f"UPDATE {self._table} SET probe_until = ? WHERE name = ? AND cool_until = ? "
                                 "AND probe_until = 0", (db_now + self.probe_s, name, until))
            if done.rowcount == 1:
                self._claimed[name] = now + self.probe_s
                return 0.0
            row = self._row(name)  # another process claimed it first
            held = 0.0 if row is None else max(row)
            return self._from_db(held) if held > db_now else 0.0
        if probe_until > db_now:
            return self._from_db(probe_until)  # another process is probing
        # the probe window passed with no new cooldown: the model answers again, for everyone
        self._execute(f"UPDATE {self._table} SET cool_until = 0, probe_until = 0 WHERE name = ? AND cool_until = ?",
                      (name, until))
        return 0.0

    def extend(self, name: str, until: float) -> float:
        """Record that ``name`` cools until at least ``until``; the end that holds now."""
        self._check_clock()
        self._claimed.pop(name, None)
        held_here = f"{TABLE}.cool_until"  # the row already stored (the target table, unqualified)
        self._execute(f"INSERT INTO {self._table} (name, cool_until, probe_until) VALUES (?, ?, 0) "
                      f"ON CONFLICT (name) DO UPDATE SET cool_until = CASE WHEN excluded.cool_until > {held_here} "
                      f"THEN excluded.cool_until ELSE {held_here} END, probe_until = 0",
                      (name, self._to_db(float(until))))
        row = self._row(name)
        held = float(until) if row is None else self._from_db(row[0])
        self._seen[name] = (held, self.clock())
        return held

    def take(self, name: str) -> float:
        """A request slot for ``name`` under its shared rate limit: ``0.0`` when granted (counted),
        else the time (on ``clock``) the next slot opens. Models without a limit always get one.

        Slots are spaced evenly, one every ``per_s / n`` seconds, over one stored number per model
        (the earliest time of the next slot): so no window of ``per_s`` seconds, wherever it
        starts, holds more than ``n``. A burst of ``n`` at once is not allowed, on purpose: a burst
        followed by slots at the steady rate puts up to ``2n - 1`` requests in the first
        ``per_s`` seconds, and providers often enforce a per-minute limit over shorter intervals;
        even spacing also leaves each request ``per_s / n`` seconds of margin for network delay
        before it could fall into the provider's next window. One conditional upsert takes a slot (a
        model's first request inserts its row), so two workers never get the same one."""
        limit = self.limits.get(name)
        if limit is None:
            return 0.0
        n, per = limit
        step = per / n
        self._check_clock()
        now = self.clock() + self._offset
        stored = f"{RATES}.tat"  # the row already stored (the target table, unqualified)
        done = self._execute(f"INSERT INTO {self._rates} (name, tat) VALUES (?, ?) ON CONFLICT (name) "
                             f"DO UPDATE SET tat = excluded.tat WHERE {stored} <= ?", (name, now + step, now))
        if done.rowcount == 1:
            return 0.0
        row = self._execute(f"SELECT tat FROM {self._rates} WHERE name = ?", (name,)).fetchone()
        return max(now + 0.001, float(row[0])) - self._offset

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"<SharedCooldowns {self.location}>"


def _check_limit(name: str, limit: Any) -> tuple[int, float]:
    try:
        n, per = limit
    except (TypeError, ValueError):
        raise ValueError(f"limits[{name!r}]={limit!r}: expected (requests, seconds), e.g. (60, 60.0)") from None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not isinstance(per, (int, float)) or per <= 0:
        raise ValueError(f"limits[{name!r}]={limit!r}: expected a positive int of requests per positive seconds")
    return n, float(per)
