"""Exceptions of the journal storage; see :mod:`jevlaya_lab.errors` for the tree.

Messages name the source without its password (:func:`jevlaya_lab.journal.store.redact_url`).
"""

from __future__ import annotations

from jevlaya_lab.errors import JevlayaError

__all__ = ["JournalFileError", "JournalSchemaError", "JournalUnavailableError", "JournalWriteError",
           "UnsupportedSourceError"]


class JournalSchemaError(JevlayaError, RuntimeError):
    """The database was written by a different schema version of jevlaya_lab."""


class UnsupportedSourceError(JevlayaError, ValueError):
    """The ``source`` is not a database this version can open (unknown scheme, bad URL/path)."""


class JournalUnavailableError(JevlayaError, ConnectionError):
    """The database server cannot be reached, refused the login, or stopped answering.

    The message names the source without its password and what to check.
    """


class JournalFileError(JevlayaError, RuntimeError):
    """The journal file cannot be used: it is not a SQLite database, it is damaged, or this user
    cannot write it. The message names the file, what is wrong and what to do."""


class JournalWriteError(JevlayaError, RuntimeError):
    """Journal rows could not be written before closing. ``spilled`` rows were saved to
    ``spill_path`` (the next writer on the same journal writes them); ``lost`` rows could not be
    saved anywhere (each was logged at ERROR)."""

    def __init__(self, message: str, *, spilled: int = 0, lost: int = 0,
                 spill_path: str | None = None) -> None:
        super().__init__(message)
        self.spilled = spilled
        self.lost = lost
        self.spill_path = spill_path
