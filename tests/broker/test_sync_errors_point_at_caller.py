"""A documented error raised through the sync facade reads from the caller's line: its traceback
holds the caller and the facade's few frames, not the event loop's internals."""

from __future__ import annotations

import traceback

import pytest

from jevlaya_lab import Broker, NoLLMAvailableError


def test_an_empty_pool_error_points_at_the_callers_line(tmp_path):
    broker = Broker(tmp_path / "j.db", local=False, catalog=[])
    try:
        with pytest.raises(NoLLMAvailableError) as info:
            broker.ask("hello")  # the line the traceback must start at
    finally:
        broker.close()
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[0].name == "test_an_empty_pool_error_points_at_the_callers_line"
    assert frames[0].line == 'broker.ask("hello")  # the line the traceback must start at'
    assert len(frames) <= 4, [f"{f.filename}:{f.name}" for f in frames]
    assert not [f for f in frames if "asyncio" in f.filename or f.filename.endswith(("racing.py", "runtime.py"))]
    printed = "".join(traceback.format_exception(info.value))
    assert "asyncio" not in printed and "During handling" not in printed
    assert "empty" in str(info.value).lower() or "no model" in str(info.value).lower()
