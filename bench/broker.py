"""Benchmark of jevlaya_lab.broker: what the broker adds over a direct HTTP call.

Run: ``.venv/bin/python bench/broker.py`` (``--quick`` for fewer repetitions). Prints a table and
writes ``bench/results/broker.json``.

The local server runs in a separate process (``jevlaya-lab serve`` with tiny models), so the
client-side CPU measured here is the broker's. Measured:
1. ``ask`` latency vs the same request with a plain ``httpx.AsyncClient`` and with the ``openai``
   SDK (the named alternative), interleaved, 1-token answers: p50/p99 and the added ms.
2. Throughput: 50 concurrent callers through one ``AsyncBroker`` and one sync ``Broker``.
3. Journal write cost per attempt row (background writer, batched SQLite inserts; with
   ``--postgresql URL`` also into that PostgreSQL database, in a fresh schema dropped after).
4. Against llmbroker 1.11.0 (the reference; ``--no-llmbroker`` skips it): ``--rounds`` rounds,
   each interleaving a plain httpx call, ``AsyncBroker.ask`` and llmbroker's
   ``AsyncBroker.ask`` on one endpoint that answers at once (``bench/fixed_answer_server.py``,
   its own process: a model's generation time varies by more than what is measured, and
   llmbroker's ``ask`` takes no ``max_tokens`` to keep an answer short). Each round gives each
   broker's added p50 over the httpx call (the four calls of each step in a shuffled order);
   the table shows the medians over the rounds and their ratio (the goal is at most 0.5).
   Last measured (2026-12-02, idle, ``--only-llmbroker --rounds 7``), after the broker's
   requests moved from httpx's ``AsyncClient`` onto httpcore's pool (``broker/wire.py``):
   ratio -0.45 (-0.084 vs +0.184 ms; every round negative, -0.124 to -0.052 ms): the broker's
   own work now costs less than the httpx client layer it no longer pays. Before that change:
   0.77 (+0.163 vs +0.211 ms, 11 rounds, idle); single rounds swing by up to 1 ms under load.
5. ``durable=True`` (a call returns once its rows are committed) against the default, in the
   same run and interleaved: sequential 1-token asks (latency per call) and 50 concurrent
   callers (throughput), each through its own broker and journal file.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures as cf
import contextlib
import json
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig  # noqa: E402
from jevlaya_lab.journal import JournalWriter, open_store  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "broker.json"
BODY_PARAMS = {"max_tokens": 1}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class FixedAnswerProcess:
    """``bench/fixed_answer_server.py`` on a free loopback port, in its own process."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fixed_answer_server.py"),
                                      str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base_url + "/models", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the fixed-answer server did not start within 30 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class LocalServerProcess:
    """``jevlaya-lab serve`` with tiny models on a free loopback port, in its own process."""

    def __init__(self, models: list[str], faults: list[str] | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        args = [sys.executable, "-m", "jevlaya_lab.cli", "serve", "--port", str(self.port),
                "--stop-after", "900"]
        for m in models:
            args += ["--model", m]
        for f in faults or []:
            args += ["--fault", f]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base_url + "/models", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the local server did not start within 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def entries(self, *names: str) -> list[LLMConfig]:
        return [LLMConfig(name=n, base_url=self.base_url, model=n, parallel=64) for n in names]


def summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(ms), "p99_ms": pct(ms, 0.99), "n": len(ms)}


async def latency(server: LocalServerProcess, n: int) -> dict[str, Any]:
    from openai import AsyncOpenAI

    body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], **BODY_PARAMS}
    direct, broker_ms, sdk = [], [], []
    cpu = {"direct_httpx": 0.0, "broker_ask": 0.0, "openai_sdk": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        async with httpx.AsyncClient() as client, \
                AsyncBroker(Path(tmp) / "j.db", models=server.entries("a"), catalog=[]) as b:
            oa = AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
            for i in range(n + 10):  # 10 warm-up rounds
                c, t = time.process_time(), time.perf_counter()
                r = await client.post(server.base_url + "/chat/completions", json=body)
                r.json()["choices"][0]["message"]["content"]
                d, dc = (time.perf_counter() - t) * 1000, time.process_time() - c
                c, t = time.process_time(), time.perf_counter()
                await b.ask("hi", **BODY_PARAMS)
                k, kc = (time.perf_counter() - t) * 1000, time.process_time() - c
                c, t = time.process_time(), time.perf_counter()
                await oa.chat.completions.create(model="a", messages=body["messages"],
                                                 max_tokens=1)
                o, oc = (time.perf_counter() - t) * 1000, time.process_time() - c
                if i >= 10:
                    direct.append(d), broker_ms.append(k), sdk.append(o)
                    for name, used in (("direct_httpx", dc), ("broker_ask", kc),
                                       ("openai_sdk", oc)):
                        cpu[name] += used
            await oa.close()
    out = {"direct_httpx": summary(direct), "broker_ask": summary(broker_ms),
           "openai_sdk": summary(sdk)}
    for name, used in cpu.items():
        out[name]["client_cpu_us_per_call"] = used * 1e6 / n
    out["added_cpu_us_per_call"] = (out["broker_ask"]["client_cpu_us_per_call"]
                                    - out["direct_httpx"]["client_cpu_us_per_call"])
    out["added_p50_ms"] = out["broker_ask"]["p50_ms"] - out["direct_httpx"]["p50_ms"]
    out["added_p99_ms"] = out["broker_ask"]["p99_ms"] - out["direct_httpx"]["p99_ms"]
    paired = [k - d for k, d in zip(broker_ms, direct, strict=True)]
    out["added_paired_median_ms"] = statistics.median(paired)
    out["openai_sdk_over_broker_p50"] = out["openai_sdk"]["p50_ms"] / out["broker_ask"]["p50_ms"]
    return out


async def async_throughput(server: LocalServerProcess, callers: int, each: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncBroker(Path(tmp) / "j.db", models=server.entries("a", "b", "c"),
                               catalog=[]) as b:
            async def caller(i: int) -> None:
                for j in range(each):
                    await b.ask(f"q{i}-{j}", **BODY_PARAMS)
            cpu, t = time.process_time(), time.perf_counter()
            await asyncio.gather(*(caller(i) for i in range(callers)))
            wall, cpu = time.perf_counter() - t, time.process_time() - cpu
            rows = await b.calls()
    total = callers * each
    return {"callers": callers, "calls": total, "calls_per_s": total / wall,
            "client_cpu_ms_per_call": cpu * 1000 / total, "journal_rows": len(rows),
            "failed_attempts": sum(r["status"] != "ok" for r in rows)}


def sync_throughput(server: LocalServerProcess, callers: int, each: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, \
            Broker(Path(tmp) / "j.db", models=server.entries("a", "b", "c"), catalog=[]) as b:
        def caller(i: int) -> None:
            for j in range(each):
                b.ask(f"q{i}-{j}", **BODY_PARAMS)
        t = time.perf_counter()
        with cf.ThreadPoolExecutor(callers) as pool:
            list(pool.map(caller, range(callers)))
        wall = time.perf_counter() - t
        rows = len(b.calls())
    total = callers * each
    return {"threads": callers, "calls": total, "calls_per_s": total / wall, "journal_rows": rows}


async def versus_llmbroker(server: FixedAnswerProcess, rounds: int, n: int) -> dict[str, Any]:
    """Added p50 over a plain httpx call of this broker and of llmbroker, per round (see the
    module docstring). This broker journals into SQLite (a background writer); llmbroker runs
    twice, with its ``InMemoryStore`` (no journal IO: the goal is measured against this one)
    and with its SQLite ``Store`` (which writes each row before ``ask`` returns)."""
    import llmbroker
    import llmbroker.sqlite as llmbroker_sqlite

    class Registry:
        async def load(self) -> list[Any]:
            return [llmbroker.LLMConfig(name="a", base_url=server.base_url, model="a",
                                        api_key_ref="KEY", parallel=64)]

    body = {"model": "a", "messages": [{"role": "user", "content": "hi"}]}
    entries = [LLMConfig(name="a", base_url=server.base_url, model="a", api_key_ref="KEY",
                         parallel=64)]
    sides = ("jevlaya", "llmbroker", "llmbroker_sqlite")
    rng = random.Random(0)
    per_round: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        def theirs(store: Any, home: str) -> Any:
            return llmbroker.AsyncBroker(Registry(), secrets=llmbroker.DictSecrets({"KEY": "sk-x"}),
                                         store=store, sync=None, home=Path(tmp) / home)
        async with httpx.AsyncClient() as client, \
                AsyncBroker(Path(tmp) / "ours.db", models=entries, catalog=[],
                            secrets={"KEY": "sk-x"}) as ours, \
                theirs(llmbroker.InMemoryStore(), "h1") as memory, \
                theirs(llmbroker_sqlite.Store(Path(tmp) / "theirs.db"), "h2") as sqlite:
            brokers = dict(zip(sides, (ours, memory, sqlite), strict=True))
            for r in range(rounds + 1):  # round 0 warms up
                times: dict[str, list[float]] = {name: [] for name in ("direct", *sides)}
                order = ["direct", *sides]
                for _ in range(n):
                    rng.shuffle(order)  # no side always follows the slow SQLite one
                    for name in order:
                        t = time.perf_counter()
                        if name == "direct":
                            resp = await client.post(server.base_url + "/chat/completions",
                                                     json=body,
                                                     headers={"Authorization": "Bearer sk-x"})
                            resp.json()["choices"][0]["message"]["content"]
                        else:
                            await brokers[name].ask("hi")
                        times[name].append((time.perf_counter() - t) * 1000)
                if r:
                    base = statistics.median(times["direct"])
                    per_round.append({"direct_p50_ms": base, **{
                        f"{name}_added_p50_ms": statistics.median(times[name]) - base
                        for name in sides}})
    out: dict[str, Any] = {"rounds": rounds, "calls_per_round": n, "per_round": per_round,
                           "direct_p50_ms": statistics.median(x["direct_p50_ms"]
                                                              for x in per_round)}
    for name in sides:
        out[f"{name}_added_p50_ms"] = statistics.median(x[f"{name}_added_p50_ms"]
                                                        for x in per_round)
    ref = out["llmbroker_added_p50_ms"]
    out["ratio"] = out["jevlaya_added_p50_ms"] / ref if ref > 0 else math.inf
    return out


async def durable_cost(server: LocalServerProcess, n: int, callers: int,
                       each: int) -> dict[str, Any]:
    """Default vs ``durable=True``: paired sequential latency, then concurrent throughput."""
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncBroker(Path(tmp) / "d.db", models=server.entries("a", "b", "c"),
                               catalog=[]) as default, \
                AsyncBroker(Path(tmp) / "D.db", models=server.entries("a", "b", "c"),
                            catalog=[], durable=True) as durable:
            seq: dict[str, list[float]] = {"default": [], "durable": []}
            for i in range(n + 10):
                for name, b in (("default", default), ("durable", durable)):
                    t = time.perf_counter()
                    await b.ask("hi", **BODY_PARAMS)
                    if i >= 10:
                        seq[name].append((time.perf_counter() - t) * 1000)
            rates = {}
            for name, b in (("default", default), ("durable", durable)):
                async def caller(i: int, b: AsyncBroker = b) -> None:
                    for j in range(each):
                        await b.ask(f"q{i}-{j}", **BODY_PARAMS)
                t = time.perf_counter()
                await asyncio.gather(*(caller(i) for i in range(callers)))
                rates[name] = callers * each / (time.perf_counter() - t)
    out: dict[str, Any] = {name: {**summary(ms), "calls_per_s_50_callers": rates[name]}
                           for name, ms in seq.items()}
    paired = [d - k for d, k in zip(seq["durable"], seq["default"], strict=True)]
    out["added_paired_median_ms"] = statistics.median(paired)
    out["throughput_ratio"] = rates["durable"] / rates["default"]
    return out


def journal_cost(rows: int, postgresql: str | None = None) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    with tempfile.TemporaryDirectory() as tmp, bench_schema(postgresql) as url:
        store = open_store(url or Path(tmp) / "j.db")
        writer = JournalWriter(store)
        t = time.perf_counter()
        for i in range(rows):
            writer.attempt({"call_id": f"c{i}", "trace_id": "t", "llm_name": "a", "status": "ok",
                            "called_at": now, "latency_ms": 1.0})
        enqueue = time.perf_counter() - t
        writer.close()
        total = time.perf_counter() - t
        store.close()
    return {"rows": rows, "enqueue_us_per_row": enqueue * 1e6 / rows,
            "written_us_per_row": total * 1e6 / rows}


@contextlib.contextmanager
def bench_schema(url: str | None) -> Iterator[str | None]:
    """``url`` pointed at a new schema that is dropped afterwards (``None`` stays ``None``)."""
    if url is None:
        yield None
        return
    import psycopg

    schema = f"jevlaya_bench_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            yield url + ("&" if "?" in url else "?") + f"options=-csearch_path%3D{schema}"
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgresql", metavar="URL",
                        help="also measure journal writes into this PostgreSQL database")
    parser.add_argument("--rounds", type=int, default=7,
                        help="rounds of the llmbroker comparison (default 7)")
    parser.add_argument("--no-llmbroker", action="store_true",
                        help="skip the comparison with llmbroker")
    parser.add_argument("--only-llmbroker", action="store_true",
                        help="run only the comparison with llmbroker")
    args = parser.parse_args(argv)
    n, each = (60, 2) if args.quick else (300, 6)
    vs = None
    if not args.no_llmbroker:
        fixed = FixedAnswerProcess()
        try:
            vs = asyncio.run(versus_llmbroker(fixed, args.rounds, 100 if args.quick else 300))
        finally:
            fixed.stop()
        if args.only_llmbroker:
            print_versus(vs)
            return 0
    server = LocalServerProcess(["a=tiny:1", "b=tiny:2", "c=tiny:3"])
    try:
        lat = asyncio.run(latency(server, n))
        thr = asyncio.run(async_throughput(server, 50, each))
        sthr = sync_throughput(server, 50, each)
        dur = asyncio.run(durable_cost(server, n, 50, each))
    finally:
        server.stop()
    jc = journal_cost(20_000 if not args.quick else 5_000)
    if args.postgresql:
        jc["postgresql"] = journal_cost(20_000 if not args.quick else 5_000, args.postgresql)
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
              "latency": lat, "versus_llmbroker": vs, "async_50_callers": thr,
              "sync_50_threads": sthr, "journal": jc, "durable": dur}
    print(f"{'1-token ask, sequential':<38}{'p50 ms':>10}{'p99 ms':>10}{'client CPU us':>15}")
    for name in ("direct_httpx", "broker_ask", "openai_sdk"):
        print(f"  {name:<36}{lat[name]['p50_ms']:>10.2f}{lat[name]['p99_ms']:>10.2f}"
              f"{lat[name]['client_cpu_us_per_call']:>15.0f}")
    print(f"  {'added by the broker':<36}{lat['added_p50_ms']:>10.2f}{lat['added_p99_ms']:>10.2f}"
          f"{lat['added_cpu_us_per_call']:>15.0f}   (paired median "
          f"{lat['added_paired_median_ms']:.2f} ms)")
    print(f"  openai SDK / broker at p50: {lat['openai_sdk_over_broker_p50']:.2f}x")
    print(f"50 async callers: {thr['calls_per_s']:.0f} calls/s, "
          f"{thr['client_cpu_ms_per_call']:.2f} ms client CPU per call, "
          f"{thr['journal_rows']} attempt rows for {thr['calls']} calls "
          f"({thr['failed_attempts']} failed over)")
    print(f"50 threads, sync Broker: {sthr['calls_per_s']:.0f} calls/s, "
          f"{sthr['journal_rows']}/{sthr['calls']} rows journaled")
    print(f"journal: {jc['enqueue_us_per_row']:.1f} us to enqueue, "
          f"{jc['written_us_per_row']:.1f} us per row written (batched, background thread)")
    if "postgresql" in jc:
        pg = jc["postgresql"]
        print(f"journal on PostgreSQL: {pg['enqueue_us_per_row']:.1f} us to enqueue, "
              f"{pg['written_us_per_row']:.1f} us per row written "
              f"({1e6 / pg['written_us_per_row']:.0f} rows/s vs "
              f"{1e6 / jc['written_us_per_row']:.0f} rows/s in SQLite)")
    print(f"durable=True vs default: p50 {dur['durable']['p50_ms']:.2f} vs "
          f"{dur['default']['p50_ms']:.2f} ms per sequential call (paired median "
          f"+{dur['added_paired_median_ms']:.2f} ms); 50 callers "
          f"{dur['durable']['calls_per_s_50_callers']:.0f} vs "
          f"{dur['default']['calls_per_s_50_callers']:.0f} calls/s "
          f"({dur['throughput_ratio']:.2f}x)")
    if vs is not None:
        print_versus(vs)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(f"wrote {RESULTS}")
    return 0


def print_versus(vs: dict[str, Any]) -> None:
    print(f"vs llmbroker 1.11.0: {vs['rounds']} rounds x {vs['calls_per_round']} interleaved "
          f"calls on a fixed-answer endpoint (direct httpx p50 {vs['direct_p50_ms']:.3f} ms); "
          "added p50 over httpx, median of the rounds:")
    print(f"  jevlaya_lab (SQLite journal)     {vs['jevlaya_added_p50_ms']:.3f} ms")
    print(f"  llmbroker (InMemoryStore)        {vs['llmbroker_added_p50_ms']:.3f} ms")
    print(f"  llmbroker (SQLite Store)         {vs['llmbroker_sqlite_added_p50_ms']:.3f} ms")
    print(f"  ratio jevlaya_lab / llmbroker (InMemoryStore): {vs['ratio']:.2f} (goal <= 0.5)")
    print("  per round (jevlaya_lab / llmbroker ms): " + ", ".join(
        f"{x['jevlaya_added_p50_ms']:.3f}/{x['llmbroker_added_p50_ms']:.3f}"
        for x in vs["per_round"]))


if __name__ == "__main__":
    sys.exit(main())
