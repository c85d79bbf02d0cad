"""``open_store``: which backend a ``source`` names, opened.

Kept apart from the :class:`~jevlaya_lab.journal.store.Store` interface so that the backends
import the interface and this module imports the backends: one direction, no circle.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jevlaya_lab._cache_dir import cache_home
from jevlaya_lab.journal.errors import JournalUnavailableError, UnsupportedSourceError
from jevlaya_lab.journal.postgresql import PostgreSQLStore, pg_spill_path  # psycopg only when one opens
from jevlaya_lab.journal.sqlite import SPILL_SUFFIX, SQLiteStore
from jevlaya_lab.journal.store import Store, redact_url

__all__ = ["DeferredStore", "open_store"]


def open_store(source: str | os.PathLike[str] | None = None, *, home: str | os.PathLike[str] | None
               = None, deferred: bool = False) -> Store:
    """Open the database ``source`` names.

    ``None`` -> ``<home>/broker.db`` (home: the cache folder, ``$JEVLAYA_HOME``; see
    :func:`jevlaya_lab._cache_dir.cache_home`); a path or
    ``sqlite:///path`` -> that SQLite file; ``postgresql://user@host:port/dbname`` (or
    ``postgres://``) -> that PostgreSQL database (needs ``psycopg``; see
    :mod:`jevlaya_lab.journal.postgresql`). The source is checked at once; with ``deferred``
    the database itself is opened on first use (see :class:`DeferredStore`).
    """
    location, spill, opener = _resolve(source, home)
    return DeferredStore(location, spill, opener) if deferred else opener()


def _resolve(source: str | os.PathLike[str] | None,
             home: str | os.PathLike[str] | None) -> tuple[str, Path | None, Callable[[], Store]]:
    """(location, spill file, how to open it), with no I/O: a bad source fails here."""
    if source is None:
        base = Path(home).expanduser() if home is not None else cache_home()
        path = base / "broker.db"
        return str(path), Path(str(path) + SPILL_SUFFIX), lambda: SQLiteStore(path)
    text = os.fspath(source)
    if text.startswith(("postgresql://", "postgres://")):
        return redact_url(text), pg_spill_path(redact_url(text)), lambda: PostgreSQLStore(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    elif "://" in text:
        raise UnsupportedSourceError(
            f"source={redact_url(text)!r}: unknown database scheme; use a .db/.sqlite path, "
            "sqlite:///path or postgresql://user@host:5432/dbname")
    elif not text.endswith((".db", ".sqlite", ".sqlite3")) and text != ":memory:":
        raise UnsupportedSourceError(
            f"source={text!r}: a SQLite path must end in .db, .sqlite or .sqlite3 (or use "
            "sqlite:///path) so a typo cannot create a stray file")
    if text == ":memory:":
        return text, None, lambda: SQLiteStore(text)
    path = Path(text)
    return str(path), Path(str(path) + SPILL_SUFFIX), lambda: SQLiteStore(path)


class DeferredStore(Store):
    """A store opened on its first use, in whichever thread uses it first.

    An ``AsyncBroker`` made inside a running event loop must not open a database there (opening
    checks the file, may wait for another process's lock, or connects to a server), so it keeps
    this stand-in and its first store call, made from a worker thread, opens the real one. A
    failure to open is raised by that use, and the next use tries again.
    """

    def __init__(self, location: str, spill_path: Path | None, opener: Callable[[], Store]) -> None:
        self.location = location
        self._spill_path = spill_path
        self._opener = opener
        self._real: Store | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def opened(self) -> bool:
        return self._real is not None

    def _store(self) -> Store:
        real = self._real
        if real is None:
            with self._lock:
                if self._closed:
                    raise JournalUnavailableError(f"{self.location}: this store is closed; open a new one "
                                                  "with open_store(...)")
                if self._real is None:
                    self._real = self._opener()
                real = self._real
        return real

    @property
    def spill_path(self) -> Path | None:
        return self._spill_path

    def registry(self) -> list[dict[str, Any]]:
        return self._store().registry()

    def replace_catalog(self, entries: Sequence[Mapping[str, Any]]) -> None:
        self._store().replace_catalog(entries)

    def put_user_models(self, entries: Sequence[Mapping[str, Any]]) -> None:
        self._store().put_user_models(entries)

    def catalog_filled(self) -> bool:
        return self._store().catalog_filled()

    def disabled_models(self) -> set[str]:
        return self._store().disabled_models()

    def set_disabled(self, name: str, disabled: bool) -> None:
        self._store().set_disabled(name, disabled)

    def get_key(self, ref: str) -> str | None:
        return self._store().get_key(ref)

    def stored_keys(self) -> dict[str, str]:
        return self._store().stored_keys()

    def set_key(self, ref: str, value: str | None) -> None:
        self._store().set_key(ref, value)

    def _insert(self, attempts: Iterable[Mapping[str, Any]], ratings: Iterable[Mapping[str, Any]], *,
                timeout_s: float | None = None, block_id: str | None = None, retry: bool = False) -> bool:
        return self._store()._insert(attempts, ratings, timeout_s=timeout_s, block_id=block_id, retry=retry)

    def attempts(self, **filters: Any) -> list[dict[str, Any]]:
        return self._store().attempts(**filters)

    def ratings(self, **filters: Any) -> list[dict[str, Any]]:
        return self._store().ratings(**filters)

    def rating_totals(self) -> dict[tuple[str, str], tuple[int, float]]:
        return self._store().rating_totals()

    def latest_scores(self, call_ids: Sequence[str]) -> dict[str, float]:
        return self._store().latest_scores(call_ids)

    def purge(self, retention_days: float, *, min_interval_s: float = 3600.0) -> int:
        return self._store().purge(retention_days, min_interval_s=min_interval_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            real, self._real = self._real, None
        if real is not None:
            real.close()

    def __repr__(self) -> str:
        return f"DeferredStore({self.location!r}, {'open' if self.opened else 'not opened yet'})"
