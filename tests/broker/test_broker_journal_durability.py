"""What the journal promises after a crash, checked by SIGKILL of a process making calls
against a real local server: with ``durable=True`` every answer a call returned is in the
journal (0 lost); by default at most ``JOURNAL_WINDOW_ROWS`` answered rows can be missing. And
what a process that ends normally keeps: every row, whether it closed its broker from an
``atexit`` handler or never closed it at all."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jevlaya_lab.broker.runtime import JOURNAL_WINDOW_ROWS

CHILD = Path(__file__).with_name("child_answers_then_killed.py")
ANSWERS = 150


def _answered_then_killed(db: Path, url: str, durable: bool) -> tuple[list[str], set[str]]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(db), url, "1" if durable else "0",
                             "8"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    seen: list[str] = []
    deadline = time.monotonic() + 90
    try:
        assert proc.stdout is not None
        while len(seen) < ANSWERS and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.decode().strip())
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read().decode().split()  # answers printed before the kill
        proc.stdout.close()
        seen.extend(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    assert len(seen) >= ANSWERS, f"the child answered only {len(seen)} calls"
    with sqlite3.connect(db) as con:
        stored = {r[0] for r in con.execute("SELECT call_id FROM attempts WHERE status = 'ok'")}
    return seen, stored


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "default"])
def test_sigkill_right_after_answers_loses_what_the_journal_promises(server, tmp_path,
                                                                      durable) -> None:
    answered, stored = _answered_then_killed(tmp_path / "journal.db", server.base_url, durable)
    lost = [c for c in answered if c not in stored]
    if durable:
        assert lost == [], f"{len(lost)} of {len(answered)} returned answers not journaled"
    else:
        assert len(lost) <= JOURNAL_WINDOW_ROWS, len(lost)


def test_by_default_a_call_returns_with_at_most_the_window_unwritten(cfg, db) -> None:
    """A call that ends while the writer is behind (here 2,500 rows queued at once) waits
    until at most ``JOURNAL_WINDOW_ROWS`` rows are unwritten; ``durable=True`` until none."""
    import asyncio

    from jevlaya_lab.broker import AsyncBroker

    async def main(durable: bool) -> int:
        async with AsyncBroker(db, models=cfg("a"), catalog=[], durable=durable) as b:
            await b.ask("warm", max_tokens=2)
            writer = b._rt.writer
            for i in range(2500):
                writer.attempt({"call_id": f"backlog-{durable}-{i}", "trace_id": "t",
                                "llm_name": "a", "status": "ok", "called_at": "2026-01-01",
                                "latency_ms": 1.0})
            await b.ask("now", max_tokens=2)
            return writer.unwritten
    assert asyncio.run(main(False)) <= JOURNAL_WINDOW_ROWS
    assert asyncio.run(main(True)) == 0


CLOSED_AT_EXIT = """
import atexit, sys
from jevlaya_lab import Broker, LLMConfig
broker = Broker(sys.argv[1], models=[LLMConfig(name="a", base_url=sys.argv[2], model="a")], catalog=[])
atexit.register(broker.close)
print(broker.ask("hello", max_tokens=2).call_id, flush=True)
for i in range(2500):  # rows the writer has not written when the script ends
    broker._engine._rt.writer.attempt({"call_id": f"backlog-{i}", "trace_id": "t", "llm_name": "a",
                                       "status": "ok", "called_at": "2026-01-01", "latency_ms": 1.0})
"""


def test_a_broker_closed_by_an_atexit_handler_writes_its_journal(server, tmp_path) -> None:
    """A script (or a Dask worker) that closes its broker from ``atexit``: by then Python's
    thread pools take no new work, and the close must still write every queued row, quietly."""
    db = tmp_path / "journal.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CLOSED_AT_EXIT, str(db), server.base_url], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    call_id = done.stdout.strip()
    with sqlite3.connect(db) as con:
        stored = {r[0] for r in con.execute("SELECT call_id FROM attempts")}
    assert call_id in stored
    assert sum(1 for c in stored if c.startswith("backlog-")) == 2500


NEVER_CLOSED = {
    "sync": """
import sys
from jevlaya_lab import Broker, LLMConfig
broker = Broker(sys.argv[1], models=[LLMConfig(name="a", base_url=sys.argv[2], model="a")], catalog=[])
for i in range(3):
    print(broker.ask(f"hello {i}", max_tokens=2).call_id, flush=True)
for i in range(2500):  # rows the writer has not written when the script ends
    broker._engine._rt.writer.attempt({"call_id": f"backlog-{i}", "trace_id": "t", "llm_name": "a",
                                       "status": "ok", "called_at": "2026-01-01", "latency_ms": 1.0})
""",
    "async": """
import asyncio, sys
from jevlaya_lab import AsyncBroker, LLMConfig
broker = None
async def main():
    global broker  # still referred to at exit, as a notebook's variable is
    broker = AsyncBroker(sys.argv[1], models=[LLMConfig(name="a", base_url=sys.argv[2], model="a")], catalog=[])
    for i in range(3):
        print((await broker.ask(f"hello {i}", max_tokens=2)).call_id, flush=True)
    for i in range(2500):
        broker._rt.writer.attempt({"call_id": f"backlog-{i}", "trace_id": "t", "llm_name": "a",
                                   "status": "ok", "called_at": "2026-01-01", "latency_ms": 1.0})
asyncio.run(main())
""",
}


@pytest.mark.parametrize("kind", sorted(NEVER_CLOSED))
def test_a_broker_never_closed_journals_its_answers_when_the_process_ends(server, tmp_path, kind) -> None:
    """A script that ends without ``close()`` / ``aclose()``: every answer it was given and every
    row queued is in the journal (the sync script's were all lost, the async one's all but a few),
    and nothing is printed."""
    db = tmp_path / "journal.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", NEVER_CLOSED[kind], str(db), server.base_url], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    answered = done.stdout.split()
    assert len(answered) == 3
    with sqlite3.connect(db) as con:
        stored = {r[0] for r in con.execute("SELECT call_id FROM attempts")}
    assert set(answered) <= stored
    assert sum(1 for c in stored if c.startswith("backlog-")) == 2500


FORKED_CHILD_ENDS = """
import os, sys, time
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a child that ends normally runs the exit steps it inherited
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("child hung", flush=True)
"""


@pytest.mark.parametrize("kind", sorted(NEVER_CLOSED))
def test_a_forked_child_that_ends_leaves_the_parents_broker_alone(server, tmp_path, kind) -> None:
    """A child forked after the broker was made and that ends normally: the exit steps it inherited
    must not close the parent's broker (a sync Broker's loop thread runs in the parent only: the child
    hung waiting for it) nor write the parent's rows a second time. The parent's own exit then
    journals every answer once."""
    db = tmp_path / "journal.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    script = NEVER_CLOSED[kind] + FORKED_CHILD_ENDS
    done = subprocess.run([sys.executable, "-c", script, str(db), server.base_url], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    *answered, child, code = done.stdout.split()
    assert (child, code) == ("child", "0")
    assert len(answered) == 3
    with sqlite3.connect(db) as con:
        rows = [r[0] for r in con.execute("SELECT call_id FROM attempts")]
    assert set(answered) <= set(rows)
    assert len(rows) == len(set(rows))  # no row written twice
    assert sum(1 for c in rows if c.startswith("backlog-")) == 2500
