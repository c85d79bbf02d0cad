"""``Generation``: the result of one ``ChatModel.generate`` call (no torch needed to use it)."""

from __future__ import annotations

from dataclasses import dataclass


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
