"""The model catalog: which models the broker knows before the user adds any.

Sources, in order: a remote catalog URL (``catalog=`` or ``$JEVLAYA_CATALOG_URL``) when it is
reachable, refreshing the database's catalog entries on every open; when it is not reachable a
warning is logged and the database's entries stand; an empty database is filled from the copy
shipped in this package (``catalog.json``). ``catalog=[]`` (or any list) gives the entries
directly, which tests use for a pool of exactly their own models; a ``.json`` path reads a file.

Keeping the list up to date: ``sync()`` reads the *configured catalog source* again (the URL, file or list
above; ``sync(source)`` reads another one), writes its entries as the database's catalog and
updates the live pool in place: new models join, changed entries take effect, models gone from
the catalog leave (calls already running on them end normally); cooldowns, refusals, ratings
and ``disable_llm`` marks of the models that stay are kept, and the user's own ``models=``
entries are never touched. It does not ask the endpoints' ``/v1/models``: an endpoint lists
what it serves, not what the pool should use, and most providers need a key to answer. A
broker with a URL or file source does it by itself every ``sync_interval`` seconds (default
86400, as llmbroker; ``None``: only on open and on ``sync()``), in the background of the first
call after the interval, so no call waits for it; with no source configured (no ``catalog=``
and no ``$JEVLAYA_CATALOG_URL``) ``sync()`` returns ``None`` and the database's list stands.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.errors import CatalogError
from jevlaya_lab.journal.rows import model_values
from jevlaya_lab.journal.store import Store

log = logging.getLogger("jevlaya_lab.broker")
PACKAGED_CATALOG = Path(__file__).with_name("catalog.json")
CATALOG_URL_ENV = "JEVLAYA_CATALOG_URL"
CatalogSource = str | os.PathLike[str] | Sequence[LLMConfig | dict[str, Any]] | None


def parse_catalog(data: Any, origin: str) -> list[LLMConfig]:
    """``{"models": [...]}`` or a bare list -> entries (every entry validated)."""
    models = data.get("models") if isinstance(data, dict) else data
    if not isinstance(models, list):
        raise CatalogError(f"catalog {origin}: expected a JSON object with a 'models' list, got "
                           f"{type(data).__name__}")
    return [LLMConfig.coerce(m) for m in models]


def packaged_catalog() -> list[LLMConfig]:
    return parse_catalog(json.loads(PACKAGED_CATALOG.read_text("utf-8")), str(PACKAGED_CATALOG))


def fetch_remote(url: str, *, timeout: float = 3.0) -> list[LLMConfig] | None:
    """The catalog at ``url``, or ``None`` (with a logged warning) when it cannot be had."""
    try:
        response = httpx.get(url, timeout=timeout, follow_redirects=True)
        response.raise_for_status()
        return parse_catalog(response.json(), url)
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("catalog %s is not reachable (%s); using the catalog in the database",
                    url, type(exc).__name__)
        return None


def configured(source: CatalogSource) -> CatalogSource:
    """The catalog source in force: ``source``, else ``$JEVLAYA_CATALOG_URL``, else None."""
    return source if source is not None else os.environ.get(CATALOG_URL_ENV) or None


def describe(source: CatalogSource) -> str:
    if source is None:
        return "(none)"
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return "the catalog list given to the broker"


def read_catalog(source: CatalogSource) -> list[LLMConfig] | None:
    """The entries of ``source`` (a list, an http(s) URL or a .json path); ``None`` when it is
    None or a URL that cannot be reached (a warning is logged)."""
    if source is None:
        return None
    if not isinstance(source, (str, os.PathLike)):
        return [LLMConfig.coerce(m) for m in source]
    url = os.fspath(source)
    if url.startswith(("http://", "https://")):
        return fetch_remote(url)
    path = Path(url).expanduser()
    if not path.is_file():
        raise CatalogError(f"catalog={url!r}: no such file; give a catalog .json path, an "
                           "http(s) URL, or a list of model entries")
    return parse_catalog(json.loads(path.read_text("utf-8")), url)


def fill_store(store: Store, source: CatalogSource = None) -> None:
    """Bring the store's catalog entries up to date before the pool is built (blocking IO)."""
    entries = read_catalog(configured(source))
    if entries is not None:
        store.replace_catalog([e.to_dict() for e in entries])
    elif not store.catalog_filled():
        store.replace_catalog([e.to_dict() for e in packaged_catalog()])


@dataclass(frozen=True)
class SyncReport:
    """What one ``sync()`` did. ``applied`` is False when the source could not be read (the
    database's catalog stands); ``added``/``updated``/``removed`` name catalog entries (the
    user's own entries are never touched); ``active_before``/``active_after`` count the models
    that could take a call before and after."""

    source: str
    applied: bool
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    active_before: int = 0
    active_after: int = 0


def sync_store(store: Store, source: CatalogSource) -> tuple[bool, tuple[str, ...],
                                                              tuple[str, ...], tuple[str, ...]]:
    """Replace the store's catalog entries with ``source``'s (blocking IO): (applied, added,
    updated, removed), names of the user's own entries left out."""
    entries = read_catalog(source)
    if entries is None:
        return False, (), (), ()
    rows = store.registry()
    user = {r["name"] for r in rows if r.get("origin") == "user"}
    old = {r["name"]: model_values(r) for r in rows if r.get("origin") != "user"}
    new = {e.name: model_values(e.to_dict()) for e in entries if e.name not in user}
    store.replace_catalog([e.to_dict() for e in entries])
    return (True, tuple(n for n in new if n not in old),
            tuple(n for n in new if n in old and old[n] != new[n]),
            tuple(n for n in old if n not in new))
