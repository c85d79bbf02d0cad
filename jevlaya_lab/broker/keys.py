"""Key resolution: which API key a caller uses for an entry's ``api_key_ref``.

For a caller with a scope, ``<scope>/<REF>`` is looked up first, then ``<REF>``; each name is
looked up in the ``secrets=`` mapping, the keys the user stored in the database, a ``.env`` file
in the working directory, then the environment. Keys from the environment or ``.env`` are never
written to the database. Every source is read again when it changes: the environment on every
lookup, ``.env`` when its modification time changes (checked at most every
``DOTENV_CHECK_S``), stored keys every ``STORED_KEY_TTL_S``, at once after ``store_key`` and
in the background after a refusal (:meth:`KeyResolver.forget`), so a key refused with 401/403
and then replaced is used. Keys stay inside this module and the HTTP headers: ``redact`` scrubs
them (and anything key-shaped) from provider messages before they reach rows or exceptions.

The HTTP libraries the broker drives log too: at DEBUG, httpcore prints each response's
headers, so a provider that echoes the key (``X-Echo-Key``, ``WWW-Authenticate``) would put it
in the application's logs. While a broker is open, :func:`guard_library_logs` puts a filter on
those loggers (``LIBRARY_LOGGERS``) that redacts every key its resolvers handed out (and
anything key-shaped) from each record before any handler sees it; the last broker to close
takes it off. Records below the loggers' level are never built, so it costs nothing unless
DEBUG logging is on.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from jevlaya_lab.journal.store import Store
from jevlaya_lab.secrets import scrub_secrets as redact_secrets

STORED_KEY_TTL_S = 60.0
DOTENV_CHECK_S = 1.0
log = logging.getLogger("jevlaya_lab.broker")


def read_dotenv(path: Path) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines (``export`` and quotes allowed, ``#`` comments skipped)."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


class KeyResolver:
    """Looks keys up for a scope; one instance per broker, shared by its scoped callers."""

    def __init__(self, store: Store, secrets: Mapping[str, str] | None = None,
                 dotenv: Path | None = None) -> None:
        self._store = store
        self._secrets = dict(secrets or {})
        self._dotenv_path = dotenv if dotenv is not None else Path.cwd() / ".env"
        self._dotenv_stamp: int | None = None
        self._dotenv_checked = -math.inf
        self._dotenv: dict[str, str] = {}
        self._stored_keys: dict[str, str] = {}
        self._stored_at: float | None = None  # time.monotonic() of the last read
        self._refreshing = threading.Lock()
        self.resolved: set[str] = set()  # every key handed out: what logs must never show
        # where a key is looked for, in order (built once: every call resolves a key)
        self._sources: tuple[tuple[str, Callable[[str], str | None]], ...] = (
            ("secrets", self._secrets.get), ("database", self._stored), (".env", self._from_dotenv),
            ("environment", os.environ.get))

    def resolve(self, ref: str, scope: str | None = None) -> str | None:
        found = self._find(ref, scope)
        if found is None:
            return None
        self.resolved.add(found[1])
        return found[1]

    def source(self, ref: str, scope: str | None = None) -> str | None:
        """Where the key for ``ref`` comes from (``secrets``, ``database``, ``.env``,
        ``environment``), or ``None`` when it is missing; never the key itself."""
        found = self._find(ref, scope)
        return None if found is None else found[0]

    def _find(self, ref: str, scope: str | None) -> tuple[str, str] | None:
        """``(where, key)`` of the first non-empty key: ``scope/ref`` in every source, then
        ``ref`` in every source."""
        for name in (f"{scope}/{ref}", ref) if scope else (ref,):
            for where, lookup in self._sources:
                value = lookup(name)
                if value:
                    return where, value
        return None

    def forget(self) -> None:
        """Read the stored keys again (in the background) before trusting the copy: a key
        was refused, and another process may have stored a new one."""
        self._stored_at = None

    def _from_dotenv(self, name: str) -> str | None:
        now = time.monotonic()
        if now - self._dotenv_checked >= DOTENV_CHECK_S:
            self._dotenv_checked = now
            try:
                stamp: int | None = self._dotenv_path.stat().st_mtime_ns
            except OSError:
                stamp = None
            if stamp != self._dotenv_stamp:
                self._dotenv_stamp = stamp
                self._dotenv = read_dotenv(self._dotenv_path) if stamp is not None else {}
        return self._dotenv.get(name)

    def load_stored(self) -> None:
        """Read every stored key now. It queries the database: call it from a worker thread
        (the broker does, while it builds its pool)."""
        self._stored_keys = self._store.stored_keys()
        self._stored_at = time.monotonic()

    def _stored(self, ref: str) -> str | None:
        """A key stored in the database, from a copy read off the event loop and refreshed in
        the background every ``STORED_KEY_TTL_S`` (keys stored by other processes appear after
        that): routing never waits on the database, even while another process holds it."""
        if self._stored_at is None or time.monotonic() - self._stored_at > STORED_KEY_TTL_S:
            self._refresh_in_background()
        return self._stored_keys.get(ref)

    def _refresh_in_background(self) -> None:
        if not self._refreshing.acquire(blocking=False):
            return  # a refresh is already under way
        threading.Thread(target=self._refresh, name="jevlaya-keys", daemon=True).start()

    def _refresh(self) -> None:
        try:
            self.load_stored()
        except Exception as exc:  # noqa: BLE001 - keep the last copy; try again after the TTL
            self._stored_at = time.monotonic()
            log.warning("stored keys could not be re-read from %s (%s: %s); using the last copy",
                        self._store.location, type(exc).__name__, exc)
        finally:
            self._refreshing.release()

    def store(self, ref: str, value: str | None) -> None:
        """Keep ``value`` in the database under ``ref`` (``None`` deletes it)."""
        self._store.set_key(ref, value)
        keys = dict(self._stored_keys)
        if value is None:
            keys.pop(ref, None)
        else:
            keys[ref] = value
        self._stored_keys = keys

    def __repr__(self) -> str:
        return f"KeyResolver({len(self._secrets)} secrets, store={self._store!r})"


LIBRARY_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.http11",
                   "httpcore.http2", "httpcore.proxy", "httpcore.socks", "hpack", "hpack.hpack",
                   "hpack.table")


class _KeyLogFilter(logging.Filter):
    """Redacts the keys of every open broker from the records of the library loggers."""

    def __init__(self) -> None:
        super().__init__("jevlaya_lab.keys")
        self.resolvers: list[KeyResolver] = []
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        keys = {k for r in list(self.resolvers) for k in list(r.resolved)}
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record stays as it is
            return True
        clean = redact_secrets(text, *keys)
        if clean != text:
            record.msg, record.args = clean, None
        return True


_LOG_FILTER = _KeyLogFilter()


def guard_library_logs(resolver: KeyResolver, on: bool = True) -> None:
    """Redact ``resolver``'s keys from the HTTP libraries' log records while ``on`` (a broker
    is open); with ``on=False`` stop, and take the filter off once no broker needs it."""
    with _LOG_FILTER.lock:
        if on:
            if not _LOG_FILTER.resolvers:
                for name in LIBRARY_LOGGERS:
                    logging.getLogger(name).addFilter(_LOG_FILTER)
            _LOG_FILTER.resolvers.append(resolver)
            return
        if resolver in _LOG_FILTER.resolvers:
            _LOG_FILTER.resolvers.remove(resolver)
            if not _LOG_FILTER.resolvers:
                for name in LIBRARY_LOGGERS:
                    logging.getLogger(name).removeFilter(_LOG_FILTER)


def redact(text: str, *keys: str | None) -> str:
    """``text`` with every given key (and any run of 6+ of its characters) and every key-shaped
    token replaced by ``***`` (:func:`jevlaya_lab.secrets.scrub_secrets`)."""
    return redact_secrets(text, *keys)


def fingerprint(key: str) -> str:
    """A short digest that tells keys apart without keeping the key itself."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
