"""Storage shared by the Broker (and later the decisions): model registry, keys, journal.

``open_store(source)`` returns a :class:`Store`. SQLite is the default backend (one file, WAL
mode, busy timeout, several processes may share it). ``postgresql://`` sources are reserved for
a PostgreSQL backend and raise :class:`UnsupportedSourceError` for now.
"""

from jevlaya_lab.journal.rows import ATTEMPT_FIELDS, ATTEMPT_STATUSES, RATING_FIELDS
from jevlaya_lab.journal.store import (
    SCHEMA_VERSION,
    JournalSchemaError,
    Store,
    UnsupportedSourceError,
    default_home,
    open_store,
)
from jevlaya_lab.journal.writer import JournalWriter

__all__ = [
    "ATTEMPT_FIELDS", "ATTEMPT_STATUSES", "RATING_FIELDS", "SCHEMA_VERSION", "JournalSchemaError",
    "JournalWriter", "Store", "UnsupportedSourceError", "default_home", "open_store",
]
