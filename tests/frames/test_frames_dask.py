"""frames.decide on a Dask DataFrame, computed on a real LocalCluster of 2 worker processes on
127.0.0.1: lazy with a declared meta, equal to the pandas run row for row, each worker loading
the checkpoint once, and no row lost or duplicated when a worker is SIGKILLed mid-run.

One cluster serves the module's tests (starting one costs seconds), except the one that closes its
own cluster to see what a worker does at exit."""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import pandas as pd
import pytest

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from jevlaya_lab.frames import decide, worker_models  # noqa: E402

# the slow hook below travels to the workers by value: they cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=":0", worker_dashboard_address=":0") as cluster, \
            distributed.Client(cluster, timeout=60) as c:
        c.wait_for_workers(2, timeout=60)
        yield c


def _table(n: int) -> pd.DataFrame:
    words = ["refund", "crash", "invoice", "parcel", "cancel", "login", "spam offer", "export"]
    texts = [f"ticket {i}: my {words[i % len(words)]} problem, case {i * 7 % 13}" for i in range(n)]
    return pd.DataFrame({"body": texts}, index=pd.Index([f"T-{1000 + i}" for i in range(n)], name="ticket"))


def test_lazy_result_with_meta_equals_the_pandas_run_and_each_worker_loads_once(client, questions, tiny_dir):
    table = _table(40)
    expected = decide(table, questions(), checkpoint=tiny_dir, state="body", min_confidence=0.52,
                      batch_size=4, progress=False)
    lazy = decide(dd.from_pandas(table, npartitions=8), questions(), checkpoint=tiny_dir, state="body",
                  min_confidence=0.52, batch_size=4)
    assert isinstance(lazy, dd.DataFrame)
    assert list(lazy.columns) == list(expected.columns)
    assert dict(lazy.dtypes) == dict(expected.dtypes)  # the declared meta, before anything ran
    got = lazy.compute()
    pd.testing.assert_frame_equal(got, expected, check_exact=False, atol=1e-6, rtol=0, check_index_type=False)
    loads = client.run(worker_models)
    assert len(loads) == 2
    per_worker = [info["loads"].get(str(tiny_dir), 0) for info in loads.values()]
    assert max(per_worker) == 1 and sum(per_worker) >= 1  # 8 partitions, at most one load per process


def test_the_dashboard_link_the_client_reports_serves_the_status_page(client):
    """What a notebook user clicks: the client's dashboard link (on loopback, as the cluster is)
    answers with Dask's bokeh status page, and the client's card in a notebook carries the link."""
    from urllib.parse import urlsplit

    import httpx

    link = client.dashboard_link
    assert urlsplit(link).hostname == "127.0.0.1" and urlsplit(link).path.endswith("/status")
    reply = httpx.get(link, timeout=30, follow_redirects=True)
    assert reply.status_code == 200, reply.text[:300]
    assert "bokeh" in reply.text.lower() and "dask" in reply.text.lower()
    assert link in client._repr_html_()


def test_loaded_models_are_refused_for_dask(questions, tiny_dir):
    from jevlaya_lab.decisions.agent import Agent

    with pytest.raises(TypeError, match="checkpoint=<its source>"):
        decide(dd.from_pandas(_table(4), npartitions=2), questions(), agent=Agent(tiny_dir), state="body")


class _Slow:
    """Makes every batch take a while, so a worker can be killed while rows are in flight."""

    def on_predict_start(self, ctx) -> None:
        time.sleep(0.25)


def _probe_at_exit(path: str) -> int:
    """Registered in a worker before it loads anything, so at exit it runs after every exit step
    registered later (atexit runs them last-in, first-out): it writes what the collector has frozen."""
    import atexit
    import gc

    def write() -> None:
        with open(path, "w") as out:
            out.write(str(gc.get_freeze_count()))

    atexit.register(write)
    return os.getpid()


def test_a_worker_that_loaded_a_model_leaves_without_the_last_collection(questions, tiny_dir, tmp_path):
    """A nanny kills a worker still alive 4 s after it asked it to stop, and the kill prints a warning
    in the user's cell; walking torch's and transformers' objects again at interpreter teardown took
    over 4 s on a busy machine. A worker that loaded a model freezes the collector when it exits
    (what bench/frames.py's cluster.close figures measure); a worker that loaded nothing does not."""
    probes = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=":0", worker_dashboard_address=":0") as cluster, \
            distributed.Client(cluster, timeout=60) as c:
        c.wait_for_workers(2, timeout=60)
        loader, idle = sorted(c.scheduler_info()["workers"])
        for address in (loader, idle):
            probes[address] = tmp_path / f"frozen-{len(probes)}"
            c.run(_probe_at_exit, str(probes[address]), workers=[address])
        lazy = decide(dd.from_pandas(_table(8), npartitions=2), questions(), checkpoint=tiny_dir, state="body")
        assert len(c.compute(lazy, workers=[loader]).result(timeout=120)) == 8
        assert [info["loads"] for info in c.run(worker_models, workers=[idle]).values()] == [{}]
    assert int(probes[loader].read_text()) > 0  # everything live at exit, frozen
    assert int(probes[idle].read_text()) == 0


@pytest.mark.timeout(480)  # a restarted worker imports torch and loads the checkpoint again: slow on a loaded machine
def test_a_worker_killed_mid_run_loses_and_duplicates_no_row(client, questions, tiny_dir):
    table = _table(48)
    expected = decide(table, questions(), checkpoint=tiny_dir, state="body", batch_size=4, progress=False)
    lazy = decide(dd.from_pandas(table, npartitions=16), questions(), checkpoint=tiny_dir, state="body",
                  batch_size=4, hooks=[_Slow()])
    future = client.compute(lazy)
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 60
    victim = None
    while time.monotonic() < deadline and victim is None:  # kill a worker while it runs a partition
        processing = client.processing()
        busy = [address for address, keys in processing.items() if keys and address in pids]
        if busy:
            victim = busy[0]
        else:
            time.sleep(0.05)
    assert victim is not None, "no worker was busy"
    os.kill(pids[victim], signal.SIGKILL)
    got = future.result(timeout=400)
    assert len(got) == len(table) and got.index.is_unique
    pd.testing.assert_frame_equal(got, expected, check_exact=False, atol=1e-6, rtol=0, check_index_type=False)


# -- frames.ask on the workers: one PostgreSQL journal, shared cooldowns and a shared rate limit ----
import functools  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import secrets  # noqa: E402
import threading  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402
from pathlib import Path  # noqa: E402

from jevlaya_lab.frames import ask  # noqa: E402

LIMIT, WINDOW = 3, 1.0  # the fake provider's rate limit: requests per epoch-aligned window


def _journal_fixtures():
    path = Path(__file__).resolve().parents[1] / "journal" / "conftest.py"
    spec = importlib.util.spec_from_file_location("frames_pg_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pg_url():
    helpers = _journal_fixtures()
    server = helpers.PostgresServer(helpers.find_pg_bindir())
    try:
        server.start()
        schema = "frames_" + secrets.token_hex(4)
        with server.admin() as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        yield server.url(schema=schema)
    finally:
        server.stop()


class CountingProvider:
    """An OpenAI-compatible endpoint on 127.0.0.1 that records every request it receives and
    answers 429 (Retry-After: the rest of the window) above LIMIT per WINDOW, or when told to."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[tuple[float, int]] = []  # (time.time(), status answered)
        self.forced: list[float] = []  # Retry-After of the next requests to refuse
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                now = time.time()
                window = now // WINDOW
                with provider.lock:
                    sent = sum(1 for t, s in provider.received if t // WINDOW == window and s == 200)
                    if provider.forced:
                        status, retry = 429, provider.forced.pop(0)
                    elif sent >= LIMIT:
                        status, retry = 429, (window + 1) * WINDOW - now
                    else:
                        status, retry = 200, 0.0
                    provider.received.append((now, status))
                if status == 429:
                    body = json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}).encode()
                    self.send_response(429)
                    self.send_header("Retry-After", f"{max(retry, 0.05):.2f}")
                else:
                    body = json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _worker_broker(journal: str, url: str):
    """What each worker calls once: a Broker on the shared journal with the shared book."""
    from jevlaya_lab import Broker, LLMConfig
    from jevlaya_lab.journal.cooldowns import SharedCooldowns

    # a little under the provider's limit, as the README advises: a request reaches the provider
    # some time after its slot, and on a loaded machine that delay varies by tenths of a second
    book = SharedCooldowns(journal, limits={"fake": (LIMIT, WINDOW * 1.25)}, probe_s=0.5, refresh_s=0.05)
    return Broker(journal, models=[LLMConfig(name="fake", base_url=url, model="m", parallel=2)], catalog=[],
                  store_text=True, cooldowns=book)


def test_workers_share_one_journal_a_rate_limit_and_cooldowns(client, pg_url):
    provider = CountingProvider()
    try:
        factory = functools.partial(_worker_broker, pg_url, provider.url)
        table = pd.DataFrame({"body": [f"ticket {i}" for i in range(16)]},
                             index=pd.Index([f"T-{i}" for i in range(16)], name="ticket"))
        started = time.time()
        lazy = ask(dd.from_pandas(table, npartitions=4, sort=False), "Summarise: {body}", broker=factory, concurrency=2,
                   wait=60, max_tokens=2)
        assert isinstance(lazy, dd.DataFrame) and list(lazy.columns) == ["answer", "model", "latency", "error",
                                                                          "resumed"]
        got = lazy.compute()
        assert got.index.equals(table.index) and got["answer"].notna().all(), got["error"].dropna().tolist()
        with provider.lock:
            received = list(provider.received)
        per_window: dict[float, int] = {}
        for t, _ in received:
            per_window[t // WINDOW] = per_window.get(t // WINDOW, 0) + 1
        # both workers together: within the limit per window, plus at most one probe
        assert max(per_window.values()) <= LIMIT + 1, per_window
        assert len(received) <= len(table) + len(per_window)
        assert time.time() - started >= (len(table) / LIMIT - 1) * WINDOW  # the limit did pace them

        # a 429 seen by one worker cools the model for both: nothing is sent until it ends, then one probe
        with provider.lock:
            provider.received.clear()
            provider.forced.append(2.0)
        again = ask(dd.from_pandas(table, npartitions=4, sort=False), "Again: {body}", broker=factory, concurrency=2,
                    wait=60, max_tokens=2, operation="frames.again").compute()
        assert again["answer"].notna().all()
        with provider.lock:
            received = list(provider.received)
        refused = [t for t, s in received if s == 429]
        hit = refused[0]  # the forced 429 (Retry-After 2 s) is the first request received
        during = [t for t, _ in received if hit + 0.3 < t < hit + 1.9]
        assert during == [], "a worker sent a request while the model was cooling"
    finally:
        provider.close()
