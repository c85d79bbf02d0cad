"""Pool administration: ``disable_llm`` persists in the database, ``get``,
``count`` and ``ensure_pool`` (the degraded flag: ``test_broker_parity.py``). Against the
real local server, with real SQLite files (PostgreSQL: tests/journal)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.errors import NoLLMAvailableError
from jevlaya_lab.journal import open_store
from jevlaya_lab.local import FaultProfile


def test_a_disabled_model_stays_disabled_in_the_next_broker_until_enabled(broker, server,
                                                                          db: Path) -> None:
    first = broker("a", "b")
    first.disable_llm("a")
    assert first.ask("x").llm_name == "b"
    first.close()
    second = broker("a", "b")  # a new broker over the same file
    assert second.get("a").disabled and second.snapshot()["a"]["disabled"]
    before = server.request_count("a")
    assert [second.ask(f"q{i}").llm_name for i in range(3)] == ["b", "b", "b"]
    assert server.request_count("a") == before  # a is never asked
    second.enable_llm("a")
    assert second.ask("x").llm_name == "a"
    second.close()
    third = broker("a", "b")
    assert not third.get("a").disabled and third.ask("x").llm_name == "a"
    assert stored_disabled(db) == set()


def stored_disabled(db: Path) -> set[str]:
    """What another reader of the same file sees."""
    store = open_store(db)
    try:
        return store.disabled_models()
    finally:
        store.close()


def test_the_disabled_mark_is_in_the_database_not_in_the_process(broker, db: Path) -> None:
    b = broker("a", "b")
    b.disable_llm("b")
    assert stored_disabled(db) == {"b"}
    b.enable_llm("b")
    assert stored_disabled(db) == set()


def test_every_model_disabled_and_persisted_is_all_disabled_next_time(broker) -> None:
    b = broker("a")
    b.disable_llm("a")
    b.close()
    with pytest.raises(NoLLMAvailableError) as no:
        broker("a").ask("x")
    assert no.value.reason == "all_disabled"


def test_get_reads_one_model_live(broker, server) -> None:
    b = broker("a", "b")
    a = b.get("a")
    assert a.name == "a" and a.config == LLMConfig(name="a", base_url=server.base_url, model="a")
    assert not a.disabled and a.state()["phase"] == "available"
    server.set_fault("a", FaultProfile(status=429, retry_after=30))
    assert b.ask("x").llm_name == "b"
    state = a.state()  # the same object follows the pool
    assert state["phase"] == "cooling" and state["cooldown_until"] is not None
    assert state["consecutive_failures"] == 1 and state["key"] == "not needed"
    b.disable_llm("a")
    assert a.disabled and a.state()["phase"] == "disabled"
    assert "disabled" in repr(a)
    with pytest.raises(KeyError, match="'zzz' is not in the registry; known: a, b"):
        b.get("zzz")


def test_count_and_ensure_pool(broker, server, tmp_path: Path) -> None:
    b = broker("a", "b")
    b.ensure_pool()
    assert b.count() == 2
    b.disable_llm("a")
    b.disable_llm("b")
    b.ensure_pool()  # a pool of disabled models exists: not an error (snapshot says degraded)
    assert b.count() == 2 and b.snapshot().degraded
    with Broker(tmp_path / "empty.db", catalog=[]) as empty:
        with pytest.raises(NoLLMAvailableError) as no:
            empty.ensure_pool()
        assert no.value.reason == "empty_pool" and empty.count() == 0
