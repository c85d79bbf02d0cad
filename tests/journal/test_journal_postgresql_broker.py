"""A real Broker over the local OpenAI-compatible server with its journal in PostgreSQL
(``postgresql://...`` for several processes/servers), and the pandas analysis
reading that journal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from jevlaya_lab import analysis
from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.catalog import CATALOG_URL_ENV, fill_store, packaged_catalog
from jevlaya_lab.journal import open_store
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def llm_server() -> Iterator[Any]:
    with serve({name: tiny_chat_model(seed=i, name=name) for i, name in enumerate("ab")}) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEV_PG_TEST_KEY", "sk-env-only")


def models(server: Any) -> list[LLMConfig]:
    return [LLMConfig(name=n, base_url=server.base_url, model=n, api_key_ref="JEV_PG_TEST_KEY")
            for n in "ab"]


def run_calls(broker: Broker, server: Any) -> list[str]:
    """Three calls: a failover from a rate-limited model, then two plain answers, one rated."""
    server.set_fault("a", FaultProfile(status=429, retry_after=30))
    try:
        first = broker.ask("hello", operation="greet", max_tokens=3)
    finally:
        server.set_fault("a", None)
    second = broker.ask("again", operation="greet", max_tokens=3)
    second.record_quality(0.75)
    third = broker.ask("once more", max_tokens=3)
    return [first.llm_name, second.llm_name, third.llm_name]


def test_broker_journals_attempts_in_postgresql(llm_server: Any, pg_server: Any,
                                                pg_url: str) -> None:
    """One row per attempt (the rate-limited one too), ratings as rows; calls() and
    stats() read them back from PostgreSQL; keys from the environment are not copied there."""
    with Broker(pg_url, models=models(llm_server), catalog=[]) as broker:
        assert run_calls(broker, llm_server) == ["b", "b", "b"]
        rows = broker.calls()[::-1]  # oldest first
        assert [(r["llm_name"], r["status"], r["http_status"]) for r in rows] == [
            ("a", "rate_limited", 429), ("b", "ok", 200), ("b", "ok", 200), ("b", "ok", 200)]
        assert rows[0]["trace_id"] == rows[1]["trace_id"] and rows[0]["cooldown_until"]
        stats = broker.stats()
        assert stats["a"]["statuses"] == {"rate_limited": 1}
        assert stats["b"]["statuses"] == {"ok": 3} and stats["b"]["latency_ms_p50"] > 0
        assert broker.stats(operation="greet")["b"]["ratings"] == 1
        assert pg_server.password not in repr(broker) and pg_server.password not in \
            broker.location
        broker.store_key("MY_STORED_KEY", "sk-stored")
    store = open_store(pg_url)  # what another process sees
    assert store.attempts() == [{k: v for k, v in r.items() if k != "score"} for r in rows]
    assert [(r["llm_name"], r["score"]) for r in store.ratings()] == [("b", 0.75)]
    assert [e["name"] for e in store.registry()] == ["a", "b"]
    assert store.get_key("JEV_PG_TEST_KEY") is None  # the environment's key stays there
    assert store.get_key("MY_STORED_KEY") == "sk-stored"
    assert "sk-env-only" not in repr(store.attempts())
    store.close()


def test_the_packaged_catalog_fills_a_database_once_as_in_sqlite(
        pg_server: Any, pg_database: str, pg_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed (local database): an empty database is filled from the package's copy of the
    catalog before the pool is built; one whose catalog the user emptied (``catalog=[]``)
    stays empty, in PostgreSQL as in SQLite."""
    monkeypatch.delenv(CATALOG_URL_ENV, raising=False)
    fresh = open_store(pg_server.url(pg_database))
    fill_store(fresh, None)
    assert [e["name"] for e in fresh.registry()] == [
        e.name for e in packaged_catalog()]
    for source in (tmp_path / "j.db", pg_url):
        store = open_store(source)
        fill_store(store, [])
        fill_store(store, None)
        assert store.registry() == [], source
        store.close()
    fresh.close()


def test_two_brokers_on_one_postgresql_journal_see_each_others_calls(
        llm_server: Any, pg_url: str) -> None:
    with Broker(pg_url, models=models(llm_server), catalog=[]) as one, \
            Broker(pg_url, models=models(llm_server), catalog=[]) as two:
        one.ask("from one", max_tokens=2)
        two.ask("from two", max_tokens=2)
        one.calls(), two.calls()  # each flushes its own pending rows
        assert one.calls() == two.calls() and len(one.calls()) == 2


def test_analysis_reads_a_postgresql_journal_like_the_sqlite_one(
        llm_server: Any, pg_server: Any, pg_url: str, tmp_path: Path) -> None:
    """``load_journal`` takes the postgresql:// URL (or the store) and answers the same
    summaries as for a SQLite journal with the same rows."""
    with Broker(pg_url, models=models(llm_server), catalog=[]) as broker:
        run_calls(broker, llm_server)
    pg_rows = open_store(pg_url)
    lite = open_store(tmp_path / "copy.db")
    lite.append(pg_rows.attempts(), [{k: v for k, v in r.items() if k != "rating_id"}
                                     for r in pg_rows.ratings()])
    lite.close()
    from_pg = analysis.load_journal(pg_url)
    from_lite = analysis.load_journal(tmp_path / "copy.db")
    assert pg_server.password not in from_pg.source
    assert len(from_pg.attempts) == 4
    for helper in (analysis.calls_per_model, analysis.error_rates, analysis.failover_rate,
                   analysis.quality_by_operation):
        assert helper(from_pg).equals(helper(from_lite)), helper.__name__
    assert from_pg.summary() == from_lite.summary()
    assert analysis.load_journal(pg_rows).attempts.equals(from_pg.attempts)
    pg_rows.close()


def test_analysis_refuses_unknown_urls_without_showing_the_password() -> None:
    with pytest.raises(ValueError, match="not a journal.*postgresql://") as info:
        analysis.load_journal("mysql://me:hunter2@127.0.0.1/j")
    assert "hunter2" not in str(info.value)


def test_disable_llm_persists_in_postgresql(llm_server: Any, pg_url: str) -> None:
    """A model disabled by one broker stays disabled for the next broker on the same
    PostgreSQL journal (and for another reader of it) until ``enable_llm``."""
    with Broker(pg_url, models=models(llm_server), catalog=[]) as first:
        first.disable_llm("a")
        assert first.ask("x", max_tokens=2).llm_name == "b"
    assert stored_disabled(pg_url) == {"a"}
    with Broker(pg_url, models=models(llm_server), catalog=[]) as second:
        assert second.get("a").disabled and second.snapshot()["a"]["disabled"]
        assert second.ask("x", max_tokens=2).llm_name == "b"
        second.enable_llm("a")
    assert stored_disabled(pg_url) == set()
    with Broker(pg_url, models=models(llm_server), catalog=[]) as third:
        assert not third.get("a").disabled
        assert third.ask("x", max_tokens=2).llm_name == "a"


def stored_disabled(source: str) -> set[str]:
    """The disabled marks as another process reads them."""
    store = open_store(source)
    try:
        return store.disabled_models()
    finally:
        store.close()
