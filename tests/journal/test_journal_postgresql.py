"""The PostgreSQL journal against a real server: the same rows and rules as the SQLite file,
its own schema, thread safety, lost connections, and passwords that never leak."""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jevlaya_lab.journal import (
    SCHEMA_VERSION,
    JournalSchemaError,
    JournalWriter,
    UnsupportedSourceError,
    open_store,
)
from jevlaya_lab.journal.postgresql import PostgreSQLStore
from jevlaya_lab.journal import JournalUnavailableError, Store


def row(call_id: str, called_at: str | None = None, **extra: object) -> dict[str, object]:
    return {"call_id": call_id, "trace_id": "t", "llm_name": "m", "status": "ok",
            "called_at": called_at or datetime.now(UTC).isoformat(), **extra}


def full_row(i: int) -> dict[str, Any]:
    """An attempt with every column set, times a few milliseconds apart."""
    at = datetime(2026, 11, 30, 6, 0, tzinfo=UTC) + timedelta(milliseconds=3 * i)
    return {"call_id": f"c{i}", "trace_id": f"t{i % 3}", "llm_name": "ab"[i % 2],
            "operation": "sum" if i % 2 else None, "scope": "team" if i % 4 == 0 else None,
            "status": ("ok", "rate_limited", "error")[i % 3], "called_at": at.isoformat(),
            "latency_ms": 12.5 + i, "first_token_ms": 3.25 if i % 2 else None,
            "http_status": (200, 429, 500)[i % 3], "error_detail": None if i % 3 == 0 else "x",
            "prompt_tokens": 7 + i, "completion_tokens": i, "budget_ms": 1000.0,
            "cooldown_until": (at + timedelta(seconds=60)).isoformat() if i % 3 == 1 else None,
            "prompt_text": "héllo ✓" if i == 0 else None, "answer_text": None}


def ratings_for(n: int) -> list[dict[str, Any]]:
    return [{"call_id": f"c{i}", "trace_id": f"t{i % 3}", "llm_name": "ab"[i % 2],
             "operation": "sum" if i % 2 else None, "scope": None, "score": i / n,
             "rated_at": f"2026-11-30T07:00:0{i % 10}+00:00"} for i in range(n)]


def test_postgresql_urls_open_a_postgresql_store(pg_server: Any, pg_url: str) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgreSQLStore) and isinstance(store, Store)
    assert store.location == pg_url.replace(f":{pg_server.password}@", "@")
    store.close()
    alias = open_store(pg_url.replace("postgresql://", "postgres://", 1))
    assert isinstance(alias, PostgreSQLStore)
    alias.close()


def test_same_rows_in_same_rows_out_as_sqlite(tmp_path: Path, pg_url: str) -> None:
    """Every column, filter, ``since`` and ``limit`` answers exactly what the SQLite file does."""
    lite, pg = open_store(tmp_path / "j.db"), open_store(pg_url)
    attempts, ratings = [full_row(i) for i in range(12)], ratings_for(12)
    for store in (lite, pg):
        store.append(attempts[:5])
        store.append(attempts[5:], ratings)
    queries: list[dict[str, Any]] = [
        {}, {"call_id": "c4"}, {"trace_id": "t1"}, {"llm_name": "a"}, {"operation": "sum"},
        {"scope": "team"}, {"status": "rate_limited"}, {"since": attempts[7]["called_at"]},
        {"limit": 3}, {"llm_name": "b", "status": "error", "limit": 1}]
    for q in queries:
        assert pg.attempts(**q) == lite.attempts(**q), q
    assert pg.attempts()[0] == {**dict.fromkeys(pg.attempts()[0]), **attempts[0]}
    for q in ({}, {"call_id": "c3"}, {"trace_id": "t2"}, {"limit": 2}):
        assert pg.ratings(**q) == lite.ratings(**q), q
    assert pg.rating_totals() == lite.rating_totals()
    assert pg.attempts(call_id="nope") == [] and pg.ratings(trace_id="nope") == []
    lite.close(), pg.close()


def test_times_order_byte_wise_like_sqlite(tmp_path: Path, pg_url: str) -> None:
    """ISO text with and without microseconds sorts and filters as in SQLite (COLLATE "C")."""
    times = ["2026-11-30T06:00:01+00:00", "2026-11-30T06:00:01.500000+00:00",
             "2026-11-30T06:00:00.999999+00:00", "2026-11-30T06:00:02+00:00"]
    lite, pg = open_store(tmp_path / "j.db"), open_store(pg_url)
    for store in (lite, pg):
        store.append([row(f"r{i}", t) for i, t in enumerate(times)])
    assert [r["call_id"] for r in pg.attempts()] == [r["call_id"] for r in lite.attempts()]
    assert pg.attempts(since=times[1]) == lite.attempts(since=times[1])
    lite.close(), pg.close()


def test_journal_is_append_only_one_row_per_call_id(pg_url: str) -> None:
    store = open_store(pg_url)
    store.append([row("a")])
    with pytest.raises(psycopg.IntegrityError, match="call_id"):
        store.append([row("b"), row("a")])  # one row per attempt: a call_id is never rewritten
    assert [r["call_id"] for r in store.attempts()] == ["a"]  # the whole batch rolled back
    store.append([], [])  # nothing to write is not an error
    store.close()


def test_schema_version_mismatch_is_a_clear_error(pg_server: Any, pg_url: str) -> None:
    open_store(pg_url).close()
    schema = pg_url.rsplit("%3D", 1)[1]
    with pg_server.admin() as conn:
        conn.execute(f"UPDATE {schema}.meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(JournalSchemaError,
                       match=f"schema_version=99.*expects {SCHEMA_VERSION}") as info:
        open_store(pg_url)
    assert pg_server.password not in str(info.value) and schema in str(info.value)


def test_retention_purges_old_rows_at_most_once_per_interval_across_stores(pg_url: str) -> None:
    """Mirrors the SQLite rule; a second store (another process's view) sees the first purge."""
    store, other = open_store(pg_url), open_store(pg_url)
    old = (datetime.now(UTC) - timedelta(days=91)).isoformat()
    store.append([row("old", old), row("new")],
                 [{"call_id": "old", "llm_name": "m", "score": 1.0, "rated_at": old}])
    assert store.purge(90) == 2
    assert [r["call_id"] for r in store.attempts()] == ["new"] and store.ratings() == []
    store.append([row("old2", old)])
    assert store.purge(90) == 0  # purged less than an hour ago
    assert other.purge(90) == 0  # ... by anyone sharing the database
    assert other.purge(90, min_interval_s=0) == 1
    store.close(), other.close()


def test_registry_order_and_user_entries_survive_catalog_updates(tmp_path: Path,
                                                                 pg_url: str) -> None:
    lite, pg = open_store(tmp_path / "j.db"), open_store(pg_url)
    mine = {"name": "mine", "base_url": "http://x/v1", "model": "m", "labels": ["local"]}
    for store in (lite, pg):
        assert not store.catalog_filled()  # type: ignore[attr-defined]
        store.put_user_models([mine, {"name": "also", "base_url": "http://z/v1", "model": "z"}])
        store.replace_catalog([{"name": "cat", "base_url": "http://y/v1", "model": "c"},
                               {"name": "mine", "base_url": "http://evil/v1", "model": "x"}])
        store.replace_catalog([{"name": "cat2", "base_url": "http://y/v1", "model": "c",
                                "weight": 0.9, "parallel": 2},
                               {"name": "cat", "base_url": "http://y/v1", "model": "c"}])
        store.put_user_models([{**mine, "model": "m2"}])  # an update keeps its place
        assert store.catalog_filled()  # type: ignore[attr-defined]
    assert pg.registry() == lite.registry()
    assert [(e["name"], e["origin"], e["model"]) for e in pg.registry()] == [
        ("mine", "user", "m2"), ("also", "user", "z"), ("cat2", "catalog", "c"),
        ("cat", "catalog", "c")]
    assert pg.registry()[0]["labels"] == ("local",)
    lite.close(), pg.close()


def test_keys_are_stored_only_when_set(pg_url: str) -> None:
    store = open_store(pg_url)
    assert store.get_key("OPENAI_API_KEY") is None
    store.set_key("OPENAI_API_KEY", "sk-1")
    store.set_key("OPENAI_API_KEY", "sk-2")
    assert store.get_key("OPENAI_API_KEY") == "sk-2"
    store.set_key("OPENAI_API_KEY", None)
    assert store.get_key("OPENAI_API_KEY") is None
    store.close()


def test_tables_live_in_their_own_schema_by_default(pg_server: Any, pg_database: str) -> None:
    """A shared database belongs to other applications too: nothing lands in ``public``."""
    store = open_store(pg_server.url(pg_database))
    store.append([row("a")])
    with pg_server.admin(pg_database) as conn:
        tables = conn.execute("SELECT table_schema, table_name FROM information_schema.tables "
                              "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
                              ).fetchall()
    assert sorted(tables) == [("jevlaya_lab", t) for t in
                              ("attempts", "keys", "meta", "models", "ratings")]
    store.close()


def test_a_search_path_picks_another_schema_and_journal(pg_server: Any, pg_url: str) -> None:
    elsewhere = open_store(pg_url)
    elsewhere.append([row("here")])
    default = open_store(pg_server.url())
    assert all(r["call_id"] != "here" for r in default.attempts())
    with pytest.raises(UnsupportedSourceError, match="no existing schema.*CREATE SCHEMA") as info:
        open_store(pg_server.url(schema="missing_schema"))
    assert pg_server.password not in str(info.value)
    elsewhere.close(), default.close()


def test_a_search_path_the_database_sets_is_respected(pg_server: Any, pg_database: str) -> None:
    with pg_server.admin(pg_database) as conn:
        conn.execute("CREATE SCHEMA llm_journal")
        conn.execute(f"ALTER DATABASE {pg_database} SET search_path = llm_journal")
    store = open_store(pg_server.url(pg_database))
    store.append([row("a")])
    store.close()
    with pg_server.admin(pg_database) as conn:
        assert conn.execute("SELECT call_id FROM llm_journal.attempts").fetchall() == [("a",)]


def test_every_method_is_thread_safe_on_one_store(pg_url: str) -> None:
    store = open_store(pg_url)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(40):
                store.append([row(f"{t}-{i}")], [{"call_id": f"{t}-{i}", "llm_name": "m",
                                                  "score": 0.5, "rated_at": row("x")["called_at"]}])
                store.attempts(trace_id="t", limit=5)
                store.set_key(f"K{t}", str(i))
                store.rating_totals()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert errors == []
    assert len({r["call_id"] for r in store.attempts()}) == 320
    assert store.rating_totals() == {("m", ""): (320, 160.0)}
    assert [store.get_key(f"K{t}") for t in range(8)] == ["39"] * 8
    store.close()


def test_writer_flush_and_close_lose_nothing(pg_url: str) -> None:
    store = open_store(pg_url)
    writer = JournalWriter(store)
    for i in range(300):
        writer.attempt(row(f"c{i}"))
    writer.rating({"call_id": "c1", "llm_name": "m", "score": 1.0, "rated_at": "2026"})
    writer.flush()
    assert len(store.attempts()) == 300 and len(store.ratings()) == 1
    writer.close()
    store.close()


def terminate_backends(pg_server: Any) -> int:
    with pg_server.admin() as conn:
        return len(conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'jevlaya_lab' AND pid <> pg_backend_pid()").fetchall())


def test_a_lost_connection_is_replaced(pg_server: Any, pg_url: str) -> None:
    """Reads reconnect by themselves; a write fails once with JournalUnavailableError (naming
    no password) and the JournalWriter's retry lands the rows on a fresh connection."""
    store = open_store(pg_url)
    store.append([row("before")])
    assert terminate_backends(pg_server) >= 1
    assert [r["call_id"] for r in store.attempts()] == ["before"]
    assert terminate_backends(pg_server) >= 1
    with pytest.raises(JournalUnavailableError, match="did not answer") as info:
        store.append([row("lost")])
    assert pg_server.password not in str(info.value) and store.location in str(info.value)
    store.append([row("after")])
    assert terminate_backends(pg_server) >= 1
    writer = JournalWriter(store)
    writer.attempt(row("retried"))
    writer.close()
    assert [r["call_id"] for r in store.attempts()] == ["before", "after", "retried"]
    store.close()


def test_lock_waits_are_bounded(pg_server: Any, pg_url: str) -> None:
    """Registry writes wait for another process's registry write at most ``lock_timeout_s``."""
    store = PostgreSQLStore(pg_url, lock_timeout_s=0.3)
    with pg_server.admin() as holder, holder.transaction():
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (0x6A65766C,))
        started = time.monotonic()
        with pytest.raises(JournalUnavailableError, match="lock timeout"):
            store.replace_catalog([])
        assert time.monotonic() - started < 10
    store.replace_catalog([])  # free again
    store.close()


def test_a_closed_store_says_so(pg_url: str) -> None:
    store = open_store(pg_url)
    store.close()
    store.close()  # idempotent
    with pytest.raises(JournalUnavailableError, match="closed"):
        store.attempts()


# -- credentials and bad sources ----------------------------------------------------------------
def test_passwords_never_appear_in_location_repr_logs_or_errors(
        pg_server: Any, pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, and the driver's (WARNING by default)
    caplog.set_level(logging.DEBUG, logger="psycopg")
    secret = pg_server.password
    store = open_store(pg_url)
    assert secret not in store.location and secret not in repr(store)
    in_query = f"postgresql://{pg_server.user}@127.0.0.1:{pg_server.port}/postgres" \
               f"?password={secret}&options=-csearch_path%3D{pg_url.rsplit('%3D', 1)[1]}"
    queried = open_store(in_query)
    assert secret not in queried.location and "options=" in queried.location
    wrong = pg_url.replace(secret, secret + "-wrong")
    with pytest.raises(JournalUnavailableError, match="password authentication failed") as info:
        open_store(wrong)
    assert secret not in str(info.value) and "~/.pgpass" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "connection attempt" in caplog.text and secret not in caplog.text
    store.close(), queried.close()


def test_unreachable_server_names_the_source_and_the_fix() -> None:
    with socket.socket() as s:  # a loopback port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(JournalUnavailableError, match="cannot connect.*server runs") as info:
        open_store(f"postgresql://me:hunter2@127.0.0.1:{port}/j")
    assert f"'postgresql://me@127.0.0.1:{port}/j'" in str(info.value)
    assert "hunter2" not in str(info.value) and time.monotonic() - started < 10


def test_malformed_urls_name_the_source_without_the_password() -> None:
    with pytest.raises(UnsupportedSourceError, match="port='5432x' is not a number") as info:
        open_store("postgresql://me:hunter2@127.0.0.1:5432x/j")
    assert "hunter2" not in str(info.value) and "me@127.0.0.1:5432x/j" in str(info.value)
    with pytest.raises(UnsupportedSourceError, match="not a valid PostgreSQL URL.*nonsense"):
        open_store("postgresql://me:hunter2@127.0.0.1/j?nonsense=1")
    with pytest.raises(UnsupportedSourceError, match="not a valid PostgreSQL URL") as info:
        open_store("postgresql://me:p@ss/w?rd@127.0.0.1/j")  # an unescaped password
    assert "p@ss/w?rd" not in str(info.value) and "ss/w" not in str(info.value)


def test_writer_failures_log_no_password(pg_server: Any, pg_url: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(pg_url)
    store.append([row("dup")])
    writer = JournalWriter(store)
    with caplog.at_level(logging.WARNING, logger="jevlaya_lab.journal"):
        writer.attempt(row("dup"))  # refused once, then tried again skipping what is there
        writer.close()
    assert "refused 1 row(s) (UniqueViolation" in caplog.text and "accepts writes again" in caplog.text
    assert pg_server.password not in caplog.text
    assert len(store.attempts(call_id="dup")) == 1
    store.close()


def test_spilled_blocks_and_retried_batches_are_written_once(pg_url: str) -> None:
    store = open_store(pg_url)
    rows, rating = [row("s1"), row("s2")], ratings_for(1)
    assert store.append_spilled("block-1", rows, rating) is True
    assert store.append_spilled("block-1", rows, rating) is False  # replayed again: nothing added
    assert store.append_spilled("block-2", [row("s2"), row("s3")]) is True  # s2 is already there
    store.append([row("s3"), row("s4")], retry=True)
    assert sorted(r["call_id"] for r in store.attempts()) == ["s1", "s2", "s3", "s4"]
    assert len(store.ratings()) == 1
    assert store.spill_path is not None and "journal-spill" in str(store.spill_path)
    store.set_key("K", "v")
    assert store.stored_keys() == {"K": "v"}
    store.close()


def test_a_missing_driver_says_what_to_install(pg_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'psycopg\[binary\]'") as info:
        open_store(pg_url)
    assert "pw-" not in str(info.value)


def _unclosed_connections(action: Any) -> list[str]:
    """ResourceWarnings the driver raises for connections ``action`` left to the GC."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        action()
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_stores_close_every_connection_they_open(pg_url: str) -> None:
    def cycle() -> None:
        store = PostgreSQLStore(pg_url)
        store.append([row("a")])
        store._conn.close()  # a lost connection: the next call opens another one
        assert [r["call_id"] for r in store.attempts()] == ["a"]
        store.close()

    assert _unclosed_connections(cycle) == []


def test_a_connection_failing_its_setup_is_closed(pg_url: str) -> None:
    def refused() -> None:  # the server refuses the lock timeout after the connect succeeded
        with pytest.raises(psycopg.Error, match="lock_timeout"):
            PostgreSQLStore(pg_url, lock_timeout_s=-1)

    assert _unclosed_connections(refused) == []
