"""Chaos run: the broker, the journal and the local server under faults, contention and abuse.

Run: ``.venv/bin/python bench/chaos.py`` (``--quick`` for a smaller run; ``--postgresql`` also
runs the multi-process part against a private PostgreSQL server, as the journal tests start
one). Prints a table and writes ``bench/results/chaos.json``. Parts:

1. **mixed**: N calls (default 5,000) at concurrency 32 through one ``AsyncBroker`` with the
   default cooldowns: ``ask``, streams read to the end, ``fastest_of=2`` races and abandoned
   streams (closed after one delta, or dropped for the garbage collector), against local tiny
   models of which most inject faults (429/503 with short ``Retry-After``, 400, 500, garbage,
   cut streams, slow first tokens), several echoing the API key into their error text. Checks:
   every call ends with an answer or a documented ``LLMRequestError`` (none hung past a hard
   deadline), one journal row per attempt (rows handed to the writer == rows in the file, no
   slot left in use), no task or socket left after closing, no run of 6+ key characters in the
   journal file, the errors or the logs; the share of attempts that hit a fault is reported.
2. **processes**: 4 processes x 1,000 calls into one SQLite file (and PostgreSQL): every
   process's rows are there, once.
3. **sigkill**: a process making calls is killed with SIGKILL at random moments, repeatedly;
   after each kill the journal opens (integrity check included) and no row written is lost.
4. **hostile**: hostile requests against a ``jevlaya-lab serve`` process: six 8 MB prompts at
   once, JSON nested 100,000 deep, 300 half-sent requests, garbage request lines, odd methods,
   ``max_tokens=10**9``, 150 idle sockets held open while a normal request is timed; every
   answer is OpenAI-style JSON and the server's peak RSS is reported.

The mixed part also sends, among its calls, ``fastest_of=2`` streams closed before their lanes
start, prompts with a lone surrogate (refused with ``PromptError`` before any model) and calls
to a loopback provider whose errors carry a ``message`` that is null, a number, a list or an
object (400/429/500) and that echoes the key in its headers; everything is logged at DEBUG
through the root logger, as ``logging.basicConfig(level=logging.DEBUG)`` does. The sigkill
part also kills a ``durable=True`` writer right after answers and counts answers missing from
the journal. After the run :func:`violations` checks: 0 slots left taken (every model's
``in_flight`` 0), 0 hung, 0 undocumented exceptions, every server request has its journal row
and rows beyond the requests are only superseded/cancelled lanes, 0 rows lost or duplicated, 0
runs of 6+ key characters in the journal files, errors and DEBUG logs, 0 answers of a durable
writer lost, idle sockets not delaying a request; it prints the counts and exits 1 if any
check fails. ``tests/broker/test_broker_chaos_suite.py`` runs the mixed part with 300 calls.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import json
import logging
import os
import random
import re
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig  # noqa: E402
from jevlaya_lab.broker.errors import LLMRequestError, PromptError  # noqa: E402
from jevlaya_lab.journal import open_store  # noqa: E402
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model  # noqa: E402
from jevlaya_lab.secrets import MIN_SECRET_RUN  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "chaos.json"
KEY = "ChaosKey7Yq2Wm9Zr4Xt8Vb3Nd6Lp"
PARAMS = {"max_tokens": 4}
# faulty models first, so the pool keeps sending them traffic; "a" and "b" are healthy
FAULTS: dict[str, FaultProfile | None] = {
    "rl": FaultProfile(status=429, retry_after=0.2, probability=0.7, seed=1, echo_key=30),
    "busy": FaultProfile(status=503, retry_after=0.3, probability=0.6, seed=2),
    "bad": FaultProfile(status=400, probability=0.7, seed=3, echo_key=285),
    "err": FaultProfile(status=500, probability=0.3, seed=4, echo_key=0),
    "junk": FaultProfile(garbage=True, probability=0.3, seed=5, echo_key=115),
    "cut": FaultProfile(cut_after=2, probability=0.4, seed=6),
    "slow": FaultProfile(first_token_delay=0.4, probability=0.5, seed=7),
    "a": None,
    "b": None,
}
FAULT_STATUSES = ("rate_limited", "unavailable", "error")
DOCUMENTED = (LLMRequestError, PromptError)
NEUTRAL = ("superseded", "cancelled")  # lanes ended by the broker, maybe before any request
ODD_MESSAGES: list[Any] = [None, 7, ["bad", 1], {"why": "no", "key": KEY}]


class OddErrorProvider:
    """A loopback OpenAI-style provider that answers most requests with an error whose
    ``message`` is not a string (400/429/500), the rest with a one-word answer, and echoes the
    key it was sent in ``X-Echo-Key`` and ``WWW-Authenticate``; it counts the requests."""

    def __init__(self, seed: int = 11, error_share: float = 0.6) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        rng = random.Random(seed)
        lock = threading.Lock()
        provider = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    provider.requests += 1
                    fail, status = rng.random() < error_share, rng.choice((400, 429, 500))
                    message = rng.choice(ODD_MESSAGES)
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if fail:
                    kind = "application/json"
                    body = json.dumps({"error": {"message": message}}).encode()
                elif request.get("stream"):
                    status, kind = 200, "text/event-stream"
                    chunk = {"choices": [{"delta": {"content": "odd"}, "finish_reason": "stop"}]}
                    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                else:
                    status, kind = 200, "application/json"
                    body = json.dumps({"choices": [{"message": {"content": "odd"},
                                                    "finish_reason": "stop"}]}).encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Echo-Key", key)
                self.send_header("WWW-Authenticate", f'Bearer realm="odd", key="{key}"')
                if status == 429:
                    self.send_header("Retry-After", "0.2")
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def key_runs(text: str) -> int:
    """Pieces of KEY (MIN_SECRET_RUN characters) found in ``text``."""
    return sum(KEY[i:i + MIN_SECRET_RUN] in text for i in range(len(KEY) - MIN_SECRET_RUN + 1))


def socket_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- 1. mixed calls ------------------------------------------------------------------------------

KINDS = ("ask", "ask", "stream", "stream", "race", "abandon", "ask", "drop", "close-before-start",
         "unencodable", "stream-race")


async def one_call(broker: AsyncBroker, i: int, errors: Counter[str], texts: list[str]) -> str:
    kind = KINDS[i % len(KINDS)]
    try:
        if kind == "unencodable":
            await broker.ask(f"bad \ud800 {i}", wait=8, **PARAMS)
        elif kind == "close-before-start":  # closed while the pull has started its lanes
            stream = broker.stream(f"closed {i}", wait=8, fastest_of=2, **PARAMS)
            pull = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0)
            await stream.aclose()
            done = await asyncio.gather(pull, return_exceptions=True)
            if isinstance(done[0], BaseException) and not isinstance(
                    done[0], (StopAsyncIteration, *DOCUMENTED)):
                raise done[0]
        elif kind == "stream-race":
            try:
                async with broker.stream(f"srace {i}", wait=8, fastest_of=2, **PARAMS) as stream:
                    async for _ in stream:
                        pass
            except LLMRequestError as exc:
                if type(exc).__name__ != "StreamReplacementError":
                    raise
        elif kind == "ask":
            await broker.ask(f"question {i}", wait=8, **PARAMS)
        elif kind == "race":
            await broker.ask(f"race {i}", wait=8, fastest_of=2, **PARAMS)
        elif kind == "stream":
            async with broker.stream(f"stream {i}", wait=8, **PARAMS) as stream:
                async for _ in stream:
                    pass
        else:  # read one delta, then close ("abandon") or just drop the stream ("drop")
            stream = broker.stream(f"abandoned {i}", wait=8, **PARAMS)
            async for _ in stream:
                break
            if kind == "abandon":
                await stream.aclose()
            del stream
        return "answer"
    except DOCUMENTED as exc:
        errors[type(exc).__name__] += 1
        texts.append(f"{exc!r} {getattr(exc, 'errors', '')!r}")
        return "documented error"


async def mixed(n_calls: int, concurrency: int, tmp: Path) -> dict[str, Any]:
    # what logging.basicConfig(level=logging.DEBUG) does: every logger, to one root handler
    log_text = io.StringIO()
    handler = logging.StreamHandler(log_text)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    models = {n: tiny_chat_model(i, name=n) for i, n in enumerate(FAULTS)}
    server = serve(models, api_key=KEY, faults={n: f for n, f in FAULTS.items() if f})
    odd = OddErrorProvider()
    db = tmp / "mixed.db"
    outcomes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    texts: list[str] = []
    hung = 0
    sockets_before = socket_fds()
    started = time.perf_counter()
    try:
        entries = [LLMConfig(name=n, base_url=server.base_url, model=n, api_key_ref="CHAOS_KEY",
                             parallel=4) for n in FAULTS]
        entries.insert(0, LLMConfig(name="odd", base_url=odd.base_url, model="odd",
                                    api_key_ref="CHAOS_KEY", parallel=4))
        broker = AsyncBroker(db, models=entries, secrets={"CHAOS_KEY": KEY}, catalog=[])
        async with broker:
            gate = asyncio.Semaphore(concurrency)

            async def guarded(i: int) -> None:
                nonlocal hung
                async with gate:
                    try:
                        outcomes[await asyncio.wait_for(one_call(broker, i, errors, texts), 90)] += 1
                    except TimeoutError:
                        hung += 1
                    except Exception as exc:  # noqa: BLE001 - an undocumented error is a finding
                        outcomes[f"undocumented {type(exc).__name__}"] += 1
                        texts.append(repr(exc))

            await asyncio.gather(*(guarded(i) for i in range(n_calls)))
            gc.collect()
            await asyncio.sleep(0.5)  # dropped streams finish cancelling their lanes
            snapshot = await broker.snapshot()
            in_flight_by_model = {n: s["in_flight"] for n, s in snapshot.items() if s["in_flight"]}
            in_flight = sum(in_flight_by_model.values())
        journal = broker._rt.writer.status()  # after closing: every row handed to the writer
        handed = journal["waiting"] + journal["written"] + journal["failed"]
        elapsed = time.perf_counter() - started
        leftover_tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        gc.collect()
        deadline = time.monotonic() + 10
        while server._httpd.open_connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        open_server_connections = server._httpd.open_connections
        requests = sum(server.request_count(n) for n in FAULTS) + odd.requests
    finally:
        server.stop()
        odd.stop()
        root.removeHandler(handler)
        root.setLevel(root_level)
    rows = sqlite3.connect(db).execute("SELECT status, COUNT(*) FROM attempts GROUP BY status").fetchall()
    by_status = dict(rows)
    n_rows = sum(by_status.values())
    distinct = sqlite3.connect(db).execute("SELECT COUNT(DISTINCT call_id) FROM attempts").fetchone()[0]
    tried = sum(v for k, v in by_status.items() if k not in ("superseded", "cancelled"))
    faulted = sum(by_status.get(k, 0) for k in FAULT_STATUSES)
    files = b"".join(p.read_bytes() for p in tmp.iterdir() if p.name.startswith("mixed.db"))
    return {
        "calls": n_calls, "concurrency": concurrency, "seconds": round(elapsed, 1),
        "calls_per_s": round(n_calls / elapsed, 1), "outcomes": dict(outcomes), "errors": dict(errors),
        "hung": hung, "attempt_rows": n_rows, "rows_by_status": by_status,
        "rows_handed_to_writer": handed, "duplicate_rows": n_rows - distinct,
        "lost_rows": handed - n_rows, "journal_counters": journal,
        "server_requests": requests, "fault_share_of_attempts": round(faulted / max(tried, 1), 3),
        "neutral_rows": sum(by_status.get(k, 0) for k in NEUTRAL),
        "requests_without_row": max(0, requests - n_rows),
        "rows_without_request_beyond_neutral": max(
            0, n_rows - requests - sum(by_status.get(k, 0) for k in NEUTRAL)),
        "undocumented": sum(v for k, v in outcomes.items() if k.startswith("undocumented")),
        "slots_in_use_after": in_flight, "slots_in_use_by_model": in_flight_by_model, "tasks_left": len(leftover_tasks),
        "sockets_left": socket_fds() - sockets_before, "server_connections_left": open_server_connections,
        "key_runs": {"journal_files": key_runs(files.decode("latin-1")),
                     "errors": key_runs("\n".join(texts)), "logs": key_runs(log_text.getvalue())},
        "key_echoes_in_logs_checked_chars": len(log_text.getvalue()),
        "peak_rss_mb": round(rss_mb(), 1),
    }


# -- 2. several processes, one journal -----------------------------------------------------------

def child_calls(source: str, base_url: str, n: int, tag: str) -> None:
    """In a child process: n asks (8 threads) through one Broker; print its rows and answers."""
    import concurrent.futures as cf

    entries = [LLMConfig(name=m, base_url=base_url, model=m, parallel=8) for m in ("a", "b", "rl")]
    traces = [f"{tag}-{i}" for i in range(n)]
    answers = []
    with Broker(source, models=entries, catalog=[]) as broker:
        def ask(trace: str) -> str | None:
            try:
                return broker.ask("hi", trace_id=trace, wait=20, **PARAMS).call_id
            except LLMRequestError:
                return None
        with cf.ThreadPoolExecutor(8) as pool:
            answers = [a for a in pool.map(ask, traces) if a]
        mine = [r for r in broker.calls() if r["trace_id"].startswith(tag + "-")]
    print(json.dumps({"rows": len(mine), "answers": answers}), flush=True)


def processes(source: str, count: int, n: int, base_url: str) -> dict[str, Any]:
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child-calls", source, base_url, str(n), f"p{k}"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT) for k in range(count)]
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        reports.append(json.loads(out.strip().splitlines()[-1]))
    store = open_store(source)
    rows = [r for r in store.attempts() if r["trace_id"][:1] == "p"]
    store.close()
    ids = Counter(r["call_id"] for r in rows)
    answers = [a for rep in reports for a in rep["answers"]]
    return {"processes": count, "calls_each": n, "seconds": round(time.perf_counter() - started, 1),
            "rows": len(rows), "rows_reported_by_processes": sum(rep["rows"] for rep in reports),
            "answers": len(answers), "answers_missing_from_journal": sum(1 for a in answers if a not in ids),
            "duplicate_rows": sum(c - 1 for c in ids.values())}


# -- 3. SIGKILL during writes ----------------------------------------------------------------------

def child_forever(source: str, base_url: str) -> None:
    entries = [LLMConfig(name=m, base_url=base_url, model=m, parallel=8) for m in ("a", "b")]
    with Broker(source, models=entries, catalog=[]) as broker:
        print("ready", flush=True)
        i = 0
        while True:
            broker.ask(f"kill me {i}", **PARAMS)
            i += 1


def child_durable(source: str, base_url: str) -> None:
    """Answers from 8 threads through a ``durable=True`` broker, each call_id printed (flushed)
    the moment its call returns, until killed."""
    import concurrent.futures as cf

    entries = [LLMConfig(name=m, base_url=base_url, model=m, parallel=8) for m in ("a", "b")]
    with Broker(source, models=entries, catalog=[], durable=True) as broker:
        print("ready", flush=True)
        lock = threading.Lock()

        def loop(w: int) -> None:
            i = 0
            while True:
                i += 1
                call_id = broker.ask(f"durable {w}-{i}", wait=30, **PARAMS).call_id
                with lock:
                    sys.stdout.write(call_id + "\n")
                    sys.stdout.flush()
        with cf.ThreadPoolExecutor(8) as pool:
            list(pool.map(loop, range(8)))


def durable_kills(rounds: int, tmp: Path, base_url: str) -> dict[str, Any]:
    """SIGKILL a durable writer right after answers came back; count answers not journaled."""
    db = tmp / "durable.db"
    answered: list[str] = []
    for k in range(rounds):
        proc = subprocess.Popen([sys.executable, __file__, "--child-durable", str(db), base_url],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        got = 0
        while got < 40 + 10 * k and (line := proc.stdout.readline()):
            answered.append(line.strip())
            got += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        answered.extend(proc.stdout.read().split())
    with sqlite3.connect(db) as con:
        stored = {r[0] for r in con.execute("SELECT call_id FROM attempts WHERE status = 'ok'")}
    answered = [a for a in answered if len(a) == 32]
    return {"kills": rounds, "answers": len(answered),
            "answers_missing": sum(a not in stored for a in answered)}


def sigkill(rounds: int, tmp: Path, base_url: str) -> dict[str, Any]:
    db = tmp / "killed.db"
    rng = random.Random(15)
    clean, counts = 0, []
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, __file__, "--child-forever", str(db), base_url],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.5, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        try:
            store = open_store(db)  # header, permissions and quick_check
            counts.append(len(store.attempts()))
            store.close()
            clean += 1
        except Exception as exc:  # noqa: BLE001 - reported
            counts.append(f"{type(exc).__name__}: {exc}")
    monotonic = all(isinstance(c, int) for c in counts) and counts == sorted(counts)
    return {"kills": rounds, "journal_opens_cleanly": clean, "rows_after_each_kill": counts,
            "rows_never_decrease": monotonic}


# -- 4. hostile requests ---------------------------------------------------------------------------

def server_process(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "jevlaya_lab.cli", "serve", "--port", "0",
                             "--stop-after", "900", "--threads", "1", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    line = proc.stdout.readline() if proc.stdout else ""
    found = re.search(r"serving (http://127\.0\.0\.1:(\d+)/v1)", line)
    if not found:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    return proc, found.group(1)


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def is_openai_error(response: httpx.Response) -> bool:
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return set(error) == {"message", "type", "param", "code"}


def raw_exchange(port: int, data: bytes, timeout: float = 60) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        try:
            while piece := sock.recv(65536):
                out += piece
        except (ConnectionResetError, TimeoutError):
            pass
    return out


def idle_flood(port: int, url: str, count: int) -> dict[str, Any]:
    """Hold ``count`` idle connections open, then time normal requests (they must not wait
    for the idle ones to time out)."""
    idle = []
    try:
        for _ in range(count):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(0.2)
        times, statuses = [], []
        for _ in range(3):
            started = time.perf_counter()
            r = httpx.post(url, json={"model": "tiny-0", "max_tokens": 2,
                                      "messages": [{"role": "user", "content": "hi"}]}, timeout=60)
            times.append(time.perf_counter() - started)
            statuses.append(r.status_code)
    finally:
        for sock in idle:
            sock.close()
    return {"idle_sockets": count, "statuses": statuses, "slowest_s": round(max(times), 2)}


def hostile(half_sent: int) -> dict[str, Any]:
    import concurrent.futures as cf

    proc, base_url = server_process("--model", "tiny", "--read-timeout", "5")
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    url = f"{base_url}/chat/completions"
    out: dict[str, Any] = {"rss_mb_at_start": round(vm_hwm_mb(proc.pid), 1)}
    try:
        big = {"model": "tiny-0", "messages": [{"role": "user", "content": "x" * (8 * 1024 * 1024 - 200)}]}
        started = time.perf_counter()
        with cf.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: httpx.post(url, json=big, timeout=120), range(6)))
        out["six_8mb_prompts"] = {"statuses": sorted({r.status_code for r in answers}),
                                  "json_errors": sum(map(is_openai_error, answers)),
                                  "seconds": round(time.perf_counter() - started, 2),
                                  "server_peak_rss_mb": round(vm_hwm_mb(proc.pid), 1)}
        deep = httpx.post(url, content=b"[" * 100_000 + b"]" * 100_000, timeout=60)
        out["json_nested_100k"] = {"status": deep.status_code, "json_error": is_openai_error(deep)}
        weird = [b"PUT /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
                 b"DELETE /v1/models HTTP/1.1\r\n\r\n", b"BREW /pot HTTP/1.1\r\n\r\n",
                 b"\x16\x03\x01 garbage\r\n\r\n", b"GET /v1/models HTTP/2.0\r\n\r\n",
                 b"GET /x HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n"]
        replies = [raw_exchange(port, w) for w in weird]
        out["garbage_and_odd_methods"] = {
            "statuses": [int(r.split(b" ", 2)[1]) if r.startswith(b"HTTP/1.1 ") else None for r in replies],
            "all_json": all(b'"error": {"message"' in r for r in replies)}
        huge = httpx.post(url, json={"model": "tiny-0", "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 10**9}, timeout=30)
        out["max_tokens_1e9"] = {"status": huge.status_code, "json_error": is_openai_error(huge)}
        role = httpx.post(url, json={"model": "tiny-0", "messages": [{"role": "<script>", "content": "hi"}]},
                          timeout=30)
        out["role_script"] = {"status": role.status_code, "json_error": is_openai_error(role)}
        # half-sent requests: the first 128 hold a connection until the read timeout (408),
        # the rest are refused at once (503 with Retry-After)
        started = time.perf_counter()
        partial = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{\"model\":"
        with cf.ThreadPoolExecutor(half_sent) as pool:  # all at once: beyond the connection cap
            replies = list(pool.map(lambda _: raw_exchange(port, partial, timeout=60), range(half_sent)))
        statuses = Counter(int(r.split(b" ", 2)[1]) if r.startswith(b"HTTP/1.1 ") else 0 for r in replies)
        out["half_sent_requests"] = {"count": half_sent, "statuses": dict(statuses),
                                     "all_closed_within_s": round(time.perf_counter() - started, 1)}
        ok = httpx.post(url, json={"model": "tiny-0", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 2}, timeout=30)
        out["healthy_request_after"] = ok.status_code
        out["idle_socket_flood"] = idle_flood(port, url, 150)
        out["server_peak_rss_mb"] = round(vm_hwm_mb(proc.pid), 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


# -- the run -----------------------------------------------------------------------------------------

def postgres_source() -> tuple[Any, str]:
    """A private PostgreSQL server as the journal tests start one (tests/journal/conftest.py)."""
    sys.path.insert(0, str(ROOT / "tests" / "journal"))
    from conftest import PostgresServer, find_pg_bindir  # type: ignore[import-not-found]

    server = PostgresServer(find_pg_bindir())
    server.start()
    return server, server.url()


def table(results: dict[str, Any]) -> str:
    m, lines = results["mixed"], []
    lines.append(f"mixed: {m['calls']} calls at concurrency {m['concurrency']} in {m['seconds']} s "
                 f"({m['calls_per_s']}/s); outcomes {m['outcomes']}; hung {m['hung']}")
    lines.append(f"  attempts {m['attempt_rows']} (faulted {m['fault_share_of_attempts']:.0%}), "
                 f"lost {m['lost_rows']}, duplicated {m['duplicate_rows']}, slots in use {m['slots_in_use_after']}, "
                 f"tasks left {m['tasks_left']}, sockets left {m['sockets_left']}, "
                 f"server connections left {m['server_connections_left']}")
    lines.append(f"  key runs found: {m['key_runs']}; peak RSS {m['peak_rss_mb']} MB")
    lines.append(f"  server requests {m['server_requests']}, rows {m['attempt_rows']} (of which "
                 f"superseded/cancelled {m['neutral_rows']}); requests without a row "
                 f"{m['requests_without_row']}, undocumented {m['undocumented']}")
    for name, p in results["processes"].items():
        lines.append(f"processes ({name}): {p['processes']} x {p['calls_each']} calls in {p['seconds']} s; "
                     f"rows {p['rows']} (processes saw {p['rows_reported_by_processes']}), answers missing "
                     f"{p['answers_missing_from_journal']}, duplicated {p['duplicate_rows']}")
    k = results["sigkill"]
    lines.append(f"sigkill: {k['journal_opens_cleanly']}/{k['kills']} clean opens; rows {k['rows_after_each_kill']}")
    if "durable" in results:
        d = results["durable"]
        lines.append(f"durable kills: {d['kills']}; answers {d['answers']}, missing from the "
                     f"journal {d['answers_missing']}")
    h = results["hostile"]
    lines.append(f"hostile: 8 MB x6 {h['six_8mb_prompts']}; nested {h['json_nested_100k']}; "
                 f"odd {h['garbage_and_odd_methods']}; max_tokens {h['max_tokens_1e9']}")
    lines.append(f"  half-sent {h['half_sent_requests']}; server peak RSS {h['server_peak_rss_mb']} MB "
                 f"(start {h['rss_mb_at_start']} MB)")
    return "\n".join(lines)


IDLE_FLOOD_MAX_S = 3.0  # a request next to 150 idle sockets (the read timeout is 5 s)


def violations(results: dict[str, Any]) -> list[str]:
    """Every check of the run that failed, as readable lines (empty when all hold)."""
    bad = []
    m = results["mixed"]
    for name, value in (("hung calls", m["hung"]), ("undocumented exceptions", m["undocumented"]),
                        ("slots left in use", m["slots_in_use_after"]),
                        ("lost rows", m["lost_rows"]), ("duplicated rows", m["duplicate_rows"]),
                        ("requests without a journal row", m["requests_without_row"]),
                        ("rows beyond requests that are not superseded/cancelled",
                         m["rows_without_request_beyond_neutral"]),
                        *((f"key runs in {k}", v) for k, v in m["key_runs"].items())):
        if value:
            bad.append(f"{name}: {value}")
    if m["fault_share_of_attempts"] < 0.30:
        bad.append(f"fault share {m['fault_share_of_attempts']:.0%} < 30%")
    for name, p in results.get("processes", {}).items():
        if p["answers_missing_from_journal"] or p["duplicate_rows"]:
            bad.append(f"processes ({name}): {p['answers_missing_from_journal']} answers missing, "
                       f"{p['duplicate_rows']} duplicated")
    if "sigkill" in results and results["sigkill"]["journal_opens_cleanly"] != results["sigkill"]["kills"]:
        bad.append(f"sigkill: journal opened cleanly {results['sigkill']['journal_opens_cleanly']}"
                   f"/{results['sigkill']['kills']} times")
    if "durable" in results and results["durable"]["answers_missing"]:
        bad.append(f"durable: {results['durable']['answers_missing']} answers not journaled")
    flood = results.get("hostile", {}).get("idle_socket_flood")
    if flood and (flood["slowest_s"] > IDLE_FLOOD_MAX_S or set(flood["statuses"]) != {200}):
        bad.append(f"idle sockets: {flood}")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="550 calls, 2 x 100, 3 kills")
    parser.add_argument("--postgresql", action="store_true", help="also 4 processes into PostgreSQL")
    parser.add_argument("--child-calls", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--child-forever", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--child-durable", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_durable:
        child_durable(*args.child_durable)
        return
    if args.child_calls:
        source, base_url, n, tag = args.child_calls
        child_calls(source, base_url, int(n), tag)
        return
    if args.child_forever:
        child_forever(*args.child_forever)
        return
    import torch

    torch.set_num_threads(1)
    n_calls, n_proc, per_proc, kills = (550, 2, 100, 3) if args.quick else (5500, 4, 1000, 6)
    results: dict[str, Any] = {"when": datetime.now(UTC).isoformat(), "quick": args.quick}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["JEVLAYA_HOME"] = str(tmp / "home")  # spill files stay in the run's folder
        results["mixed"] = asyncio.run(mixed(n_calls, 32, tmp))
        print(json.dumps(results["mixed"], indent=1), flush=True)
        proc, base_url = server_process("--model", "a=tiny:0", "--model", "b=tiny:1", "--model", "rl=tiny:2",
                                        "--fault", "rl=status=429,retry_after=0.2,probability=0.3")
        try:
            results["processes"] = {"sqlite": processes(str(tmp / "shared.db"), n_proc, per_proc, base_url)}
            if args.postgresql:
                pg, url = postgres_source()
                try:
                    results["processes"]["postgresql"] = processes(url, n_proc, per_proc, base_url)
                finally:
                    pg.stop()
            results["sigkill"] = sigkill(kills, tmp, base_url)
            results["durable"] = durable_kills(kills, tmp, base_url)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        results["hostile"] = hostile(300)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    print(table(results))
    print(f"written to {RESULTS}")
    bad = violations(results)
    print("checks: " + ("all hold" if not bad else "FAILED: " + "; ".join(bad)))
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
