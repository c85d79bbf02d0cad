"""SmolLM2 on llama.cpp vs transformers vs plain ``generate``: speed, first token, memory, concurrency.

Run: ``.venv/bin/python bench/local_backends.py`` (or ``bench/local.py --only-backends``). Prints a
table and writes ``bench/results/local_backends.json``.

Every contender runs in its own process, started fresh, so its peak resident memory (``VmHWM``)
is its own; the servers are driven over HTTP by this process, with streaming on, as a Broker
does. The same prompt (a user turn of about 100 tokens once templated) and up to 128 new tokens,
greedy, for all:

- ``llama.cpp``: ``serve`` of ``smollm2(backend="llama.cpp")`` (one model, its default engines:
  three single-thread llama.cpp contexts, 4 sequences between them, over the Q8_0 copy of the
  weights; ``JEVLAYA_LLAMA_QUANTIZATION=source`` and ``JEVLAYA_LLAMA_ENGINES=2`` give the Q4_1
  file on two engines, the configuration before, then with 2048 tokens per engine);
- ``transformers``: ``serve`` of ``smollm2(backend="transformers")`` (today's backend before
  llama.cpp: our decode loop over the de-quantised bfloat16/float32 model);
- ``generate``: plain transformers ``model.generate`` on the same de-quantised model, in-process,
  no server (the reference a user would write).

Decode tokens/s is (tokens - 1) over the time from the first to the last token; TTFT is from
sending the request to the first content. Concurrency: three streams at once against one
stream, aggregate tokens/s, for one llama.cpp instance decoding the three in one batch, and
for one small llama.cpp instance per lane (``parallel=1``, one thread each). Rounds interleave
the contenders, so a busy machine hurts all alike; the load average is recorded.

The memory-bandwidth bound: decoding one token reads every weight once, so tokens/s can not
exceed (memory bandwidth) / (bytes of weights); the bandwidth is measured here with a large
``numpy`` copy (read + write), which is what one core sustains, not the socket's peak.

Measured (``bench/local.py --only-backends``, this 2-core AMD EPYC, portable x86-64-v3 build;
109-token prompt, 128 new tokens, 3 rounds, medians), the three runs on the same day. "Busy" is
with ``python3 -c "while True: pass"`` running on the other core for the whole run:

=========================  ========  =======  ======  ======  =======  ============
llama.cpp configuration    machine   decode   TTFT    TF      RSS MB   3 streams /
                                     tok/s    ms      TTFT ms          one stream
=========================  ========  =======  ======  ======  =======  ============
Q4_1 file, 2 engines       idle        99.6    571     107      270    1.11
Q8_0 copy, 3 engines       idle       103.1    296      99      332    1.77
Q8_0 copy, 3 engines       busy        89.7    316     328      332    1.46
=========================  ========  =======  ======  ======  =======  ============

(TF: the transformers server's TTFT in the same run.) With the defaults, idle: decode 4.20x
plain ``generate`` (target >= 3), RSS 332 MB (target <= 350), three streams 1.77x one (target
>= 1.5; per-lane instances 1.71x at 597 MB), TTFT 2.98x the transformers server's (target
<= 1/3: **not met**; it was 5.36x). Busy: the transformers server collapses (7.1 tok/s, two
torch threads wait for each other) and llama.cpp's TTFT is 0.96x its; three streams 1.46x, as
three engine threads share the one free core and a half. The earlier two-engine figures (1.66x)
were taken on a host where one thread decoded 48 tok/s. (The Q4_1 file on two engines, busy and
with other users' jobs too, load 2.8 at the start: 48.2 tok/s, TTFT 1103 ms, three streams 0.97x;
the transformers server 0.7 tok/s, 5930 ms.) Today, at 80-100 tok/s, a two-answer step costs
2.7x a one-answer step (4.3x with Q8_0), so batching two answers in one engine loses.

Why TTFT stays above 1/3 of torch's: prefill is compute-bound, torch runs it as bfloat16 matrix
products on two threads (this CPU has AVX-512 BF16), and llama.cpp here on one thread. Measured with
``llama_decode`` of the whole prompt, one thread, medians of 5 (Q4_1 / Q8_0 / Q4_0 / IQ4_NL):
x86-64-v3 build 511-541 / 282-342 / 287 / 262 ms; a build with AVX-512 (F, VBMI, VNNI, BF16)
663 / 261 / 150 ms. The faster 4-bit types re-quantise a second time (77-79 % top-1 agreement
with Q4_1, against 98.4 % for Q8_0), and ``n_threads_batch=2`` halves prefill idle (Q8_0: 152 against 282 ms)
but loses with a busy loop on the other core (798 against 501 ms at the same priority, 2969
against 281 ms niced), so neither is used; see
:mod:`jevlaya_lab.local.requantise`.

The memory-bandwidth bound: 24.7-35.6 GB/s over 145 MB of Q8_0 weights is 170-246 tok/s; one
stream reaches 41-61 %.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).resolve().parent / "results" / "local_backends.json"
NEW_TOKENS = 128
PROMPT = [{"role": "user", "content": (
    "You are helping a small town library plan its autumn reading festival. The festival runs "
    "for three days, has a budget for two guest authors, and must include events for children, "
    "teenagers and adults. Volunteers can staff at most four rooms at once. Write a detailed "
    "plan for the first day, hour by hour, naming each event, its audience and its room, and "
    "explain why the order works.")}]


# -- the contenders, each run in a child process of this script ---------------------------------

def _serve_worker(kind: str) -> None:
    """Child: serve SmolLM2 the way ``kind`` says, print the base URL, stop when stdin closes."""
    from jevlaya_lab.local import serve, smollm2

    if kind == "llama.cpp":
        model = smollm2(backend="llama.cpp", max_tokens=NEW_TOKENS)
        models: Any = {name: model for name in ("a", "b", "c")}
    elif kind == "llama.cpp-per-lane":
        from jevlaya_lab.local.llama_model import LlamaChatModel
        from jevlaya_lab.local.loading import smollm2_gguf, smollm2_quantization

        models = {name: LlamaChatModel(smollm2_gguf(), name=name, default_max_tokens=NEW_TOKENS, parallel=1,
                                       threads=1, context_length=1024, quantization=smollm2_quantization())
                  for name in ("a", "b", "c")}
    else:
        import torch

        torch.set_num_threads(min(2, os.cpu_count() or 1))
        model = smollm2(backend="transformers", max_tokens=NEW_TOKENS)
        models = {name: model for name in ("a", "b", "c")}
    with serve(models) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


def _generate_worker() -> None:
    """Child: plain ``model.generate`` on the de-quantised SmolLM2; prints one JSON line per round."""
    import torch

    from jevlaya_lab.local import smollm2

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    model = smollm2(backend="transformers")
    ids = torch.tensor([model.prompt_ids(PROMPT)])
    with torch.inference_mode():
        model.model.generate(ids, max_new_tokens=4, do_sample=False)  # warm-up
        for _ in range(int(sys.argv[3])):
            started = time.perf_counter()
            model.model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
            ttft = time.perf_counter() - started
            started = time.perf_counter()
            out = model.model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
            total = time.perf_counter() - started
            tokens = out.shape[1] - ids.shape[1]
            print(json.dumps({"ttft_s": ttft, "tokens": int(tokens), "decode_tok_s": (tokens - 1) / (total - ttft),
                              "prompt_tokens": ids.shape[1]}), flush=True)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Served:
    """A server child process; ``stream(name)`` times one streamed answer."""

    def __init__(self, kind: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"}
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", kind], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            raise RuntimeError(f"the {kind} server did not start")
        self.client = httpx.Client(timeout=300)
        self.stream("a", 4)  # warm-up

    def stream(self, name: str, max_tokens: int = NEW_TOKENS) -> dict[str, Any]:
        body = {"model": name, "messages": PROMPT, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
        started = time.perf_counter()
        first = last = None
        usage: dict[str, Any] = {}
        with self.client.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                    last = time.perf_counter()
                    first = first or last
        assert first is not None and last is not None, "no content streamed"
        tokens = usage["completion_tokens"]
        return {"ttft_s": first - started, "tokens": tokens, "start": started, "end": last,
                "decode_tok_s": (tokens - 1) / (last - first) if last > first else float("nan"),
                "prompt_tokens": usage["prompt_tokens"]}

    def concurrent(self, names: list[str]) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        threads = [threading.Thread(target=lambda n=n: results.append(self.stream(n))) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        span = max(r["end"] for r in results) - min(r["start"] for r in results)
        return {"streams": len(names), "tokens": sum(r["tokens"] for r in results), "seconds": span,
                "aggregate_tok_s": sum(r["tokens"] for r in results) / span}

    def close(self) -> float:
        rss = peak_rss_mb(self.proc.pid)
        self.client.close()
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        return rss


def bandwidth_gb_s() -> float:
    """A single-threaded large copy: bytes read + written per second."""
    import numpy as np

    src = np.ones(64 * 1024 * 1024, dtype=np.float32)  # 256 MB
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.nbytes / best / 1e9


def prefill_gflop(prompt_tokens: int) -> float:
    """Multiply-adds of reading a prompt, x2: every weight but the token embeddings once per prompt
    token (the output layer runs for the last token only; attention adds under 2 % at 100 tokens)."""
    import gguf
    import numpy as np

    from jevlaya_lab.local.loading import smollm2_gguf

    reader = gguf.GGUFReader(str(smollm2_gguf()))
    weights = sum(int(np.prod(t.shape)) for t in reader.tensors if t.name != "token_embd.weight")
    return 2 * weights * prompt_tokens / 1e9


def matmul_gflops(prompt_tokens: int) -> dict[str, float]:
    """This CPU's best matrix throughput for the prefill's own shapes (``[tokens, 576] @ [576, 1536]``
    and back, SmolLM2's MLP), float32 through torch (oneDNN/MKL, what the transformers server runs)
    on 1 and 2 threads, and int8 (``torch._int_mm``, the densest arithmetic a CPU kernel could use
    for 8-bit weights) where torch offers it: best of 30, so an upper bound of what a prefill of
    these products can reach on this machine."""
    import torch

    out: dict[str, float] = {}
    threads = torch.get_num_threads()
    for n in (1, 2):
        torch.set_num_threads(n)
        a, b, c = torch.randn(prompt_tokens, 576), torch.randn(576, 1536), torch.randn(1536, 576)
        ai = torch.randint(-128, 127, (max(prompt_tokens, 17), 576), dtype=torch.int8)
        bi = torch.randint(-128, 127, (576, 1536), dtype=torch.int8)
        for name, fn, flop in (("float32", lambda: (a @ b) @ c, 4 * prompt_tokens * 576 * 1536),
                               ("int8", lambda: torch._int_mm(ai, bi), 2 * ai.shape[0] * 576 * 1536)):
            try:
                fn()
            except RuntimeError:
                continue
            best = float("inf")
            for _ in range(30):
                started = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - started)
            out[f"{name}_{n}_threads"] = flop / best / 1e9
    torch.set_num_threads(threads)
    return out


def main(rounds: int = 3) -> dict[str, Any]:
    from jevlaya_lab.local.loading import smollm2_gguf

    load = os.getloadavg()[0]
    servers = {kind: Served(kind) for kind in ("llama.cpp", "transformers", "llama.cpp-per-lane")}
    single: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ("llama.cpp", "transformers")}
    concurrency: dict[str, dict[str, list[dict[str, Any]]]] = {
        kind: {"one": [], "three": []} for kind in ("llama.cpp", "llama.cpp-per-lane")}
    for _ in range(rounds):
        for kind in single:
            single[kind].append(servers[kind].stream("a"))
        for kind in concurrency:
            concurrency[kind]["one"].append(servers[kind].concurrent(["a"]))
            concurrency[kind]["three"].append(servers[kind].concurrent(["a", "b", "c"]))
    rss = {kind: server.close() for kind, server in servers.items()}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, __file__, "generate", "-", str(rounds)],
                          capture_output=True, text=True, env=env, check=True)
    generate = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    generate_rss = float(done.stderr.strip().splitlines()[-1]) if done.stderr.strip() else float("nan")

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    table = {kind: {"decode_tok_s": med(rows, "decode_tok_s"), "ttft_ms": 1000 * med(rows, "ttft_s"),
                    "tokens": med(rows, "tokens"), "prompt_tokens": rows[0]["prompt_tokens"],
                    "peak_rss_mb": rss[kind]} for kind, rows in single.items()}
    table["generate"] = {"decode_tok_s": med(generate, "decode_tok_s"), "ttft_ms": 1000 * med(generate, "ttft_s"),
                         "tokens": med(generate, "tokens"), "prompt_tokens": generate[0]["prompt_tokens"],
                         "peak_rss_mb": generate_rss}
    conc = {kind: {"one_tok_s": med(rows["one"], "aggregate_tok_s"), "three_tok_s": med(rows["three"], "aggregate_tok_s"),
                   "peak_rss_mb": rss[kind]} for kind, rows in concurrency.items()}
    for row in conc.values():
        row["ratio"] = row["three_tok_s"] / row["one_tok_s"]
    from jevlaya_lab._cache_dir import models_dir
    from jevlaya_lab.local.loading import smollm2_quantization
    from jevlaya_lab.local.requantise import requantised

    quantization = smollm2_quantization()
    weights_mb = requantised(smollm2_gguf(), quantization, models_dir()).stat().st_size / 1e6
    gb_s = bandwidth_gb_s()
    bound = gb_s * 1e9 / (weights_mb * 1e6)
    results = {
        "machine": {"cpu_count": os.cpu_count(), "load_average_at_start": load, "rounds": rounds},
        "llama_weights": {"quantization": quantization, "threads_env": os.environ.get("JEVLAYA_LLAMA_THREADS")},
        "single_stream": table, "concurrency": conc,
        "ratios": {"llama_decode_vs_generate": table["llama.cpp"]["decode_tok_s"] / table["generate"]["decode_tok_s"],
                   "llama_decode_vs_transformers": table["llama.cpp"]["decode_tok_s"] / table["transformers"]["decode_tok_s"],
                   "llama_ttft_vs_transformers": table["llama.cpp"]["ttft_ms"] / table["transformers"]["ttft_ms"],
                   "three_vs_one_streams_llama": conc["llama.cpp"]["ratio"]},
        "bandwidth": {"copy_gb_s": gb_s, "gguf_mb": weights_mb, "bound_tok_s": bound,
                      "llama_share_of_bound": table["llama.cpp"]["decode_tok_s"] / bound},
    }
    gflop = prefill_gflop(table["llama.cpp"]["prompt_tokens"])
    target_ms = table["transformers"]["ttft_ms"] / 3
    results["prefill"] = {"gflop": gflop, "target_ttft_ms": target_ms, "needed_gflops": gflop / (target_ms / 1e3),
                          "llama_gflops": gflop / (table["llama.cpp"]["ttft_ms"] / 1e3),
                          "transformers_gflops": gflop / (table["transformers"]["ttft_ms"] / 1e3),
                          "cpu_matmul_gflops": matmul_gflops(table["llama.cpp"]["prompt_tokens"])}
    print(f"SmolLM2-135M-Instruct, greedy, up to {NEW_TOKENS} new tokens, {table['llama.cpp']['prompt_tokens']}-token "
          f"prompt, {rounds} rounds (load average at start {load:.1f} on {os.cpu_count()} CPUs; medians); "
          f"llama.cpp reads {quantization} weights")
    print(f"{'backend':<16}{'decode tok/s':>14}{'TTFT ms':>10}{'tokens':>8}{'peak RSS MB':>13}")
    for kind, row in table.items():
        print(f"{kind:<16}{row['decode_tok_s']:>14.1f}{row['ttft_ms']:>10.1f}{row['tokens']:>8.0f}{row['peak_rss_mb']:>13.0f}")
    r = results["ratios"]
    print(f"llama.cpp decode / generate: {r['llama_decode_vs_generate']:.2f}x (target >= 3); "
          f"/ transformers server: {r['llama_decode_vs_transformers']:.2f}x")
    print(f"llama.cpp TTFT / transformers server TTFT: {r['llama_ttft_vs_transformers']:.2f} (target <= 0.33)")
    print(f"\n{'concurrency':<22}{'1 stream tok/s':>16}{'3 streams tok/s':>17}{'ratio':>7}{'peak RSS MB':>13}")
    for kind, row in conc.items():
        label = "one model, its engines" if kind == "llama.cpp" else "one instance per lane"
        print(f"{label:<22}{row['one_tok_s']:>16.1f}{row['three_tok_s']:>17.1f}{row['ratio']:>7.2f}{row['peak_rss_mb']:>13.0f}")
    b = results["bandwidth"]
    print(f"\nmemory bandwidth (1-thread copy) {b['copy_gb_s']:.1f} GB/s over {b['gguf_mb']:.0f} MB of weights: "
          f"bound {b['bound_tok_s']:.0f} tok/s; llama.cpp reaches {100 * b['llama_share_of_bound']:.0f} %")
    f = results["prefill"]
    print(f"\nprefill: {f['gflop']:.1f} GFLOP; TTFT <= 1/3 of the transformers server's ({f['target_ttft_ms']:.0f} ms, "
          f"before any HTTP time) needs {f['needed_gflops']:.0f} GFLOP/s; llama.cpp reaches {f['llama_gflops']:.0f}, "
          f"the transformers server {f['transformers_gflops']:.0f}; this CPU's best matrix products of these shapes: "
          + ", ".join(f"{k.replace('_', ' ')} {v:.0f}" for k, v in f["cpu_matmul_gflops"].items()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"wrote {RESULTS}")
    return results


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        _serve_worker(sys.argv[2])
    elif len(sys.argv) > 3 and sys.argv[1] == "generate":
        _generate_worker()
        print(peak_rss_mb(os.getpid()), file=sys.stderr)
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
