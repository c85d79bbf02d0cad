"""Throttle: at most one push per interval from many threads (or on an event loop), the last
update never lost."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from jevlaya_lab.widgets.throttle import Throttle


def test_a_storm_of_marks_gives_few_pushes_and_the_last_mark_is_pushed() -> None:
    pushes: list[float] = []
    last_mark: list[float] = []
    throttle = Throttle(lambda: pushes.append(time.monotonic()), 0.1)

    def storm() -> None:
        for _ in range(500):
            before = time.monotonic()
            throttle.mark()
        last_mark.append(before)

    started = time.monotonic()
    threads = [threading.Thread(target=storm) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    assert 1 <= len(pushes) <= elapsed / 0.1 + 2  # 2,000 marks, a handful of pushes
    time.sleep(0.3)
    assert pushes[-1] >= max(last_mark)  # the armed timer delivered the last update


def test_zero_interval_pushes_every_mark_and_bad_values_are_refused() -> None:
    pushes: list[int] = []
    throttle = Throttle(lambda: pushes.append(1), 0)
    for _ in range(5):
        throttle.mark()
    assert len(pushes) == 5
    with pytest.raises(ValueError, match="throttle=-1: must be a number of seconds >= 0"):
        Throttle(lambda: None, -1)


def test_on_an_event_loop_pushes_come_from_the_loop_and_the_last_mark_is_pushed() -> None:
    marks = {"n": 0}
    pushes: list[tuple[int, int]] = []  # (thread, marks seen)

    async def main() -> None:
        throttle = Throttle(lambda: pushes.append((threading.get_ident(), marks["n"])), 0.05,
                            loop=asyncio.get_running_loop())
        for _ in range(200):
            marks["n"] += 1
            throttle.mark()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.2)  # the armed call_later delivers the last mark

    asyncio.run(main())
    assert 1 <= len(pushes) < 200
    assert {thread for thread, _ in pushes} == {threading.get_ident()}
    assert pushes[-1][1] == 200
