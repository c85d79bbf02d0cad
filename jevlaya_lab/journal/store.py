"""The storage interface every backend implements (``open_store`` picks one: :mod:`.sources`).

A backend keeps three things in one database: the model registry, stored keys and the
append-only journal (attempt rows and rating rows). Two backends implement it: SQLite
(:mod:`jevlaya_lab.journal.sqlite`, the default: one file for one machine) and PostgreSQL
(:mod:`jevlaya_lab.journal.postgresql`: one database for several processes and servers).
Both hold the same rows and follow the same rules.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


DISABLED_PREFIX = "disabled:"  # meta keys marking a model disabled


def redact_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` query parameter)."""
    return split_password(url)[0]


def split_password(url: str) -> tuple[str, list[str]]:
    """``(url without passwords, the passwords it held)``.

    Errs on the side of hiding: the user part ends at the last ``@``, so a password with an
    unescaped ``@``, ``/`` or ``?`` is still removed whole.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, []
    secrets = []
    userinfo, at, hosts = rest.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            secrets.append(password)
        rest = f"{user}@{hosts}" if user else hosts
    base, q, query = rest.partition("?")
    if q:
        kept = []
        for part in query.split("&"):
            key, _, value = part.partition("=")
            if key == "password":
                secrets.append(value)
            else:
                kept.append(part)
        rest = base + ("?" + "&".join(kept) if kept else "")
    return f"{scheme}://{rest}", [s for s in secrets if s]


class Store(abc.ABC):
    """What the broker needs from a database. Every method is thread-safe."""

    location: str

    # registry
    @abc.abstractmethod
    def registry(self) -> list[dict[str, Any]]:
        """All model entries in registry order (user entries first, then catalog order)."""

    @abc.abstractmethod
    def replace_catalog(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Replace the catalog's entries; the user's own entries are never touched."""

    @abc.abstractmethod
    def put_user_models(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Add or update the user's own entries."""

    @abc.abstractmethod
    def catalog_filled(self) -> bool:
        """Whether a catalog was ever written here (even an empty one)."""

    # models switched off with disable_llm(): kept as ``disabled:<name>`` rows of the meta
    # table, so the mark needs no schema change and survives the broker that set it
    @abc.abstractmethod
    def disabled_models(self) -> set[str]:
        """The names marked disabled (a name need not be in the registry any more)."""

    @abc.abstractmethod
    def set_disabled(self, name: str, disabled: bool) -> None:
        """Mark ``name`` disabled (or clear the mark)."""

    # keys the user chose to store here (never copied from the environment)
    @abc.abstractmethod
    def get_key(self, ref: str) -> str | None: ...

    @abc.abstractmethod
    def stored_keys(self) -> dict[str, str]:
        """Every stored key (ref -> key) in one read, so lookups need no query of their own."""

    @abc.abstractmethod
    def set_key(self, ref: str, value: str | None) -> None:
        """Store a key under ``ref`` (``None`` deletes it)."""

    # journal
    def append(self, attempts: Iterable[Mapping[str, Any]],
               ratings: Iterable[Mapping[str, Any]] = (), *, timeout_s: float | None = None,
               retry: bool = False) -> None:
        """Append attempt rows and rating rows in one transaction.

        ``timeout_s`` bounds the wait for other writers' locks (default: the store's own), so
        the background writer comes back to its queue regularly when the database is busy.
        A duplicate ``call_id`` raises the driver's ``IntegrityError``, unless ``retry``: a
        batch tried again after a failure skips attempts already there (a commit may have
        succeeded although its answer was lost).
        """
        self._insert(attempts, ratings, timeout_s=timeout_s, retry=retry)

    def append_spilled(self, block_id: str, attempts: Iterable[Mapping[str, Any]],
                       ratings: Iterable[Mapping[str, Any]] = (), *, timeout_s: float | None = None) -> bool:
        """Append the rows of one block of a spill file exactly once.

        The block's id is recorded in the same transaction; a block already recorded is
        skipped (False), and attempts whose ``call_id`` is already present are left alone, so a
        replay interrupted anywhere can simply run again.
        """
        return self._insert(attempts, ratings, block_id=block_id, timeout_s=timeout_s)

    @abc.abstractmethod
    def _insert(self, attempts: Iterable[Mapping[str, Any]], ratings: Iterable[Mapping[str, Any]], *,
                timeout_s: float | None = None, block_id: str | None = None, retry: bool = False) -> bool:
        """The one insert behind ``append`` and ``append_spilled`` (False: block already written)."""

    @property
    @abc.abstractmethod
    def spill_path(self) -> Path | None:
        """Where rows that could not be written are saved for the next writer (None: nowhere)."""

    @abc.abstractmethod
    def attempts(self, *, call_id: str | None = None, trace_id: str | None = None,
                 llm_name: str | None = None, operation: str | None = None,
                 scope: str | None = None, status: str | None = None,
                 since: str | None = None, limit: int | None = None,
                 newest_first: bool = False) -> list[dict[str, Any]]:
        """Attempt rows matching every given filter, oldest first (``newest_first``: the
        newest first, so ``limit`` keeps the newest rows)."""

    @abc.abstractmethod
    def ratings(self, *, call_id: str | None = None, trace_id: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def latest_scores(self, call_ids: Sequence[str]) -> dict[str, float]:
        """The latest rating of each of ``call_ids`` that has one."""

    @abc.abstractmethod
    def rating_totals(self) -> dict[tuple[str, str], tuple[int, float]]:
        """(llm_name, operation or "") -> (number of ratings, sum of scores)."""

    @abc.abstractmethod
    def purge(self, retention_days: float, *, min_interval_s: float = 3600.0) -> int:
        """Delete journal rows older than the retention, at most once per ``min_interval_s``."""

    @abc.abstractmethod
    def close(self) -> None: ...
