"""Benchmark of jevlaya_lab.local: SmolLM2 speed on this CPU and the server's added latency.

Run: ``.venv/bin/python bench/local.py`` (``--quick`` for fewer repetitions). Prints tables and
writes ``bench/results/local.json``.

1. SmolLM2-135M-Instruct, greedy, 64 new tokens: time to first token and decode tokens/s of our
   decode loop in bfloat16 and float32 with 1 and 2 torch threads, against plain
   ``transformers`` ``model.generate`` (the named alternative) in the same run, configurations
   interleaved round by round; median and best of the rounds. On a shared machine 2 threads
   collapse when the cores are busy, so the load average is recorded too.
2. Server overhead: a 1-token tiny-model answer called in-process vs over HTTP (keep-alive
   httpx client), non-streaming and streaming (time to the first content delta); p50/p99.
3. Concurrency: 16 streaming clients on two tiny models at once; answers/s.
4. Cost of building a tiny chat model.
5. Backends (``--backends``, the llama.cpp comparison; ``--only-backends`` runs just this): the
   same ~100-token prompt and 128 new tokens through the llama.cpp server, the transformers
   server (today's backend before llama.cpp) and plain ``model.generate``, each in its own
   process so its peak RSS (VmHWM) is its own; decode tokens/s, time to first token, and three
   concurrent streams against one stream, with one llama.cpp instance decoding the three
   together vs one small instance per lane. Ratios in the same run, plus the memory-bandwidth
   bound (bytes of weights read per token against a measured copy bandwidth). See
   ``bench/local_backends.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jevlaya_lab.local import serve, smollm2, tiny_chat_model  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
NEW_TOKENS = 64
RESULTS = Path(__file__).resolve().parent / "results" / "local.json"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def our_loop(model: Any, new_tokens: int) -> tuple[float, float]:
    """Time to first token and decode tokens/s (tokens after the first over the time after it)."""
    stamps: list[float] = []
    started = time.perf_counter()
    generation = model.generate(PROMPT, max_tokens=new_tokens, on_token=lambda _: stamps.append(time.perf_counter()))
    return stamps[0] - started, (generation.completion_tokens - 1) / (stamps[-1] - stamps[0])


def generate_baseline(model: Any, new_tokens: int) -> float:
    """Plain ``model.generate`` (greedy, fixed length): decode tokens/s, prefill subtracted."""
    ids = torch.tensor([model.prompt_ids(PROMPT)])
    with torch.inference_mode():
        started = time.perf_counter()
        model.model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
        prefill = time.perf_counter() - started
        started = time.perf_counter()
        model.model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        return (new_tokens - 1) / (time.perf_counter() - started - prefill)


def smollm2_speed(new_tokens: int, rounds: int) -> list[dict[str, Any]]:
    """Every configuration once per round, rounds interleaved, so a busy machine hurts all alike."""
    models = {dtype: smollm2(dtype=dtype, backend="transformers") for dtype in ("bfloat16", "float32")}
    configs = [(dtype, threads) for dtype in models for threads in (1, 2)]
    samples: dict[tuple[str, int], dict[str, list[float]]] = {c: {"ttft": [], "ours": [], "generate": []} for c in configs}
    for model in models.values():
        model.generate(PROMPT, max_tokens=4)  # warm-up
    for _ in range(rounds):
        for dtype, threads in configs:
            torch.set_num_threads(threads)
            ttft, rate = our_loop(models[dtype], new_tokens)
            sample = samples[(dtype, threads)]
            sample["ttft"].append(ttft)
            sample["ours"].append(rate)
            sample["generate"].append(generate_baseline(models[dtype], new_tokens))
    rows = []
    for (dtype, threads), sample in samples.items():
        ours, baseline = statistics.median(sample["ours"]), statistics.median(sample["generate"])
        rows.append({"dtype": dtype, "threads": threads, "new_tokens": new_tokens, "rounds": rounds,
                     "ttft_ms_p50": 1000 * statistics.median(sample["ttft"]),
                     "tokens_per_s": ours, "tokens_per_s_best": max(sample["ours"]),
                     "generate_tokens_per_s": baseline, "generate_tokens_per_s_best": max(sample["generate"]),
                     "speedup_vs_generate": ours / baseline})
    return rows


def server_overhead(calls: int) -> dict[str, Any]:
    """In-process and HTTP calls interleaved, so a busy machine hurts both alike."""
    torch.set_num_threads(1)
    model = tiny_chat_model(0)
    body = {"model": "tiny-0", "messages": PROMPT, "max_tokens": 1}
    direct, http, stream_first = [], [], []
    with serve([model]) as server, httpx.Client(timeout=30) as client:
        url = f"{server.base_url}/chat/completions"
        for _ in range(20):
            model.generate(PROMPT, max_tokens=1)
            client.post(url, json=body).raise_for_status()
        for _ in range(calls):
            started = time.perf_counter()
            model.generate(PROMPT, max_tokens=1)
            direct.append(time.perf_counter() - started)
            started = time.perf_counter()
            client.post(url, json=body).raise_for_status()
            http.append(time.perf_counter() - started)
            started = time.perf_counter()
            first = None
            with client.stream("POST", url, json={**body, "stream": True}) as response:
                for line in response.iter_lines():
                    if first is None and '"content":"' in line and '"content":""' not in line:
                        first = time.perf_counter() - started
            stream_first.append(first)

    def ms(values: list[float]) -> dict[str, float]:
        return {"p50": 1000 * statistics.median(values), "p99": 1000 * pct(values, 0.99)}

    return {"calls": calls, "in_process_ms": ms(direct), "http_ms": ms(http), "http_stream_first_delta_ms": ms(stream_first),
            "added_ms_p50": 1000 * (statistics.median(http) - statistics.median(direct))}


def concurrency(clients: int) -> dict[str, Any]:
    models = [tiny_chat_model(0), tiny_chat_model(1)]
    failures: list[str] = []
    with serve(models) as server:
        url = f"{server.base_url}/chat/completions"

        def one(i: int) -> None:
            body = {"model": f"tiny-{i % 2}", "messages": PROMPT, "stream": True}
            with httpx.stream("POST", url, json=body, timeout=60) as response:
                if "[DONE]" not in response.read().decode():
                    failures.append(f"client {i}")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    return {"clients": clients, "seconds": elapsed, "answers_per_s": clients / elapsed, "incomplete": len(failures)}


def tiny_build(repeats: int) -> dict[str, float]:
    times = []
    for seed in range(repeats):
        started = time.perf_counter()
        tiny_chat_model(seed)
        times.append(time.perf_counter() - started)
    return {"build_ms_p50": 1000 * statistics.median(times), "build_ms_max": 1000 * max(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only-backends", action="store_true",
                        help="only the llama.cpp / transformers / generate comparison (section 5)")
    args = parser.parse_args()
    if args.only_backends:
        import local_backends

        local_backends.main(rounds=2 if args.quick else 3)
        return
    rounds, calls = (2, 100) if args.quick else (5, 300)
    results: dict[str, Any] = {
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "load_average_at_start": os.getloadavg()[0]},
    }
    for key, run in (("server", lambda: server_overhead(calls)), ("concurrency", lambda: concurrency(16)),
                     ("tiny", lambda: tiny_build(20)),
                     ("smollm2", lambda: smollm2_speed(NEW_TOKENS, rounds))):
        print(f"running {key} ...", file=sys.stderr, flush=True)
        results[key] = run()
    print(f"SmolLM2-135M-Instruct, greedy, {NEW_TOKENS} new tokens "
          f"(load average at start {results['machine']['load_average_at_start']:.1f} on {os.cpu_count()} CPUs)")
    print(f"{'dtype':<10}{'threads':>8}{'TTFT ms':>9}{'tok/s ours p50/best':>22}{'generate p50/best':>20}{'ratio':>7}")
    for row in results["smollm2"]:
        print(f"{row['dtype']:<10}{row['threads']:>8}{row['ttft_ms_p50']:>9.1f}"
              f"{row['tokens_per_s']:>15.1f} / {row['tokens_per_s_best']:<4.1f}"
              f"{row['generate_tokens_per_s']:>13.1f} / {row['generate_tokens_per_s_best']:<4.1f}"
              f"{row['speedup_vs_generate']:>7.2f}")
    s = results["server"]
    print(f"\nServer overhead, tiny model, 1 token, {s['calls']} calls (ms)")
    print(f"{'path':<28}{'p50':>8}{'p99':>8}")
    for label, key in (("in-process generate", "in_process_ms"), ("HTTP non-streaming", "http_ms"),
                       ("HTTP stream, first delta", "http_stream_first_delta_ms")):
        print(f"{label:<28}{s[key]['p50']:>8.2f}{s[key]['p99']:>8.2f}")
    print(f"added by the server (p50): {s['added_ms_p50']:.2f} ms")
    c = results["concurrency"]
    print(f"\n{c['clients']} concurrent streaming clients: {c['seconds']:.2f} s, {c['answers_per_s']:.1f} answers/s, "
          f"{c['incomplete']} incomplete")
    print(f"tiny_chat_model build: p50 {results['tiny']['build_ms_p50']:.1f} ms, max {results['tiny']['build_ms_max']:.1f} ms")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {RESULTS}")
    import local_backends

    local_backends.main(rounds=2 if args.quick else 3)


if __name__ == "__main__":
    main()
