"""One llama.cpp context that decodes several answers at once: continuous batching on the CPU.

Each step reads every weight once, whether it produces one token or four, so concurrent answers
share one context with one sequence each, and every step puts the next token of every running
answer into a single ``llama_decode`` batch. That pays where a step is bound by memory bandwidth;
with the portable AVX2 build on this machine's cores one thread is bound by arithmetic instead
(a step of two answers costs 2.7-4.3x a step of one), so a model runs three engines, one per
answer of a three-lane race (``llama_model.default_engines``), and batching serves the callers
beyond them. A new answer's prompt is read in the same steps (in pieces of
at most ``n_batch`` tokens), so a long prompt does not freeze the answers already streaming.

The engine thread only decodes and samples; it hands token ids to each caller's queue, and the
caller's own thread turns them into text and runs its callback. A slow or failing callback
(a client that stops reading, a fault profile's delay) therefore never holds up the others.

Admission is first come, first served. An answer is admitted when a sequence is free and the
context has room for its whole prompt plus its token budget (the room is reserved), so a step
can never run out of cache; callers beyond that wait in order (``waiting`` counts them).
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

# Sampling below this temperature is greedy, as in the transformers backend (decoding.GREEDY_BELOW).
GREEDY_BELOW = 1e-4
_RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's "pick a seed from entropy"


@dataclass
class Job:
    """One answer being generated: its prompt, budget and sampling, and where tokens go."""

    ids: list[int]
    budget: int
    temperature: float
    top_p: float
    seed: int | None
    # ("token", int), ("end", finish reason) or ("error", exception), read by the generating call
    out: queue.SimpleQueue[tuple[str, Any]] = field(default_factory=queue.SimpleQueue)
    cancelled: bool = False
    seq: int = -1
    fed: int = 0        # prompt tokens already in the cache
    produced: int = 0   # tokens sampled
    sampler: Any = None  # a llama_cpp sampler chain (a ctypes pointer; the binding ships no types)
    last: int = -1      # the token to feed next


def seed32(seed: int) -> int:
    """Fold any seed the API accepts (-2**63 .. 2**64-1) into llama.cpp's 32 bits, avoiding the
    one value that means "random"."""
    return seed % _RANDOM_SEED


class Engine:
    """Owns a ``llama_context`` with ``parallel`` sequences and the thread that decodes them."""

    # model and vocab are llama_cpp ctypes pointers: the binding ships no types, so Any
    def __init__(self, model: Any, vocab: Any, *, n_ctx: int, parallel: int, threads: int,
                 n_batch: int = 256) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = parallel
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True  # sequences share one cache pool: a lone long answer may use all of it
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            raise MemoryError(f"llama.cpp could not create a context of {n_ctx} tokens")
        self._vocab = vocab
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._free_seqs = list(range(parallel))
        self._reserved = 0
        self._pending: deque[Job] = deque()
        self._running: list[Job] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="jevlaya-llama-engine", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Answers queued for a free sequence or for room in the cache."""
        with self._cond:
            return len(self._pending)

    @property
    def load(self) -> int:
        """Answers running or queued here (where a new answer goes when there are several engines)."""
        with self._cond:
            return len(self._pending) + len(self._running)

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("this llama.cpp model was closed")
            self._pending.append(job)
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """Stop generating ``job`` (its caller left); its sequence is freed at the next step."""
        with self._cond:
            job.cancelled = True
            if job in self._pending:
                self._pending.remove(job)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(10)
        if not self._thread.is_alive():
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)

    # -- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._drop_cancelled()
                self._admit()
                while not self._running and not self._closed:
                    self._cond.wait()
                    self._drop_cancelled()
                    self._admit()
                if self._closed:
                    for job in [*self._running, *self._pending]:
                        job.out.put(("error", RuntimeError("the llama.cpp model was closed")))
                    return
                running = list(self._running)
            try:
                self._step(running)
            except Exception as exc:  # a decode failure ends the answers in this step, not the engine
                with self._cond:
                    for job in running:
                        job.out.put(("error", exc))
                        self._release(job)

    def _admit(self) -> None:
        while self._pending and self._free_seqs:
            job = self._pending[0]
            need = len(job.ids) + job.budget
            if self._reserved + need > self.n_ctx and self._running:
                return  # wait for room; first come, first served, so nobody overtakes
            self._pending.popleft()
            job.seq = self._free_seqs.pop(0)
            self._reserved += need
            job.sampler = self._sampler(job)
            self._running.append(job)

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._running if j.cancelled]:
            self._release(job)

    def _release(self, job: Job) -> None:
        if job not in self._running:
            return
        self._running.remove(job)
        llama_cpp.llama_memory_seq_rm(self._mem, job.seq, -1, -1)
        if job.sampler is not None:
            llama_cpp.llama_sampler_free(job.sampler)
            job.sampler = None
        self._free_seqs.append(job.seq)
        self._reserved -= len(job.ids) + job.budget

    def _sampler(self, job: Job) -> Any:
        """Greedy at temperature ~0; else temperature, then nucleus (top_p) over the tempered
        distribution, then a draw seeded by ``seed`` (or entropy), as the transformers backend."""
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if job.temperature < GREEDY_BELOW:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(job.temperature))
        if job.top_p < 1.0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(job.top_p, 1))
        seed = _RANDOM_SEED if job.seed is None else seed32(job.seed)
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _step(self, running: list[Job]) -> None:
        """One ``llama_decode``: the next token of every answer past its prompt, plus as much
        of the waiting prompts as fits in the batch; then one sample per finished prompt."""
        batch = self._batch
        n = 0
        outputs: list[tuple[Job, int]] = []
        for job in running:  # decoding answers first: one token each
            if job.fed == len(job.ids) and n < self.n_batch:
                n = self._put(batch, n, job.last, job.fed + job.produced - 1, job.seq, True)
                outputs.append((job, n - 1))
        for job in running:  # then prompt pieces
            while job.fed < len(job.ids) and n < self.n_batch:
                last = job.fed == len(job.ids) - 1
                n = self._put(batch, n, job.ids[job.fed], job.fed, job.seq, last)
                job.fed += 1
                if last:
                    outputs.append((job, n - 1))
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")
        with self._cond:
            for job, index in outputs:
                if job.cancelled:
                    continue
                token = llama_cpp.llama_sampler_sample(job.sampler, self._ctx, index)
                job.produced += 1
                job.last = token
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    job.out.put(("end", "stop"))
                    self._release(job)
                    continue
                job.out.put(("token", token))
                if job.produced >= job.budget:
                    job.out.put(("end", "length"))
                    self._release(job)

    @staticmethod
    def _put(batch: Any, n: int, token: int, pos: int, seq: int, logits: bool) -> int:  # a ctypes llama_batch
        batch.token[n] = token
        batch.pos[n] = pos
        batch.n_seq_id[n] = 1
        batch.seq_id[n][0] = seq
        batch.logits[n] = logits
        return n + 1


def _silence(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp's loader writes hundreds of lines to stderr; errors surface as exceptions."""


_LOG_CALLBACK = llama_cpp.llama_log_callback(_silence)  # kept alive for as long as llama.cpp holds it
llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
