"""The sync ``Broker``: one background loop, many threads, idempotent close, GC cleanup, the
embedded default, ``direct()``."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import threading
import time
from pathlib import Path

import pytest

from jevlaya_lab.broker import Broker, SyncLLMResult
from jevlaya_lab.broker.errors import ProviderError
from jevlaya_lab.journal import open_store
from jevlaya_lab.local import FaultProfile


def test_fifty_threads_through_one_broker(broker) -> None:
    b = broker("a", "b")
    with cf.ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda i: b.ask(f"question {i}", max_tokens=4), range(50)))
    assert all(isinstance(r, SyncLLMResult) and r.text for r in results)
    assert len({r.call_id for r in results}) == 50
    rows = b.calls()
    assert len(rows) == 50 and {r["status"] for r in rows} == {"ok"}
    assert all(s["in_flight"] == 0 for s in b.snapshot().values())


def test_close_is_idempotent_and_flushes_the_journal(server, db, cfg) -> None:
    b = Broker(db, models=cfg("a"), catalog=[])
    b.ask("x")
    b.close()
    b.close()
    assert b.closed and len(open_store(b.location).attempts()) == 1
    with pytest.raises(RuntimeError, match="closed"):
        b.ask("x")


def test_a_dropped_broker_is_cleaned_up_without_blocking(server, db, cfg) -> None:
    b = Broker(db, models=cfg("a"), catalog=[])
    b.ask("x")
    thread = b._runner.thread
    started = time.monotonic()
    del b  # the last reference: its finalizer runs here
    assert time.monotonic() - started < 0.1  # and only schedules the close
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(open_store(db).attempts()) == 1


def test_sync_methods_refuse_to_run_on_the_broker_loop(broker) -> None:
    b = broker("a")

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="own event loop"):
            b.ask("x")
    b._run(inside())


def test_embedded_default_serves_local_models_and_journals_per_user(tmp_path: Path,
                                                                      monkeypatch) -> None:
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    catalog = [{"name": "local/tiny", "base_url": "local://tiny", "model": "tiny"}]
    with Broker(catalog=catalog) as b:
        result = b.ask("hello")
        assert result.llm_name == "local/tiny" and result.text
        servers = b.engine._rt.embedded.servers
        assert list(servers) == ["tiny"]
        assert servers["tiny"].base_url.startswith("http://127.0.0.1:")
    assert b.engine._rt.embedded.servers == {}  # stopped with the broker
    assert len(open_store(tmp_path / "home" / "broker.db").attempts()) == 1


def test_packaged_catalog_fills_an_empty_database(tmp_path: Path, monkeypatch) -> None:
    """Seed (SQLite): an empty database is filled before the pool is built, from the copy of
    the list shipped in the package when no remote catalog answers."""
    monkeypatch.delenv("JEVLAYA_CATALOG_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    import sqlite3

    b = Broker(home=tmp_path, dotenv=tmp_path / "none.env")
    assert not (tmp_path / "broker.db").exists() or not sqlite3.connect(
        tmp_path / "broker.db").execute("SELECT COUNT(*) FROM models").fetchone()[0]
    snap = b.snapshot()  # the first call: no separate initialisation step
    raw = sqlite3.connect(tmp_path / "broker.db")
    stored = {r[0] for r in raw.execute("SELECT name FROM models WHERE origin = 'catalog'")}
    assert {"local/smollm2", "openai/gpt-4o-mini"} <= stored == set(b.llm_names)
    b.close()
    assert snap["local/smollm2"]["key"] == "not needed"
    assert snap["openai/gpt-4o-mini"]["key"] == "missing"


def test_unreachable_remote_catalog_logs_a_warning_and_keeps_the_database(
        tmp_path: Path, dead_url: str, caplog) -> None:
    """Seed (SQLite): an unreachable remote catalog is a logged warning, not an error."""
    with Broker(home=tmp_path, catalog=dead_url + "/catalog.json") as b:
        names = b.llm_names
    assert "local/smollm2" in names  # the packaged copy filled the empty database
    assert "not reachable" in caplog.text


def test_unreachable_remote_catalog_keeps_the_list_already_in_the_database(
        tmp_path: Path, dead_url: str, caplog) -> None:
    """Seed (SQLite): when the remote catalog is unreachable the broker logs a warning and uses
    the data in the database (not the packaged copy, which is only for an empty database)."""
    mine = [{"name": "stored/x", "base_url": "https://api.example.com/v1", "model": "x"}]
    with Broker(home=tmp_path, catalog=mine) as b:  # a catalog fetched earlier
        assert b.llm_names == ["stored/x"]
    with Broker(home=tmp_path, catalog=dead_url + "/catalog.json") as b:
        assert b.llm_names == ["stored/x"]
    assert "not reachable" in caplog.text and "WARNING" in caplog.text


def test_user_models_rank_before_the_catalog(tmp_path: Path, cfg) -> None:
    with Broker(home=tmp_path, models=cfg("a")) as b:
        assert b.llm_names[0] == "a" and b.ask("x").llm_name == "a"


def test_direct_calls_one_model_without_failover_or_journal(broker, server) -> None:
    b = broker("a", "b")
    assert b.direct("b").ask("hello").llm_name == "b"
    assert "".join(b.direct("b").stream("hello"))
    server.set_fault("b", FaultProfile(status=500))
    with pytest.raises(ProviderError) as info:
        b.direct("b").ask("hello")
    assert info.value.status == 500
    assert b.calls() == []
    with pytest.raises(ValueError, match="no journal row"):
        b.direct("a").ask("x").record_quality(1.0)
    with b.direct("a").stream("x") as direct_stream:
        assert "".join(direct_stream)
    with pytest.raises(ValueError, match="nothing to rate"):
        direct_stream.record_quality(1.0)


def test_bad_arguments_name_the_field(broker, db, tmp_path) -> None:
    b = broker("a")
    with pytest.raises(ValueError, match="prompt="):
        b.ask("")
    with pytest.raises(ValueError, match="messages="):
        b.chat("not a list")
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        b.chat([{"content": "no role"}])
    with pytest.raises(ValueError, match="LLMConfig.parallel=0"):
        Broker(db, models=[{"name": "x", "base_url": "http://x/v1", "model": "m",
                            "parallel": 0}])
    with pytest.raises(ValueError, match="unknown field"):
        Broker(db, models=[{"name": "x", "base_url": "http://x/v1", "model": "m",
                            "api_key": "sk-secret"}])
    with pytest.raises(ValueError, match="scope="):
        b.for_scope("a/b")


def test_concurrent_threads_see_one_loop(broker) -> None:
    b = broker("a")
    seen = set()

    def call() -> None:
        b.ask("x", max_tokens=2)
        seen.add(b._runner.thread.ident)
    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 1


def test_an_async_broker_refuses_a_second_event_loop(abroker) -> None:
    """Its connections live on the loop of its first call; it is closed there too (closing it
    after that loop ended would leave their sockets to the garbage collector)."""
    import asyncio

    b = abroker("a")
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(b.ask("x")).text
        with pytest.raises(RuntimeError, match="another event loop"):
            asyncio.run(b.ask("x"))
        first.run_until_complete(b.aclose())
    finally:
        first.close()


def test_labels_and_provider_params_are_checked(broker) -> None:
    b = broker("a")
    with pytest.raises(ValueError, match="operation=3"):
        b.ask("x", operation=3)
    with pytest.raises(ValueError, match="trace_id=''"):
        b.stream("x", trace_id="")
    with pytest.raises(ValueError, match="model=...: the broker sets"):
        b.ask("x", model="gpt-4")
    assert b.ask("x", max_tokens=2, temperature=0.0).text  # other params reach the provider


def test_prompt_and_answer_text_are_journaled_only_on_request(broker) -> None:
    b = broker("a")
    b.ask("secret prompt")
    assert b.calls()[0]["prompt_text"] is None and b.calls()[0]["answer_text"] is None
    b2 = broker("a", store_text=True)
    answer = b2.ask("kept prompt")
    row = b2.calls()[0]  # newest first
    assert row["prompt_text"] == "kept prompt" and row["answer_text"] == answer.text


def test_a_reachable_remote_catalog_refreshes_the_database(tmp_path: Path, cfg) -> None:
    """Seed (SQLite): later the list is updated automatically (from the remote catalog)."""
    import functools
    import json
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    site = tmp_path / "site"
    site.mkdir()
    remote = [{"name": "remote/x", "base_url": "https://api.example.com/v1", "model": "x",
               "api_key_ref": "X_KEY"}]
    (site / "catalog.json").write_text(json.dumps({"models": remote}))
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/catalog.json"
        with Broker(home=tmp_path, models=cfg("a"), catalog=url) as b:
            assert b.llm_names == ["a", "remote/x"]  # the user's entries stay first
        with Broker(home=tmp_path) as b:  # later opens keep the stored catalog
            assert "remote/x" in b.llm_names and "local/smollm2" not in b.llm_names
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_results_display_as_escaped_html_and_json(broker) -> None:
    from jevlaya_lab.broker.results import LLMResult

    result = LLMResult("<script>alert(1)</script>", "m", "c" * 32, "t")
    bundle = result._repr_mimebundle_()
    assert "<script>" not in bundle["text/html"] and "&lt;script&gt;" in bundle["text/html"]
    assert bundle["application/vnd.jevlaya+json"]["text"] == result.text
    live = broker("a").ask("x")._repr_mimebundle_()
    assert live["application/vnd.jevlaya+json"]["llm_name"] == "a"


_CHILD = """
import sys
from jevlaya_lab.broker import Broker, LLMConfig
url, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Broker(db, models=[LLMConfig(name="a", base_url=url, model="a")], catalog=[]) as b:
    for i in range(n):
        b.ask(f"q{i}", max_tokens=2).record_quality(0.5)
"""


def test_two_processes_with_brokers_share_one_sqlite_journal_losing_no_row(server, db) -> None:
    """Seed (SQLite): several users of one file rely on WAL and the file lock."""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, server.base_url, str(db), "40"])
             for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = open_store(db)
    assert len(store.attempts(status="ok")) == 80 and len(store.ratings()) == 80
