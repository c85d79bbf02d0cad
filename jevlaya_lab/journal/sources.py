"""``open_store``: which backend a ``source`` names, opened.

Kept apart from the :class:`~jevlaya_lab.journal.store.Store` interface so that the backends
import the interface and this module imports the backends: one direction, no circle.
"""

from __future__ import annotations

import os
from pathlib import Path

from jevlaya_lab._cache_dir import cache_home
from jevlaya_lab.journal.errors import UnsupportedSourceError
from jevlaya_lab.journal.postgresql import PostgreSQLStore  # imports psycopg only when one opens
from jevlaya_lab.journal.sqlite import SQLiteStore
from jevlaya_lab.journal.store import Store, redact_url

__all__ = ["open_store"]


def open_store(source: str | os.PathLike[str] | None = None, *, home: str | os.PathLike[str] | None
               = None) -> Store:
    """Open the database ``source`` names.

    ``None`` -> ``<home>/broker.db`` (home: the cache folder, ``$JEVLAYA_HOME``; see
    :func:`jevlaya_lab._cache_dir.cache_home`); a path or
    ``sqlite:///path`` -> that SQLite file; ``postgresql://user@host:port/dbname`` (or
    ``postgres://``) -> that PostgreSQL database (needs ``psycopg``; see
    :mod:`jevlaya_lab.journal.postgresql`).
    """
    if source is None:
        base = Path(home).expanduser() if home is not None else cache_home()
        return SQLiteStore(base / "broker.db")
    text = os.fspath(source)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgreSQLStore(text)
    if text.startswith("sqlite:///"):
        return SQLiteStore(Path(text[len("sqlite:///"):]))
    if "://" in text:
        raise UnsupportedSourceError(
            f"source={redact_url(text)!r}: unknown database scheme; use a .db/.sqlite path, "
            "sqlite:///path or postgresql://user@host:5432/dbname")
    if not text.endswith((".db", ".sqlite", ".sqlite3")) and text != ":memory:":
        raise UnsupportedSourceError(
            f"source={text!r}: a SQLite path must end in .db, .sqlite or .sqlite3 (or use "
            "sqlite:///path) so a typo cannot create a stray file")
    return SQLiteStore(Path(text) if text != ":memory:" else text)
