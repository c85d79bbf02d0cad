"""``ChatModel``: a transformers causal LM that answers chat messages token by token.

The decode loop is our own (one forward per token over a ``DynamicCache``, ``logits_to_keep=1``,
``torch.inference_mode``) rather than ``model.generate``: it calls ``on_token`` for each decoded
piece as soon as it exists, with no streamer thread or polling, and it is about as fast as
``generate`` or faster on small CPU models (see ``bench/local.py``). Generation is serialised per
model by a ``FairLock``, so concurrent callers queue first come, first served.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import torch
from transformers import DynamicCache

from jevlaya_lab.local import validation
from jevlaya_lab.local.decoding import GREEDY_BELOW, TextStream, sample_next
from jevlaya_lab.local.errors import ChatRequestError
from jevlaya_lab.local.generation import Generation
from jevlaya_lab.local.queueing import FairLock

# Used when a tokenizer ships no chat template (base models): one "role: content" line per turn.
PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

LogitsProcessor = Callable[[int, torch.Tensor], torch.Tensor]
# A prompt is first counted in pieces of this many characters, so that a huge prompt costs the
# tokenizer's memory for one piece, not for the whole text (a fast tokenizer needs ~200 bytes per
# character: an 8 MB prompt took 2 GB) and is rejected after the first pieces that overflow.
COUNT_CHUNK_CHARS = 16_384
# Cutting text into pieces can change the tokens at each cut by a few; the count allows this
# much per cut before calling a prompt too long, and the exact count decides the rest.
CUT_SLACK_TOKENS = 4


class ChatModel:
    """A chat model served in-process; ``generate`` is thread-safe and fair."""

    backend = "transformers"

    # tokenizer: a transformers tokenizer, Any because transformers types its methods' results
    # loosely (apply_chat_template returns str, ids or a BatchEncoding by its arguments)
    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, name: str,
                 default_max_tokens: int = 256,
                 logits_processor: LogitsProcessor | None = None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ChatRequestError("name", name, "give the model a non-empty name")
        self.name = name
        self.model: Any = model.eval()  # a transformers causal LM (nn.Module types its attributes loosely)
        self.tokenizer = tokenizer
        self._logits_processor = logits_processor
        self._lock = FairLock()
        self._template = getattr(tokenizer, "chat_template", None) or PLAIN_CHAT_TEMPLATE
        config = model.config
        self.context_length = int(getattr(config, "max_position_embeddings", None)
                                  or getattr(config, "n_positions", None) or 2048)
        self.default_max_tokens = validation.check_max_tokens(default_max_tokens, 1, self.max_answer_tokens)
        self._eos = _eos_ids(model, tokenizer)
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" in params

    def __repr__(self) -> str:
        return f"ChatModel(name={self.name!r}, dtype={self.model.dtype}, context={self.context_length})"

    @property
    def max_answer_tokens(self) -> int:
        """The largest ``max_tokens`` accepted: the context after a one-token prompt."""
        return self.context_length - 1

    @property
    def waiting(self) -> int:
        """Callers queued behind the one generating now."""
        return self._lock.waiting

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Token ids of the messages rendered with the chat template, ready for the answer.

        Raises ``ChatRequestError`` if the messages are malformed or leave no room to answer.
        Memory stays bounded whatever the prompt's size: the text is counted piece by piece
        first (see ``COUNT_CHUNK_CHARS``), and only a prompt that may fit is tokenized whole.
        """
        text = self.tokenizer.apply_chat_template(validation.check_messages(messages), chat_template=self._template,
                                                  tokenize=False, add_generation_prompt=True)
        limit = self.context_length - 1
        ids: list[int] = []
        counted = 0
        for cuts, start in enumerate(range(0, len(text), COUNT_CHUNK_CHARS)):
            ids = self._encode(text[start:start + COUNT_CHUNK_CHARS])
            counted += len(ids)
            if counted - cuts * CUT_SLACK_TOKENS > limit:
                self._too_long(f"more than {limit}")
        if len(text) > COUNT_CHUNK_CHARS:  # it may fit: the exact count of the whole text decides
            ids = self._encode(text)
        if len(ids) > limit:
            self._too_long(str(len(ids)))
        return ids

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _too_long(self, tokens: str) -> NoReturn:
        raise validation.prompt_too_long(self.name, self.context_length, tokens)

    def generate(self, messages: Sequence[dict[str, Any]], *, max_tokens: int | None = None,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 stop: str | list[str] | None = None,
                 on_token: Callable[[str], None] | None = None) -> Generation:
        """Answer ``messages``; ``on_token(piece)`` gets each new piece of text as it is decoded.

        ``temperature=0`` is greedy; otherwise nucleus sampling from a generator seeded with
        ``seed`` (reproducible) or fresh entropy. ``stop`` ends the answer before the first stop
        sequence, which is never streamed. An exception raised by ``on_token`` stops generation
        and propagates (the server uses this when a client disconnects).
        """
        max_tokens = validation.check_max_tokens(max_tokens, self.default_max_tokens, self.max_answer_tokens)
        temperature = validation.check_temperature(temperature)
        top_p = validation.check_top_p(top_p)
        seed = validation.check_seed(seed)
        stops = validation.check_stop(stop)
        ids = self.prompt_ids(messages)
        budget = min(max_tokens, self.context_length - len(ids))
        generator = None
        if temperature >= GREEDY_BELOW:
            generator = torch.Generator()
            generator.manual_seed(seed) if seed is not None else generator.seed()
        with self._lock:
            return self._decode(ids, budget, temperature, top_p, generator, TextStream(self.tokenizer, stops),
                                on_token)

    @torch.inference_mode()
    def _decode(self, ids: list[int], budget: int, temperature: float, top_p: float,
                generator: torch.Generator | None, stream: TextStream,
                on_token: Callable[[str], None] | None) -> Generation:
        started = time.perf_counter()
        first_token_s = None
        cache = DynamicCache(config=self.model.config)
        kwargs: dict[str, Any] = {self._cache_kw: cache, "use_cache": True}
        if self._keep_kw:
            kwargs["logits_to_keep"] = 1
        inputs = torch.tensor([ids], dtype=torch.long)
        produced = 0
        finish = "length"
        for step in range(budget):
            logits = self.model(input_ids=inputs, **kwargs).logits[0, -1]
            if self._logits_processor is not None:
                logits = self._logits_processor(step, logits)
            token = sample_next(logits, temperature, top_p, generator)
            if first_token_s is None:
                first_token_s = time.perf_counter() - started
            if token in self._eos:
                finish = "stop"
                break
            produced += 1
            piece = stream.push(token)
            if piece and on_token is not None:
                on_token(piece)
            if stream.stopped:
                finish = "stop"
                break
            inputs = torch.tensor([[token]], dtype=torch.long)
        tail = stream.finish()
        if tail and on_token is not None:
            on_token(tail)
        return Generation(stream.text, finish, len(ids), produced, first_token_s,
                          time.perf_counter() - started)


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> frozenset[int]:
    found: set[int] = set()
    sources = (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
               getattr(model.config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None))
    for value in sources:
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, (list, tuple)):
            found.update(v for v in value if isinstance(v, int))
    return frozenset(found)
