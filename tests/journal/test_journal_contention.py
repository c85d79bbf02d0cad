"""The journal under contention and damage.

- The event loop never waits for the database: another process holds the SQLite write lock
  while calls, streams, ratings and snapshots run; the loop's worst lateness stays under 250 ms
  (a correctness bound on blocking, not a speed target).
- No row is dropped: rows wait in memory while the database refuses; when it refuses past
  closing, ``close()`` raises naming the spill file, and the next broker writes them, once.
- A broken journal file fails at open with an error naming the file, what is wrong and what to do.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig
from jevlaya_lab.journal import JournalWriter, open_store
from jevlaya_lab.journal.errors import JournalFileError, JournalWriteError
from jevlaya_lab.journal.sqlite import SQLiteStore

MAX_STALL_S = 0.25
"""The loop may be late by scheduling and collection pauses (59 ms seen once in a whole-suite run
beside a CPU benchmark, after the CPU-wait correction below); waiting for the locked database
makes it late by seconds (1.9 s measured with the old key lookup), far above this bound."""

_HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


class LockHolder:
    """Another process holding the SQLite write lock of ``path`` for ``seconds``."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(seconds)],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "locked"

    def wait(self) -> None:
        self.process.communicate(timeout=60)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


class ServerProcess:
    """``jevlaya-lab serve`` with tiny models "a" and "b", in its own process so that its
    generation threads do not share this process's interpreter lock with the event loop."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jevlaya_lab.cli", "serve", "--port", "0", "--stop-after", "600",
             "--threads", "1", "--model", "a=tiny:0", "--model", "b=tiny:1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        found = re.search(r"serving (http://127\.0\.0\.1:\d+/v1)", line)
        if not found:
            self.process.kill()
            raise AssertionError(f"no 'serving' line: {line!r}")
        self.base_url = found.group(1)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    process = ServerProcess()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def spill_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    return tmp_path


def models(server: Any) -> list[LLMConfig]:
    # "a" needs a key that lives in the database: routing must find it without querying
    return [LLMConfig(name="a", base_url=server.base_url, model="a", api_key_ref="STORED_A"),
            LLMConfig(name="b", base_url=server.base_url, model="b")]


def watch_store_calls(store: Any, loop_thread: int, on_loop: list[str]) -> None:
    """Record every store method called from the event loop's thread (the store still runs)."""
    for name in ("registry", "replace_catalog", "put_user_models", "catalog_filled", "get_key",
                 "stored_keys", "set_key", "append", "append_spilled", "attempts", "ratings",
                 "rating_totals", "purge", "close", "disabled_models", "set_disabled"):
        def watched(*args: Any, _name: str = name, _method: Any = getattr(store, name), **kwargs: Any) -> Any:
            if threading.get_ident() == loop_thread:
                on_loop.append(_name)
            return _method(*args, **kwargs)
        setattr(store, name, watched)


def write_into_locked(store: Any, seconds: float) -> None:
    """Try to append a row for ``seconds`` while another process holds the database."""
    try:
        store.append([{"call_id": "probe", "trace_id": "probe", "llm_name": "a", "status": "ok",
                       "called_at": datetime.now(UTC).isoformat()}], timeout_s=seconds)
    except sqlite3.OperationalError:
        pass
    else:
        raise AssertionError("the database was not locked by the other process")


def cpu_waits() -> dict[str, int]:
    """Nanoseconds each thread of this process has waited for a CPU so far (Linux schedstat;
    empty elsewhere)."""
    waits = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        try:
            waits[tid] = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return waits


async def worst_lateness(stop: asyncio.Event) -> float:
    """The event loop's worst lateness while ``stop`` is not set (ticks every 5 ms), less the
    longest time any thread of this process waited for a CPU during that tick.

    On a loaded machine the scheduler may pause the loop's thread, or the thread holding the
    interpreter lock, for longer than 50 ms; that is not the loop waiting for the database. A
    wait for a database lock is not a wait for a CPU, so it still counts in full.
    """
    worst = 0.0
    while not stop.is_set():
        before = cpu_waits()
        started = time.perf_counter()
        await asyncio.sleep(0.005)
        late = time.perf_counter() - started - 0.005
        after = cpu_waits()
        starved = max((after[t] - before.get(t, after[t]) for t in after), default=0) / 1e9
        worst = max(worst, late - starved)
    return worst


def test_the_event_loop_never_waits_for_a_locked_database(server: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jevlaya_lab.broker.keys.STORED_KEY_TTL_S", 0.05)  # re-read keys often
    db = tmp_path / "j.db"

    on_loop: list[str] = []

    async def main() -> tuple[float, list[dict[str, Any]], int]:
        broker = AsyncBroker(db, models=models(server), catalog=[])
        watch_store_calls(broker.store, threading.get_ident(), on_loop)
        async with broker:
            await broker.store_key("STORED_A", "k-a")
            assert (await broker.ask("warm up")).llm_name == "a"
            holder = LockHolder(db, 120.0)  # until stopped, every write waits for another process
            try:
                stop = asyncio.Event()
                ticker = asyncio.ensure_future(worst_lateness(stop))
                journals = []
                # a writer waiting 2 s for the database in another thread, as the journal's own
                # writer does when refused: whatever it holds, the loop must not wait for it
                waiting_writer = threading.Thread(target=write_into_locked, args=(broker.store, 2.0))
                waiting_writer.start()
                await asyncio.sleep(0.1)
                for round_ in range(6):
                    result = await broker.ask(f"question {round_}", fastest_of=2)
                    await result.record_quality(0.8)
                    async with broker.stream(f"stream {round_}") as stream:
                        assert "".join([piece async for piece in stream])
                    snap = await broker.snapshot()
                    assert snap["a"]["key"] == "present"
                    journals.append(snap.journal)
                    await asyncio.sleep(0.05)
                stop.set()
                worst = await ticker
                waiting_writer.join()
            finally:
                holder.stop()
            for _ in range(300):  # the writer's next try, once the lock is gone, writes them all
                if (await broker.snapshot()).journal["waiting"] == 0:
                    break
                await asyncio.sleep(0.05)
            rows = await broker.calls()
        return worst, journals, len(rows)

    worst, journals, n_rows = asyncio.run(main())
    assert on_loop == [], f"database calls made on the event loop: {on_loop}"
    # the other process really held the database: rows waited and writes were retried meanwhile
    assert any(j["waiting"] > 0 and j["retries"] > 0 and j["last_error"] for j in journals), journals
    assert worst < MAX_STALL_S, f"the event loop stalled {worst * 1000:.0f} ms"
    assert n_rows == 1 + 6 * 2 + 6  # warm-up, two race lanes per ask, one lane per stream


def test_rows_refused_past_closing_are_spilled_then_written_once_by_the_next_broker(
        server: Any, spill_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jevlaya_lab.journal.writer.CLOSE_WAIT_S", 0.5)
    db = spill_home / "j.db"
    broker = Broker(db, models=models(server)[1:], catalog=[])
    broker.ask("before")
    assert len(broker.calls()) == 1  # written before the lock is taken
    holder = LockHolder(db, 60.0)
    try:
        answers = [broker.ask(f"during {i}") for i in range(3)]
        answers[0].record_quality(1.0)
        counters = broker.snapshot().journal
        assert counters["waiting"] == 4 and counters["written"] == 1, counters
        with pytest.raises(JournalWriteError) as info:
            broker.close()
    finally:
        holder.stop()
    spill = Path(str(db) + ".spill.jsonl")
    assert info.value.spilled == 4 and info.value.lost == 0 and info.value.spill_path == str(spill)
    assert str(spill) in str(info.value) and "next Broker" in str(info.value)
    assert spill.exists()
    saved = spill.read_text()
    replayed = []
    for _ in range(2):  # the next broker writes them; a second replay of the same blocks adds nothing
        with Broker(db, models=models(server)[1:], catalog=[]) as again:
            rows = again.calls()
            replayed.append(again.snapshot().journal["replayed"])
        assert sorted(r["call_id"] for r in rows) == sorted(
            [rows[-1]["call_id"]] + [a.call_id for a in answers])
        assert len(again_ratings(db)) == 1
        assert not spill.exists()
        spill.write_text(saved)  # as if a crash had left the file behind after writing it
    assert replayed == [4, 0]


def again_ratings(db: Path) -> list[Any]:
    return sqlite3.connect(db).execute("SELECT call_id, score FROM ratings").fetchall()


def queue_rows_until_spilled(writer: JournalWriter, rows: int, spilled: int) -> dict[str, Any]:
    """Queue ``rows`` attempt rows; wait (10 s at most) until ``spilled`` went to the spill file."""
    for i in range(rows):
        writer.attempt({"call_id": f"c{i}", "trace_id": "t", "llm_name": "m", "status": "ok",
                        "called_at": datetime.now(UTC).isoformat()})
    deadline = time.monotonic() + 10
    while writer.status()["spilled"] < spilled and time.monotonic() < deadline:
        time.sleep(0.02)
    return writer.status()


def test_a_backlog_beyond_its_bound_is_spilled_not_kept_in_memory(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    holder = LockHolder(tmp_path / "j.db", 60.0)
    try:
        writer = JournalWriter(store, max_backlog=10, append_timeout_s=0.05, close_wait_s=0.2)
        status = queue_rows_until_spilled(writer, 50, 40)
        assert status["spilled"] == 40 and status["waiting"] == 10 and status["failed"] == 40, status
        with pytest.raises(JournalWriteError, match="50 row"):
            writer.close()
    finally:
        holder.stop()
    lines = [json.loads(line) for line in Path(str(tmp_path / "j.db") + ".spill.jsonl").read_text().splitlines()]
    assert sum(len(block["rows"]) for block in lines) == 50
    store.close()


# -- broken files -----------------------------------------------------------------------------

def test_a_file_that_is_not_a_database_is_named_with_the_fix(server: Any, tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"name,score\nalice,3\n" * 200)
    with pytest.raises(JournalFileError) as info:
        open_store(path)
    message = str(info.value)
    assert str(path) in message and "not a SQLite database" in message
    assert "restore it from a backup" in message and "move it away" in message
    with pytest.raises(JournalFileError, match="not a SQLite database"):
        Broker(path, models=models(server)[1:], catalog=[])  # the sync broker opens it at once

    async def enter() -> None:  # made in a running loop, it opens on entry, off the loop
        async with AsyncBroker(path, models=models(server)[1:], catalog=[]):
            pass

    with pytest.raises(JournalFileError, match="not a SQLite database"):
        asyncio.run(enter())


def test_mid_file_corruption_is_found_at_open(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    store = open_store(path)
    store.append([{"call_id": f"c{i}", "trace_id": "t" * 200, "llm_name": "m", "status": "ok",
                   "called_at": datetime.now(UTC).isoformat(), "error_detail": "x" * 300}
                  for i in range(3000)])
    store.close()
    sqlite3.connect(path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    size = path.stat().st_size
    with path.open("r+b") as f:  # scribble over pages in the middle of the file
        f.seek(size // 2 - size // 2 % 4096)
        f.write(os.urandom(3 * 4096))
    with pytest.raises(JournalFileError) as info:
        open_store(path)
    message = str(info.value)
    assert str(path) in message and "is damaged" in message
    assert ".recover" in message and "restore it from a backup" in message


def test_a_read_only_journal_is_named_with_the_fix(tmp_path: Path, as_someone_else: Any) -> None:
    folder = Path(tempfile.mkdtemp(prefix="jevlaya-ro-"))
    try:
        path = folder / "j.db"
        open_store(path).close()
        for p in folder.iterdir():
            p.chmod(0o444)
        folder.chmod(0o555)
        message = as_someone_else(lambda: refusal(path))
        assert str(path) in message and "read-only" in message and "chmod u+w" in message
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def refusal(path: Path) -> str:
    """The message of the error that opening the journal at ``path`` raises."""
    with pytest.raises(JournalFileError) as info:
        SQLiteStore(path)
    return str(info.value)


def test_saved_rows_wait_out_a_locked_start_and_are_written_once_writes_pass_again(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    open_store(db).close()
    rows = [["a", {"call_id": f"saved{i}", "trace_id": "t", "llm_name": "m", "status": "ok",
                   "called_at": datetime.now(UTC).isoformat()}] for i in range(3)]
    spill = Path(str(db) + ".spill.jsonl")
    spill.write_text(json.dumps({"block": "b1", "rows": rows}) + "\n")
    holder = LockHolder(db, 1.5)
    store = open_store(db)
    writer = JournalWriter(store, append_timeout_s=0.1)
    writer.flush()  # the replay ran (and was refused): the saved rows went back to the file
    assert writer.status()["replayed"] == 0 and spill.exists()
    holder.wait()
    writer.attempt({"call_id": "new", "trace_id": "t", "llm_name": "m", "status": "ok",
                    "called_at": datetime.now(UTC).isoformat()})
    writer.close()
    assert sorted(r["call_id"] for r in store.attempts()) == ["new", "saved0", "saved1", "saved2"]
    assert writer.status()["replayed"] == 3 and not spill.exists()
    store.close()


def test_overflow_saved_while_running_is_written_back_when_the_database_recovers(tmp_path: Path) -> None:
    store = open_store(tmp_path / "j.db")
    holder = LockHolder(tmp_path / "j.db", 1.5)
    writer = JournalWriter(store, max_backlog=5, append_timeout_s=0.05)
    assert queue_rows_until_spilled(writer, 20, 15)["spilled"] == 15  # the bound held meanwhile
    holder.wait()
    writer.attempt({"call_id": "after", "trace_id": "t", "llm_name": "m", "status": "ok",
                    "called_at": datetime.now(UTC).isoformat()})
    writer.close()  # nothing left unwritten: no error
    status = writer.status()
    assert status["written"] == 21 and status["failed"] == 0 and status["waiting"] == 0, status
    assert len(store.attempts()) == 21 and not Path(str(tmp_path / "j.db") + ".spill.jsonl").exists()
    store.close()
