"""Several processes sharing one PostgreSQL journal (the PostgreSQL backend loses no row),
with real subprocesses as in the SQLite tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import closing
from typing import Any

from jevlaya_lab.journal import open_store

_CHILD = """
import sys
from datetime import UTC, datetime
from jevlaya_lab.journal import JournalWriter, open_store
store = open_store(sys.argv[1]); writer = JournalWriter(store, batch=7)
for i in range(int(sys.argv[3])):
    writer.attempt({"call_id": f"{sys.argv[2]}-{i}", "trace_id": "t", "llm_name": "m",
                    "status": "ok", "called_at": datetime.now(UTC).isoformat()})
    if i % 50 == 0:
        writer.rating({"call_id": f"{sys.argv[2]}-{i}", "llm_name": "m", "score": 1.0,
                       "rated_at": datetime.now(UTC).isoformat()})
writer.close(); store.close()
"""


def with_pgpassword(pg_server: Any) -> dict[str, str]:
    return {**os.environ, "PGPASSWORD": pg_server.password}


def outputs(procs: list[subprocess.Popen[str]]) -> list[str]:
    outcomes = [(p.returncode, out, err) for p in procs for out, err in [p.communicate(timeout=60)]]
    assert all(code == 0 for code, _, _ in outcomes), [err[-400:] for _, _, err in outcomes]
    return [out.strip() for _, out, _ in outcomes]


def test_two_processes_appending_at_once_lose_no_row(pg_server: Any, pg_url: str) -> None:
    """The children take the password from PGPASSWORD: the URL they get carries none."""
    url = pg_url.replace(f":{pg_server.password}@", "@")
    open_store(pg_url).close()
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, url, tag, "400"],
                              env=with_pgpassword(pg_server), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for tag in ("p1", "p2")]
    outputs(procs)
    store = open_store(pg_url)
    rows = store.attempts()
    assert len(rows) == 800 and len({r["call_id"] for r in rows}) == 800
    assert len(store.ratings()) == 16
    store.close()


_TOGETHER = """
import sys, time
from jevlaya_lab.journal import open_store
url, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:  # every process opens the new journal at the same moment
    time.sleep(0.0005)
store = open_store(url)
store.replace_catalog([{"name": "cat", "base_url": "http://y/v1", "model": "c"}])
store.close()
"""


def test_processes_creating_one_new_journal_at_once_all_open_it(pg_server: Any,
                                                                pg_database: str) -> None:
    """Seed (several processes or servers share one database): creating the schema and
    tables and filling the catalog are serialised across processes (concurrent
    CREATE ... IF NOT EXISTS would otherwise collide)."""
    url, start = pg_server.url(pg_database), str(time.time() + 1.5)
    outputs([subprocess.Popen([sys.executable, "-c", _TOGETHER, url, start],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(5)])
    with closing(open_store(url)) as store:
        assert [e["name"] for e in store.registry()] == ["cat"]


_PURGER = """
import sys
from jevlaya_lab.journal import open_store
store = open_store(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()  # purge when the test says so
print(store.purge(90), flush=True)
store.close()
"""


def test_retention_purge_runs_once_however_many_processes_start(pg_server: Any,
                                                                 pg_url: str) -> None:
    """At most once per interval across processes. The test holds the old rows locked until
    five processes are all purging, so their purges overlap: one deletes and stamps the time,
    the others see the stamp and neither delete nor rewrite it (no update of ``meta``)."""
    store = open_store(pg_url)
    store.append([{"call_id": f"old{i}", "trace_id": "t", "llm_name": "m", "status": "ok",
                   "called_at": "2020-01-01T00:00:00+00:00"} for i in range(3)])
    store.close()
    schema = pg_url.rsplit("%3D", 1)[1]
    procs = [subprocess.Popen([sys.executable, "-c", _PURGER, pg_url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(5)]
    assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 5  # type: ignore[union-attr]
    with pg_server.admin() as holder, pg_server.admin() as watch:
        with holder.transaction():
            holder.execute(f"SELECT call_id FROM {schema}.attempts FOR UPDATE")
            for p in procs:
                p.stdin.write("go\n")  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                    "'jevlaya_lab' AND wait_event_type = 'Lock'").fetchone()[0] < 5:
                time.sleep(0.02)
        assert sorted(outputs(procs)) == ["0", "0", "0", "0", "3"]
        deadline = time.monotonic() + 10
        while True:  # a backend's counters reach the server when it exits
            alive = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                  "application_name = 'jevlaya_lab'").fetchone()[0]
            inserts, updates = watch.execute(
                "SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = %s "
                "AND relname = 'meta'", (schema,)).fetchone()
            if (alive == 0 and inserts >= 2) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert (inserts, updates) == (2, 0)  # schema_version, then purged_at written once
    with closing(open_store(pg_url)) as store:
        assert store.attempts() == []
