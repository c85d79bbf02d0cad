"""A broker that fails to open, whose ``async with`` entry fails, or that is dropped without being
closed, leaves nothing open: no journal writer thread, no database handle, no key filter on the
HTTP libraries' loggers (which would also keep the broker's keys in memory). And a broker closes
the cooldown book it made itself (``cooldowns=True``), but never one the caller passed in.

Each case repeats the failure several times and counts what a long-running process would see
grow: threads, open file descriptors on the journal file, registered key resolvers."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker, Broker
from jevlaya_lab.broker.errors import CatalogError
from jevlaya_lab.broker.keys import LIBRARY_LOGGERS
from jevlaya_lab.journal import JournalFileError
from jevlaya_lab.journal.cooldowns import SharedCooldowns
from jevlaya_lab.journal.writer import WRITER_THREAD


def journal_threads() -> int:
    return sum(t.name == WRITER_THREAD for t in threading.enumerate())


def handles_on(path: Path) -> int:
    """This process's open file descriptors on ``path`` (and its -wal / -shm files)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(path))
    return count


def log_filters() -> int:
    return sum(len(logging.getLogger(name).filters) for name in LIBRARY_LOGGERS)


def test_a_broker_whose_arguments_are_refused_after_the_journal_opened_leaves_nothing_open(
        db, cfg) -> None:
    before = (journal_threads(), log_filters())
    for _ in range(5):
        with pytest.raises(TypeError, match="cooldowns="):
            Broker(db, models=cfg("a"), catalog=[], cooldowns="yes", secrets={"K": "sk-x" * 8})
    assert handles_on(db) == 0
    assert (journal_threads(), log_filters()) == before


def test_a_broker_whose_pool_cannot_be_built_is_closed_by_its_failed_entry(
        tmp_path: Path, db, cfg) -> None:
    before = (journal_threads(), log_filters())
    for _ in range(3):
        broker = Broker(db, models=cfg("a"), catalog=tmp_path / "missing.json")
        with pytest.raises(CatalogError, match="no such file"):
            with broker:
                pass
        assert broker.closed  # `with` never calls __exit__ when __enter__ raised: entry closed it
    assert handles_on(db) == 0
    assert (journal_threads(), log_filters()) == before


def test_an_async_broker_whose_journal_is_not_a_database_leaves_nothing_open(
        tmp_path: Path, cfg) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"name,score\nalice,3\n" * 200)
    before = (journal_threads(), log_filters())

    async def enter() -> AsyncBroker:
        broker = AsyncBroker(path, models=cfg("a"), catalog=[])  # opens on entry, off the loop
        with pytest.raises(JournalFileError, match="not a SQLite database"):
            async with broker:
                pass
        return broker

    for _ in range(3):
        assert asyncio.run(enter()).closed
    assert handles_on(path) == 0
    assert (journal_threads(), log_filters()) == before


def test_a_broker_closes_the_cooldown_book_it_made_and_not_the_one_it_was_given(
        tmp_path: Path, cfg) -> None:
    db = tmp_path / "journal.db"
    for _ in range(3):
        with Broker(db, models=cfg("a"), catalog=[], cooldowns=True) as broker:
            assert broker.ask("hi", max_tokens=2).llm_name == "a"
    assert handles_on(db) == 0  # the journal's store and the book's own connection are closed

    other = tmp_path / "book.db"
    book = SharedCooldowns(other)
    with Broker(db, models=cfg("a"), catalog=[], cooldowns=book) as broker:
        broker.ask("hi", max_tokens=2)
    book.extend("a", 0.0)  # still open: the caller made it, the caller closes it
    book.close()
    assert handles_on(other) == 0


def test_the_key_filter_leaves_with_the_last_open_broker(db, cfg) -> None:
    """Several brokers open at once share one filter; it leaves when the last one closes."""
    before = log_filters()
    first = Broker(db, models=cfg("a"), catalog=[])
    second = Broker(db, models=cfg("a"), catalog=[])
    opened: Any = log_filters()
    first.close()
    assert log_filters() == opened > before
    second.close()
    assert log_filters() == before


def test_async_brokers_dropped_without_closing_release_everything_and_journal_their_calls(
        db, cfg) -> None:
    """A notebook cell that makes an AsyncBroker and is run again drops the last one unclosed; the
    kernel's loop runs on, so the dropped brokers' HTTP connections are closed on it, not left to
    the garbage collector (which warns of each unclosed socket)."""
    before = (journal_threads(), log_filters())

    async def cells() -> None:
        for _ in range(3):
            broker = AsyncBroker(db, models=cfg("a"), catalog=[], secrets={"K": "sk-" + "x" * 30})
            assert (await broker.ask("hi", max_tokens=2)).llm_name == "a"
            del broker
            gc.collect()
        await asyncio.sleep(0.2)  # the loop runs on, as a kernel's does

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(cells())
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
    assert (journal_threads(), log_filters()) == before
    assert handles_on(db) == 0
    with Broker(db, models=cfg("a"), catalog=[]) as reader:
        assert len(reader.calls()) == 3  # every dropped broker's call was written


def test_a_scoped_handle_keeps_its_dropped_async_broker_open(db, cfg) -> None:
    async def scoped() -> None:
        team = AsyncBroker(db, models=cfg("a"), catalog=[]).for_scope("team")
        gc.collect()
        assert (await team.ask("hi", max_tokens=2)).llm_name == "a"  # the broker is not closed under it
        threads = journal_threads()
        del team
        gc.collect()
        assert journal_threads() == threads - 1
        await asyncio.sleep(0.2)  # its connection is closed on the loop, which runs on

    asyncio.run(scoped())
