"""SharedCooldowns: cooldowns and rate slots in the journal's own database, shared by brokers in
different processes (here: separate books and brokers on one SQLite file; the PostgreSQL form runs
on Dask workers in tests/frames/test_frames_dask.py)."""

from __future__ import annotations

import time

import pytest

from jevlaya_lab import Broker, LLMConfig, NoLLMAvailableError
from jevlaya_lab.broker.errors import LLMRequestError
from jevlaya_lab.journal.cooldowns import SharedCooldowns
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model


def test_a_cooldown_written_by_one_book_is_read_by_another_and_one_of_them_probes(tmp_path):
    path = tmp_path / "journal.db"
    a, b = SharedCooldowns(path, probe_s=0.4, refresh_s=0), SharedCooldowns(path, probe_s=0.4, refresh_s=0)
    now = time.time()
    assert a.extend("m", now + 5) == pytest.approx(now + 5)
    assert b.until("m") == pytest.approx(now + 5)
    a.extend("m", now + 0.2)  # an earlier end never shortens the one that holds
    assert b.until("m") == pytest.approx(now + 5)
    b.extend("n", time.time() + 0.1)
    time.sleep(0.15)
    seen = [a.until("n"), b.until("n")]
    assert seen.count(0.0) == 1 and max(seen) > time.time()  # exactly one may send the probe
    time.sleep(0.45)  # the probe window passed and nobody cooled it again: healthy for both
    assert a.until("n") == 0.0 and b.until("n") == 0.0
    a.close()
    b.close()


def test_rate_slots_are_shared(tmp_path):
    path = tmp_path / "journal.db"
    a, b = (SharedCooldowns(path, limits={"m": (3, 1.0)}) for _ in range(2))
    started = time.time()
    assert a.take("m") == 0.0
    assert b.take("m") == pytest.approx(started + 1 / 3, abs=0.1)  # the next slot is a third of a second on
    time.sleep(max(0.0, started + 1 / 3 + 0.02 - time.time()))
    assert b.take("m") == 0.0 and a.take("m") == pytest.approx(started + 2 / 3, abs=0.1)
    assert a.take("other") == 0.0  # no limit: always a slot
    with pytest.raises(ValueError, match="limits"):
        SharedCooldowns(path, limits={"m": (0, 1.0)})
    a.close()
    b.close()


def test_no_window_of_the_limit_s_length_holds_more_than_its_requests(tmp_path):
    """Two books take slots as fast as they are given for 1.6 s: in every window of 1 s, wherever
    it starts, at most 3 were granted (a burst of 3 followed at once by more would give 5)."""
    path = tmp_path / "journal.db"
    books = [SharedCooldowns(path, limits={"m": (3, 1.0)}) for _ in range(2)]
    granted: list[float] = []
    end = time.time() + 1.6
    while time.time() < end:
        for book in books:
            now = time.time()
            nxt = book.take("m")
            if nxt == 0.0:
                granted.append(now)
            else:
                assert nxt > now - 0.01  # the next slot is never in the past
        time.sleep(0.002)
    assert len(granted) >= 4  # the limit paces, it does not stop
    most = max(sum(1 for t in granted if start <= t < start + 1.0 - 0.02) for start in granted)
    assert most <= 3, granted
    for book in books:
        book.close()


def test_a_worker_whose_clock_runs_ahead_sees_the_same_cooldowns_and_takes_slots_in_turn(
        pg_server, pg_database):
    """Two workers on PostgreSQL whose clocks disagree by 30 s (one book's clock set ahead): each
    measures its offset from the server's clock, so a cooldown one writes ends for the other at the
    same moment, and their rate slots interleave under one limit. Stored on the writers' own
    clocks, the worker ahead would see every cooldown over 30 s early and hold the limit's next
    slot 30 s away from the other."""
    url = pg_server.url(pg_database)
    skew = 30.0
    honest = SharedCooldowns(url, refresh_s=0, limits={"m": (3, 1.0)})
    ahead = SharedCooldowns(url, refresh_s=0, limits={"m": (3, 1.0)}, clock=lambda: time.time() + skew)
    assert honest.clock_offset == pytest.approx(0.0, abs=0.05)  # the server runs on this machine
    assert ahead.clock_offset == pytest.approx(-skew, abs=0.05)
    end = time.time() + 5
    honest.extend("c", end)
    assert ahead.until("c") == pytest.approx(end + skew, abs=0.05)  # still cooling, on its own clock
    end = time.time() + 5
    ahead.extend("d", end + skew)  # on its own clock
    assert honest.until("d") == pytest.approx(end, abs=0.05)
    honest.extend("e", time.time() + 0.2)
    time.sleep(0.3)
    seen = [ahead.until("e"), honest.until("e")]
    assert seen.count(0.0) == 1 and max(seen) > 0, seen  # over for both; exactly one sends the probe
    granted = []
    for book in (honest, ahead, honest, ahead, honest):  # each in turn waits for its slot, then takes it
        while (next_slot := book.take("m")) != 0.0:
            wait = next_slot - book.clock()
            assert wait < 0.4, wait  # the next slot is a third of a second away on its own clock
            time.sleep(max(0.0, wait))
        granted.append(time.time())
    gaps = [b - a for a, b in zip(granted, granted[1:])]
    assert all(gap > 1 / 3 - 0.02 for gap in gaps), gaps  # one limit for both: a third of a second apart
    honest.close()
    ahead.close()


def test_a_refused_key_seen_by_one_broker_keeps_the_other_off_the_model(tmp_path):
    with serve({"a": tiny_chat_model(seed=0, name="a")}, faults={"a": FaultProfile(status=401)}) as server:
        journal = tmp_path / "journal.db"
        models = [LLMConfig(name="a", base_url=server.base_url, model="a")]
        with Broker(journal, models=models, catalog=[], cooldowns=True) as first, \
                Broker(journal, models=models, catalog=[], cooldowns=True) as second:
            with pytest.raises(LLMRequestError):
                first.ask("hello", max_tokens=2)
            sent = len(first.calls())
            with pytest.raises(NoLLMAvailableError):
                second.ask("hello", max_tokens=2, wait=0.5)
            assert len(second.calls()) == sent  # the second broker sent nothing
        with pytest.raises(TypeError, match="cooldowns="):
            Broker(journal, models=models, catalog=[], cooldowns="yes")


def test_books_that_start_together_on_a_fresh_database_all_open(pg_server, pg_database):
    """Dask workers start at once: each creates the schema and tables if missing. Without the
    advisory lock two of them find the table missing together and one fails on the catalogue's
    unique index (psycopg UniqueViolation on pg_type), which killed a worker's partition."""
    import threading

    url = pg_server.url(pg_database)
    opened, failed = [], []
    start = threading.Barrier(8)

    def open_one() -> None:
        start.wait()
        try:
            opened.append(SharedCooldowns(url, refresh_s=0))
        except Exception as exc:  # recorded, and the assertion below names it
            failed.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failed == [] and len(opened) == 8
    opened[0].extend("m", time.time() + 5)
    assert all(book.until("m") > time.time() for book in opened)
    for book in opened:
        book.close()
