"""``Generation``: the result of one ``generate`` call, and ``ChatBackend``: what a chat model offers.

No torch and no llama.cpp are needed to import this module."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Generation:
    """One answer: its text, why it ended ("stop" or "length") and token counts.

    ``completion_tokens`` counts generated tokens, not counting the end-of-sequence token;
    ``first_token_s`` and ``elapsed_s`` time the call from the moment the model lock was taken.
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    first_token_s: float | None = None
    elapsed_s: float = 0.0


class ChatBackend(Protocol):
    """What the server and the Broker need from a chat model: ``ChatModel`` (transformers) and
    ``LlamaChatModel`` (llama.cpp) both are one."""

    name: str
    default_max_tokens: int
    context_length: int

    @property
    def max_answer_tokens(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]: ...

    def generate(self, messages: Sequence[dict[str, Any]], *, max_tokens: int | None = None,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 stop: str | list[str] | None = None,
                 on_token: Callable[[str], None] | None = None) -> Generation: ...
