"""Storage shared by the Broker (and later the decisions): model registry, keys, journal.

``open_store(source)`` returns a :class:`Store`. SQLite is the default backend (one file, WAL
mode, busy timeout, several processes on one machine may share it); a ``postgresql://`` source
opens the PostgreSQL backend, the same tables and rows in a database that several processes and
servers share (:mod:`jevlaya_lab.journal.postgresql`). A server that cannot be reached raises
:class:`JournalUnavailableError`.
"""

from jevlaya_lab.journal.rows import ATTEMPT_FIELDS, ATTEMPT_STATUSES, RATING_FIELDS
from jevlaya_lab.journal.store import (
    SCHEMA_VERSION,
    JournalSchemaError,
    JournalUnavailableError,
    Store,
    UnsupportedSourceError,
    default_home,
    open_store,
)
from jevlaya_lab.journal.writer import JournalWriter

__all__ = [
    "ATTEMPT_FIELDS", "ATTEMPT_STATUSES", "RATING_FIELDS", "SCHEMA_VERSION", "JournalSchemaError",
    "JournalUnavailableError", "JournalWriter", "Store", "UnsupportedSourceError", "default_home",
    "open_store",
]
