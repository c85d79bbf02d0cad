"""Exceptions of the journal storage; see :mod:`jevlaya_lab.errors` for the tree.

Messages name the source without its password (:func:`jevlaya_lab.journal.store.redact_url`).
"""

from __future__ import annotations

from jevlaya_lab.errors import JevlayaError

__all__ = ["JournalSchemaError", "JournalUnavailableError", "UnsupportedSourceError"]


class JournalSchemaError(JevlayaError, RuntimeError):
    """The database was written by a different schema version of jevlaya_lab."""


class UnsupportedSourceError(JevlayaError, ValueError):
    """The ``source`` is not a database this version can open (unknown scheme, bad URL/path)."""


class JournalUnavailableError(JevlayaError, ConnectionError):
    """The database server cannot be reached, refused the login, or stopped answering.

    The message names the source without its password and what to check.
    """
