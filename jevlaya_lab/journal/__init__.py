"""Storage shared by the Broker (and later the decisions): model registry, keys, journal.

``open_store(source)`` returns a :class:`Store`. SQLite is the default backend (one file, WAL
mode, busy timeout, several processes on one machine may share it); a ``postgresql://`` source
opens the PostgreSQL backend, the same tables and rows in a database that several processes and
servers share (:mod:`jevlaya_lab.journal.postgresql`). A server that cannot be reached raises
:class:`JournalUnavailableError`; a SQLite file that is not a database, is damaged or read-only
raises :class:`JournalFileError` when opened. The :class:`JournalWriter` never drops a row
silently: rows the database refuses wait and are retried, then go to a spill file that the next
writer replays (:class:`JournalWriteError` on close says so).

Modules: ``store`` (the interface), ``sqlite`` / ``postgresql`` (the backends), ``sources``
(``open_store``), ``rows`` (row fields and filters), ``writer`` (the background writer),
``errors``. ``default_home`` is :func:`jevlaya_lab._cache_dir.cache_home`, the one cache folder.
"""

from jevlaya_lab._cache_dir import cache_home as default_home
from jevlaya_lab.journal.errors import (
    JournalFileError,
    JournalSchemaError,
    JournalUnavailableError,
    JournalWriteError,
    UnsupportedSourceError,
)
from jevlaya_lab.journal.rows import ATTEMPT_FIELDS, ATTEMPT_STATUSES, RATING_FIELDS
from jevlaya_lab.journal.sources import open_store
from jevlaya_lab.journal.store import SCHEMA_VERSION, Store
from jevlaya_lab.journal.writer import JournalWriter

__all__ = [
    "ATTEMPT_FIELDS", "ATTEMPT_STATUSES", "RATING_FIELDS", "SCHEMA_VERSION", "JournalFileError",
    "JournalSchemaError", "JournalUnavailableError", "JournalWriteError", "JournalWriter", "Store",
    "UnsupportedSourceError", "default_home", "open_store",
]
