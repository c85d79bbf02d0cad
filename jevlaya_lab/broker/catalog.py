"""The model catalog: which models the broker knows before the user adds any.

Sources, in order: a remote catalog URL (``catalog=`` or ``$JEVLAYA_CATALOG_URL``) when it is
reachable, refreshing the database's catalog entries on every open; when it is not reachable a
warning is logged and the database's entries stand; an empty database is filled from the copy
shipped in this package (``catalog.json``). ``catalog=[]`` (or any list) gives the entries
directly, which tests use for a pool of exactly their own models.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from jevlaya_lab.broker.config import LLMConfig
from jevlaya_lab.broker.errors import CatalogError
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


def fill_store(store: Store, source: CatalogSource = None) -> None:
    """Bring the store's catalog entries up to date before the pool is built (blocking IO)."""
    if source is not None and not isinstance(source, (str, os.PathLike)):
        store.replace_catalog([LLMConfig.coerce(m).to_dict() for m in source])
        return
    url = os.fspath(source) if source is not None else os.environ.get(CATALOG_URL_ENV)
    entries: list[LLMConfig] | None = None
    if url and url.startswith(("http://", "https://")):
        entries = fetch_remote(url)
    elif url:
        path = Path(url).expanduser()
        if not path.is_file():
            raise CatalogError(f"catalog={url!r}: no such file; give a catalog .json path, an "
                               "http(s) URL, or a list of model entries")
        entries = parse_catalog(json.loads(path.read_text("utf-8")), url)
    if entries is not None:
        store.replace_catalog([e.to_dict() for e in entries])
    elif not store.catalog_filled():
        store.replace_catalog([e.to_dict() for e in packaged_catalog()])
