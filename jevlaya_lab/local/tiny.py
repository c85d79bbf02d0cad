"""``tiny_chat_model``: a real GPT-2-style transformers model built from a config in milliseconds.

For tests and demos that need many distinct, fast, deterministic chat models. The tokenizer is
byte-level (any text in, 256 byte tokens plus three ChatML specials); the weights are random but
seeded, so a seed always gives the same model. Answers are restricted to lowercase letters and
spaces and never start with a space, so every answer has at least one visible token; the model
never chooses to end on its own, so an answer is ``max_tokens`` long (default 16,
``finish_reason="length"``) unless a stop sequence ends it first.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from jevlaya_lab.local.chat_model import ChatModel

TINY_MAX_TOKENS = 16
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer with one token per byte and ChatML specials; it can encode any text."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    # transformers declares no types on this constructor (it is its TokenizersBackend)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, bos_token="<|im_start|>", eos_token="<|im_end|>",
        pad_token="<|endoftext|>")
    tokenizer.chat_template = _CHATML
    return tokenizer


class _LettersAndSpaces:
    """Logits processor: only lowercase letters, plus spaces after the first token."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        vocab = len(tokenizer)
        letters = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(c)[0]) for c in string.ascii_lowercase]
        space = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(" ")[0])
        self._first = torch.full((vocab,), float("-inf"))
        self._first[letters] = 0.0
        self._later = self._first.clone()
        self._later[space] = 0.0

    def __call__(self, step: int, logits: torch.Tensor) -> torch.Tensor:
        return logits + (self._first if step == 0 else self._later)


def tiny_chat_model(seed: int = 0, name: str | None = None, *, hidden_size: int = 32,
                    layers: int = 2, max_tokens: int = TINY_MAX_TOKENS) -> ChatModel:
    """Build a tiny seeded chat model named ``name`` (default ``"tiny-<seed>"``)."""
    tokenizer = byte_level_tokenizer()
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=4096, n_embd=hidden_size,
                        n_layer=layers, n_head=2, initializer_range=0.5,
                        bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    # Large random weights give varied, prompt-dependent letters instead of one repeated letter.
    with torch.random.fork_rng(devices=[]):  # seeded weights without touching the caller's RNG
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    return ChatModel(model, tokenizer, name=name or f"tiny-{seed}", default_max_tokens=max_tokens,
                     logits_processor=_LettersAndSpaces(tokenizer))
