"""``LlamaChatModel``: a GGUF chat model decoded by llama.cpp, with the ``ChatModel`` interface.

The quantised weights are read as they are (no de-quantised copy), so a step costs one pass over
~100-150 MB instead of ~270 MB of bfloat16, and llama.cpp's kernels do it in a few threads.
``quantization=`` may name a type to re-quantise the file to first, once, into the cache
(:mod:`jevlaya_lab.local.requantise`); ``smollm2()`` reads SmolLM2's Q4_1 file as Q8_0, whose
prompt kernels prefill 1.6x faster. The prompt is the chat template the GGUF declares
(``tokenizer.chat_template``), rendered with the same sandboxed Jinja as transformers'
``apply_chat_template``; special tokens written by the template are parsed as tokens.

Requests have the same meaning as with :class:`jevlaya_lab.local.chat_model.ChatModel`:
``max_tokens``, greedy at ``temperature=0``, otherwise temperature then nucleus ``top_p`` with a
draw seeded by ``seed`` (the same seed gives the same answer; the sequence differs from the
transformers backend's, whose random generator is torch's), stop sequences that are never
streamed, an ``on_token`` callback whose exception stops the answer, and token usage.
Concurrent calls go to the least busy of the model's engines (each a
:class:`jevlaya_lab.local.llama_engine.Engine` decoding its answers together; :func:`default_engines`:
three); the ``parallel`` sequences are split among them, and further callers wait in arrival
order.

Importing this module needs ``llama-cpp-python`` but not torch, so a server of GGUF models
stays small (see ``bench/local_backends.py`` for memory and speed).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import llama_cpp

from jevlaya_lab._cache_dir import models_dir
from jevlaya_lab.local import validation
from jevlaya_lab.local.decoding import TextStream
from jevlaya_lab.local.errors import ChatRequestError, LocalModelError
from jevlaya_lab.local.generation import Generation
from jevlaya_lab.local.llama_engine import Engine, Job
from jevlaya_lab.local.requantise import SOURCE, requantised

DEFAULT_CONTEXT = 1536   # tokens of cache per engine, shared by its running answers (~35 MB for SmolLM2):
# three engines of 1536 keep SmolLM2 as Q8_0 at 331 MB resident where three of 2048 took 364
# (the served model's budget is 350), and a 135M model's answers rarely need more; a longer
# prompt gets a 400 naming the limit
DEFAULT_PARALLEL = 4     # answers decoded at once over all engines: three race lanes and one more caller
PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
_backend_ready = False


def llama_cpp_version() -> str:
    return str(getattr(llama_cpp, "__version__", "?"))


def default_threads() -> int:
    """Decode and prefill threads per engine: 1, unless ``JEVLAYA_LLAMA_THREADS`` says otherwise.

    ggml's worker threads meet at a spinning barrier after every operation, so when another
    process holds a core the step waits for a thread that is not running: on this 2-core
    machine under load, 2 threads decoded SmolLM2 at 0.4 tokens/s where 1 thread made 6-40.
    Prefill is no exception: 2 threads read the benchmark's 109-token prompt (Q8_0) in 152 ms
    against 282 ms for one on an idle machine, but with a busy loop on the other core in 798 ms
    against 501 (same priority) and 2969 against 281 (the reader niced); the prefill-only
    ``n_threads_batch`` is therefore 1 as well (``llama_decode`` of the prompt, medians of 5). One
    thread decodes SmolLM2 at 80-100 tokens/s here (``bench/local_backends.py``), 30-37 % of the
    memory-bandwidth bound: compute-bound (the portable x86-64-v3 build has no AVX-512), which
    is why concurrent answers get engines of their own (:func:`default_engines`).
    """
    return _count_from_env("JEVLAYA_LLAMA_THREADS") or 1


def default_engines() -> int:
    """Engines (a llama.cpp context and its decode thread each) per model: 3, unless
    ``JEVLAYA_LLAMA_ENGINES`` says otherwise (never more than the model's ``parallel``).

    One single-thread engine is compute-bound, and a step of two answers costs more than two
    steps of one: 19.5 ms against 7.2 for the Q4_1 file, 28.6 against 6.6 for Q8_0 (one
    ``llama_decode``, one thread, medians of 35; the two-token products take ggml's matrix path,
    made for long prompts). Three answers at once reached 0.82-1.02x one
    answer's tokens/s on two engines (two answers batched in one), 1.94-2.02x on three engines
    of one answer each (the operating system shares the 2 cores among the three threads, with
    no barrier between them); four engines of 1024 tokens: 1.83-1.86x. Each engine holds its own
    cache (``context_length`` tokens) over the one copy of the weights: 315, 331 and 321 MB
    resident. Measured in-process (``LlamaChatModel.generate`` from three threads, the
    benchmark's prompt, 128 tokens, this 2-core machine at load ~1); the served figures are in
    ``bench/local_backends.py``.
    """
    return _count_from_env("JEVLAYA_LLAMA_ENGINES") or 3


def _count_from_env(name: str) -> int | None:
    """The whole number >= 1 that the environment variable ``name`` holds, else None."""
    given = os.environ.get(name, "")
    return int(given) if given.isdigit() and int(given) > 0 else None


class LlamaChatModel:
    """A GGUF chat model served in-process by llama.cpp; ``generate`` is thread-safe."""

    backend = "llama.cpp"

    def __init__(self, gguf: str | os.PathLike[str], *, name: str, default_max_tokens: int = 256,
                 context_length: int = DEFAULT_CONTEXT, parallel: int = DEFAULT_PARALLEL,
                 threads: int | None = None, engines: int | None = None, quantization: str = SOURCE) -> None:
        global _backend_ready
        if not isinstance(name, str) or not name.strip():
            raise ChatRequestError("name", name, "give the model a non-empty name")
        for field_name, value in (("parallel", parallel), ("context_length", context_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ChatRequestError(field_name, value, "use a whole number >= 1")
        for field_name, given in (("threads", threads), ("engines", engines)):
            if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
                raise ChatRequestError(field_name, given, "use a whole number >= 1, or None for the default")
        path = Path(gguf)
        if not path.is_file():
            raise LocalModelError(f"gguf={str(path)!r} is not a file; point at a .gguf model file")
        self.name = name
        self.path = path
        # the file llama.cpp reads: ``gguf`` itself, or its copy re-quantised to ``quantization``
        self.weights = requantised(path, quantization, models_dir())
        self.quantization = quantization
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True
        params = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(str(self.weights).encode(), params)
        if not self._model:
            raise LocalModelError(f"llama.cpp could not load {self.weights}; is it a GGUF file of a supported "
                                  "architecture? (llama-cpp-python " + llama_cpp_version() + ")")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        trained = int(llama_cpp.llama_model_n_ctx_train(self._model)) or context_length
        self.context_length = min(context_length, trained)
        self.threads = threads or default_threads()
        self.parallel = parallel
        self.default_max_tokens = validation.check_max_tokens(default_max_tokens, 1, self.max_answer_tokens)
        self.chat_template = self._meta("tokenizer.chat_template") or PLAIN_CHAT_TEMPLATE
        self._render = _compile_template(self.chat_template)
        self._bos = self._special_text(llama_cpp.llama_vocab_bos(self._vocab))
        self._eos = self._special_text(llama_cpp.llama_vocab_eos(self._vocab))
        self._pieces: dict[int, bytes] = {}
        count = min(engines or default_engines(), parallel)  # never an engine without a sequence
        self._engines = [Engine(self._model, self._vocab, n_ctx=self.context_length,
                                parallel=parallel // count + (i < parallel % count), threads=self.threads)
                         for i in range(count)]

    def __repr__(self) -> str:
        return (f"LlamaChatModel(name={self.name!r}, gguf={self.path.name!r}, quantization={self.quantization!r}, "
                f"context={self.context_length}, parallel={self.parallel}, threads={self.threads}, "
                f"engines={len(self._engines)})")

    @property
    def max_answer_tokens(self) -> int:
        """The largest ``max_tokens`` accepted: the context after a one-token prompt."""
        return self.context_length - 1

    @property
    def waiting(self) -> int:
        """Callers queued for a free sequence."""
        return sum(engine.waiting for engine in self._engines)

    def close(self) -> None:
        """Stop the decode thread and free the context and weights (idempotent)."""
        if self._model:
            for engine in self._engines:
                engine.close()
            llama_cpp.llama_model_free(self._model)
            self._model = None

    # -- prompt ---------------------------------------------------------------------------

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt text: the GGUF's chat template applied to the messages."""
        return self._render(messages=validation.check_messages(messages), add_generation_prompt=True,
                            bos_token=self._bos, eos_token=self._eos)

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Token ids of the rendered messages; ``ChatRequestError`` when no room is left to answer."""
        data = self.render(messages).encode("utf-8")
        limit = self.context_length - 1
        # at most one token per byte plus a few: a buffer of that size always suffices
        capacity = min(len(data) + 8, limit + 1)
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, False, True)
        if n < 0 or n > limit:
            self._too_long(str(-n if n < 0 else n))
        return list(tokens[:n])

    def _too_long(self, tokens: str) -> NoReturn:
        raise validation.prompt_too_long(self.name, self.context_length, tokens)

    # -- generation -----------------------------------------------------------------------

    def generate(self, messages: Sequence[dict[str, Any]], *, max_tokens: int | None = None,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                 stop: str | list[str] | None = None,
                 on_token: Callable[[str], None] | None = None) -> Generation:
        """Answer ``messages``; ``on_token(piece)`` gets each new piece of text as it is decoded."""
        max_tokens = validation.check_max_tokens(max_tokens, self.default_max_tokens, self.max_answer_tokens)
        temperature = validation.check_temperature(temperature)
        top_p = validation.check_top_p(top_p)
        seed = validation.check_seed(seed)
        stops = validation.check_stop(stop)
        ids = self.prompt_ids(messages)
        job = Job(ids, min(max_tokens, self.context_length - len(ids)), temperature, top_p, seed)
        stream = TextStream(_Detokenizer(self), stops)
        started = time.perf_counter()
        first_token_s = None
        produced = 0
        finish = "length"
        engine = min(self._engines, key=lambda e: e.load)  # the least busy; ties to the first
        engine.submit(job)
        try:
            while True:
                kind, value = job.out.get()
                if first_token_s is None:
                    first_token_s = time.perf_counter() - started
                if kind == "error":
                    raise value
                if kind == "end":
                    finish = value
                    break
                produced += 1
                piece = stream.push(value)
                if piece and on_token is not None:
                    on_token(piece)
                if stream.stopped:
                    finish = "stop"
                    break
        finally:
            engine.cancel(job)  # a no-op once it ended; frees the sequence otherwise
        tail = stream.finish()
        if tail and on_token is not None:
            on_token(tail)
        return Generation(stream.text, finish, len(ids), produced, first_token_s,
                          time.perf_counter() - started)

    # -- vocabulary -----------------------------------------------------------------------

    def piece(self, token: int) -> bytes:
        """The bytes of one token as it appears in an answer (control tokens are empty)."""
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._token_bytes(token, special=False)
        return cached

    def _token_bytes(self, token: int, *, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def _special_text(self, token: int) -> str:
        return self._token_bytes(token, special=True).decode("utf-8", "replace") if token >= 0 else ""

    def _meta(self, key: str) -> str | None:
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", "replace")
            size = n + 1


class _Detokenizer:
    """The ``decode`` that ``TextStream`` needs, from llama.cpp's token pieces."""

    def __init__(self, model: LlamaChatModel) -> None:
        self._model = model

    def decode(self, ids: list[int], **_: Any) -> str:
        return b"".join(self._model.piece(i) for i in ids).decode("utf-8", "replace")


def _compile_template(source: str) -> Callable[..., str]:
    """A chat template compiled as transformers does: sandboxed, ``trim_blocks``/``lstrip_blocks``,
    ``raise_exception`` available, so GGUF templates written for ``apply_chat_template`` work."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> NoReturn:
        raise ChatRequestError("messages", "<chat template>", f"the model's chat template refused them: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        template = env.from_string(source)
    except Exception as exc:
        raise LocalModelError(f"the GGUF's chat template does not compile ({exc})") from exc
    return template.render
