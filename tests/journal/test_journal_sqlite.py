"""The SQLite journal: WAL, busy timeout, schema version, retention, several processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jevlaya_lab.journal import (
    SCHEMA_VERSION,
    JournalSchemaError,
    JournalWriter,
    UnsupportedSourceError,
    open_store,
)


def row(call_id: str, called_at: str | None = None, **extra: object) -> dict[str, object]:
    return {"call_id": call_id, "trace_id": "t", "llm_name": "m", "status": "ok",
            "called_at": called_at or datetime.now(UTC).isoformat(), **extra}


def test_sqlite_file_is_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    raw = sqlite3.connect(tmp_path / "j.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000  # type: ignore[attr-defined]
    store.close()


def test_schema_version_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    open_store(tmp_path / "j.db").close()
    raw = sqlite3.connect(tmp_path / "j.db")
    raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    with pytest.raises(JournalSchemaError, match=f"schema_version=99.*expects {SCHEMA_VERSION}"):
        open_store(tmp_path / "j.db")


def test_source_forms(tmp_path: Path) -> None:
    assert open_store(f"sqlite:///{tmp_path}/x.db").location == f"{tmp_path}/x.db"
    assert open_store(None, home=tmp_path).location == str(tmp_path / "broker.db")
    with pytest.raises(UnsupportedSourceError, match="unknown database scheme") as info:
        open_store("mysql://user:secret@db.example/j")
    assert "secret" not in str(info.value) and "mysql://user@db.example/j" in str(info.value)
    with pytest.raises(UnsupportedSourceError, match="must end in .db"):
        open_store(tmp_path / "journal.txt")


def test_default_home_follows_jevlaya_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    assert open_store().location == str(tmp_path / "home" / "broker.db")


def test_journal_is_append_only_rows_and_ratings(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    store.append([row("a"), row("b", status="error", error_detail="x")],
                 [{"call_id": "a", "trace_id": "t", "llm_name": "m", "score": 0.5,
                   "rated_at": datetime.now(UTC).isoformat()}])
    assert [r["call_id"] for r in store.attempts()] == ["a", "b"]
    assert store.attempts(status="error")[0]["error_detail"] == "x"
    assert store.rating_totals() == {("m", ""): (1, 0.5)}
    with pytest.raises(sqlite3.IntegrityError):
        store.append([row("a")])  # one row per attempt: a call_id is never rewritten


def test_retention_purges_old_rows_at_most_hourly(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    old = (datetime.now(UTC) - timedelta(days=91)).isoformat()
    store.append([row("old", old), row("new")])
    assert store.purge(90) == 1
    assert [r["call_id"] for r in store.attempts()] == ["new"]
    store.append([row("old2", old)])
    assert store.purge(90) == 0  # purged less than an hour ago
    assert store.purge(90, min_interval_s=0) == 1


def test_registry_user_entries_survive_catalog_updates(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    entry = {"name": "mine", "base_url": "http://x/v1", "model": "m"}
    store.put_user_models([entry])
    store.replace_catalog([{"name": "cat", "base_url": "http://y/v1", "model": "c"}])
    store.replace_catalog([{"name": "cat2", "base_url": "http://y/v1", "model": "c"}])
    assert [(e["name"], e["origin"]) for e in store.registry()] == [("mine", "user"),
                                                                    ("cat2", "catalog")]


def test_writer_flush_and_close_lose_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    writer = JournalWriter(store)
    for i in range(500):
        writer.attempt(row(f"c{i}"))
    writer.flush()
    assert len(store.attempts()) == 500
    writer.attempt(row("last"))
    writer.close()
    writer.close()  # idempotent
    assert len(store.attempts()) == 501
    with pytest.raises(RuntimeError, match="closed"):
        writer.attempt(row("late"))


_CHILD = """
import sys
from datetime import UTC, datetime
from jevlaya_lab.journal import JournalWriter, open_store
store = open_store(sys.argv[1]); writer = JournalWriter(store, batch=7)
for i in range(int(sys.argv[3])):
    writer.attempt({"call_id": f"{sys.argv[2]}-{i}", "trace_id": "t", "llm_name": "m",
                    "status": "ok", "called_at": datetime.now(UTC).isoformat()})
writer.close(); store.close()
"""


def test_two_processes_sharing_one_sqlite_journal_lose_no_row(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    open_store(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, path, tag, "400"])
             for tag in ("p1", "p2")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    rows = open_store(path).attempts()
    assert len(rows) == 800
    assert len({r["call_id"] for r in rows}) == 800


_OPENER = """
import sys, time
from jevlaya_lab.journal import open_store
folder, start, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
for r in range(rounds):
    while time.time() < start + r * 0.05:  # every process opens round r's new file together
        time.sleep(0.0005)
    open_store(f"{folder}/r{r}.db").close()
"""


def test_processes_creating_the_same_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Seed (SQLite, WAL): several processes share one file, including when they create it.

    Switching a new file to WAL needs an exclusive lock that SQLite refuses at once, without its
    busy handler, while another process does the same; the store must wait, not fail.
    """
    import time

    start = str(time.time() + 1.5)
    procs = [subprocess.Popen([sys.executable, "-c", _OPENER, str(tmp_path), start, "30"],
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    outcomes = [(p.returncode, err) for p in procs for _, err in [p.communicate(timeout=120)]]
    assert all(code == 0 for code, _ in outcomes), [err[-300:] for _, err in outcomes]
    for r in range(30):
        assert sqlite3.connect(tmp_path / f"r{r}.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_spilled_blocks_and_retried_batches_are_written_once(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    rating = {"call_id": "s1", "trace_id": "t", "llm_name": "m", "score": 1.0,
              "rated_at": datetime.now(UTC).isoformat()}
    assert store.append_spilled("block-1", [row("s1"), row("s2")], [rating]) is True
    assert store.append_spilled("block-1", [row("s1"), row("s2")], [rating]) is False
    assert store.append_spilled("block-2", [row("s2"), row("s3")]) is True  # s2 is already there
    store.append([row("s3"), row("s4")], retry=True)
    with pytest.raises(sqlite3.IntegrityError):
        store.append([row("s4")])  # a first try still refuses a duplicate
    assert sorted(r["call_id"] for r in store.attempts()) == ["s1", "s2", "s3", "s4"]
    assert len(store.ratings()) == 1
    assert store.spill_path == Path(str(tmp_path / "j.db") + ".spill.jsonl")
    store.set_key("K", "v")
    assert store.stored_keys() == {"K": "v"}
