"""Benchmark of Broker streaming: time to first delta and per-delta cost over plain httpx SSE,
and what a 3-lane ``fastest_of`` race costs.

Run: ``.venv/bin/python bench/streaming.py`` (``--quick`` for fewer repetitions). Prints a table
and writes ``bench/results/streaming.json``. The local server (tiny models) runs in its own
process, so client CPU time below is the reader's: plain httpx or the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker import LocalServerProcess, pct  # noqa: E402  (bench/broker.py)

from jevlaya_lab.broker import AsyncBroker  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "streaming.json"
TOKENS = 24


async def direct_stream(client: httpx.AsyncClient, url: str) -> tuple[float, int]:
    """Time to first content delta (ms) and number of content deltas, read with plain httpx."""
    body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": TOKENS, "stream_options": {"include_usage": True}}
    t = time.perf_counter()
    first, n = None, 0
    async with client.stream("POST", url + "/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                n += 1
                if first is None:
                    first = (time.perf_counter() - t) * 1000
    return first or 0.0, n


async def broker_stream(b: AsyncBroker, **kw: Any) -> tuple[float, int]:
    t = time.perf_counter()
    first, n = None, 0
    stream = b.stream("hi", max_tokens=TOKENS, **kw)
    try:
        async for _ in stream:
            n += 1
            if first is None:
                first = (time.perf_counter() - t) * 1000
    except Exception as exc:  # a race may end in StreamReplacementError: still one answer
        if type(exc).__name__ != "StreamReplacementError":
            raise
    await stream.aclose()
    return first or 0.0, n


def summarize(rows: list[tuple[float, int, float]]) -> dict[str, Any]:
    ttfd_ms = [r[0] for r in rows]
    out = {"ttfd_p50_ms": statistics.median(ttfd_ms), "ttfd_p99_ms": pct(ttfd_ms, .99),
           "deltas": statistics.mean(r[1] for r in rows),
           "client_cpu_ms_per_stream": statistics.mean(r[2] for r in rows)}
    out["client_cpu_us_per_delta"] = out["client_cpu_ms_per_stream"] * 1000 / max(out["deltas"], 1)
    return out


async def timed(read: Any) -> tuple[float, int, float]:
    cpu = time.process_time()
    ttfd, deltas = await read()
    return ttfd, deltas, (time.process_time() - cpu) * 1000


async def compare(server: LocalServerProcess, n: int) -> dict[str, Any]:
    """Direct and broker streams on model a, alternating run by run (paired, so machine load
    hits both alike); the race on b, c, d in its own phase, so cancelled race lanes never
    queue in front of the other measurements."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with httpx.AsyncClient() as client, \
                AsyncBroker(Path(tmp) / "a.db", models=server.entries("a"), catalog=[]) as one, \
                AsyncBroker(Path(tmp) / "r.db", models=server.entries("b", "c", "d"),
                            catalog=[]) as three:
            direct, single = [], []
            for i in range(n + 5):
                # alternate which goes first and let the server settle between runs
                pair = {}
                for name in (("direct", "broker") if i % 2 else ("broker", "direct")):
                    await asyncio.sleep(0.02)
                    pair[name] = await timed(lambda: direct_stream(client, server.base_url)
                                             if name == "direct" else broker_stream(one))
                d, k = pair["direct"], pair["broker"]
                if i >= 5:  # warm-up
                    direct.append(d), single.append(k)
            race = []
            for _ in range(n):
                await asyncio.sleep(0.02)
                race.append(await timed(lambda: broker_stream(three, fastest_of=3,
                                                              stream_selection_window=0)))
            out = {"direct": summarize(direct), "broker": summarize(single),
                   "race3": summarize(race)}
            out["paired_ttfd_diff_median_ms"] = statistics.median(
                k[0] - d[0] for k, d in zip(single, direct, strict=True))
            for name, broker, kw in (("broker", one, {}), ("race3", three, {"fastest_of": 3})):
                tracemalloc.start()
                await broker_stream(broker, **kw)
                out[name]["peak_kib"] = tracemalloc.get_traced_memory()[1] / 1024
                tracemalloc.stop()
    out["added_ttfd_p50_ms"] = out["broker"]["ttfd_p50_ms"] - out["direct"]["ttfd_p50_ms"]
    out["added_cpu_us_per_delta"] = (out["broker"]["client_cpu_us_per_delta"]
                                     - out["direct"]["client_cpu_us_per_delta"])
    out["race3_cpu_ratio"] = (out["race3"]["client_cpu_ms_per_stream"]
                              / out["broker"]["client_cpu_ms_per_stream"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    server = LocalServerProcess(["a=tiny:1", "b=tiny:2", "c=tiny:3", "d=tiny:4"])
    try:
        res = asyncio.run(compare(server, 20 if args.quick else 100))
    finally:
        server.stop()
    print(f"{TOKENS}-token streams{'':<12}{'TTFD p50':>10}{'TTFD p99':>10}{'CPU/stream':>12}"
          f"{'CPU/delta':>11}{'peak KiB':>10}")
    for name in ("direct", "broker", "race3"):
        r = res[name]
        print(f"  {name:<25}{r['ttfd_p50_ms']:>9.2f}m{r['ttfd_p99_ms']:>9.2f}m"
              f"{r['client_cpu_ms_per_stream']:>10.2f}ms{r['client_cpu_us_per_delta']:>9.1f}us"
              f"{r.get('peak_kib', float('nan')):>10.1f}")
    print(f"added time to first delta (p50): {res['added_ttfd_p50_ms']:.2f} ms (paired median "
          f"{res['paired_ttfd_diff_median_ms']:.2f} ms); added CPU per "
          f"delta: {res['added_cpu_us_per_delta']:.1f} us; 3-lane race CPU = "
          f"{res['race3_cpu_ratio']:.2f}x a single stream")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=2))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
