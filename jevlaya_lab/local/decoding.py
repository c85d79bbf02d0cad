"""Token-by-token pieces: incremental detokenisation with stop sequences, and sampling.

``TextStream`` turns generated token ids into text pieces as they arrive. It never hands out a
partial UTF-8 character (byte-level tokenizers split them across tokens) nor text that could
still turn out to be the start of a stop sequence, so a streamed answer is always exactly the
final answer cut into pieces. torch is imported only by ``sample_next``, so the llama.cpp
backend streams text through ``TextStream`` without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class Detokenizer(Protocol):
    """What ``TextStream`` needs of a tokenizer: a transformers tokenizer is one, and so is the
    llama.cpp backend's piece decoder."""

    def decode(self, ids: list[int], *, skip_special_tokens: bool,
               clean_up_tokenization_spaces: bool) -> str: ...


class TextStream:
    """Accumulates token ids and yields the newly safe text after each one."""

    def __init__(self, tokenizer: Detokenizer, stop: list[str]) -> None:
        self._tokenizer = tokenizer
        self._stop = stop
        self._ids: list[int] = []
        self._text = ""       # decoded text of all ids, minus a trailing partial character
        self._given = 0       # characters of _text already handed out
        self.stopped = False  # a stop sequence was found; the text ends before it

    @property
    def text(self) -> str:
        """The answer so far as it will be final (stop sequence excluded)."""
        return self._text if not self.stopped else self._text[: self._given]

    def push(self, token_id: int) -> str:
        """Add one token; return the text that became safe to show (may be empty)."""
        self._ids.append(token_id)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True,
                                      clean_up_tokenization_spaces=False)
        if text.endswith("\ufffd"):  # the token ends mid-character: wait for the rest
            return ""
        self._text = text
        hit = self._first_stop()
        if hit is not None:
            piece = text[self._given:hit]
            self._given = hit
            self.stopped = True
            return piece
        safe_end = len(text) - self._held_back(text)
        piece = text[self._given:safe_end] if safe_end > self._given else ""
        self._given = max(self._given, safe_end)
        return piece

    def finish(self) -> str:
        """Return what was held back (a stop-sequence prefix that never completed)."""
        if self.stopped:
            return ""
        piece = self._text[self._given:]
        self._given = len(self._text)
        return piece

    def _first_stop(self) -> int | None:
        longest = max((len(s) for s in self._stop), default=0)
        start = max(0, self._given - longest)
        hits = [i for i in (self._text.find(s, start) for s in self._stop) if i >= 0]
        return min(hits) if hits else None

    def _held_back(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of a stop sequence."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best


# Below this, dividing logits by the temperature can overflow to inf; sampling is greedy anyway.
GREEDY_BELOW = 1e-4


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator | None) -> int:
    """Pick the next token from 1-D logits: greedy at temperature ~0, else nucleus sampling."""
    import torch

    if temperature < GREEDY_BELOW:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop = before >= top_p  # keep the smallest set whose mass reaches top_p,
        drop[0] = False  # and always the most likely token (a top_p of 1e-100 is greedy, not empty)
        sorted_probs[drop] = 0.0
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return int(order[choice])
    return int(torch.multinomial(probs, 1, generator=generator))
