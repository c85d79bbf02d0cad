"""The timeline as a person reads it in Chromium: a checkpoint under its short name (not its cache
path), "1 state" / "1 run", and a zoomed axis that never starts below 0 ms."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab import Agent
from jevlaya_lab.decisions.presets import triage_questions
from jevlaya_lab.widgets import HookTimeline

from .browser_host import WidgetHost
from .conftest import needs_chromium

pytestmark = needs_chromium


@pytest.mark.timeout(120)
def test_timeline_names_the_checkpoint_shortly_counts_in_singular_and_zooms_from_zero(
        page: Any, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    cached = tmp_path / ".cache" / "jevlaya_lab" / "checkpoints" / "mini-en-4b4c0ffee123"
    shutil.copytree(checkpoints["english"], cached)
    agent = Agent(cached)  # named by its path, as a bundled checkpoint from the cache is
    timeline = HookTimeline(throttle=0)
    agent.predict("one state", triage_questions(), hooks=[timeline])
    assert {e["model"] for e in timeline.events} == {"mini-en"}
    assert {e["model_path"] for e in timeline.events} == {str(cached)}

    with WidgetHost([timeline]) as host:
        page.goto(host.url)
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        name = page.inner_text("#w0 .jv-lane-name")
        assert name == "run 1 · mini-en · 1 state", name
        assert "1 run · 2 events" in page.inner_text("#w0 .jv-muted")
        cell = page.locator("#w0 .jv-events tbody tr td").nth(4)
        assert cell.inner_text() == "mini-en" and cell.get_attribute("title") == str(cached)
        assert f"path: {cached}" in page.get_attribute("#w0 .jv-lane .jv-span", "title")
        page.click("#w0 .jv-lane .jv-span")
        page.wait_for_selector("#w0 button:has-text('show all')", timeout=5_000)
        start = page.locator("#w0 .jv-axis span").first.inner_text()
        assert not start.startswith("-") and start.endswith(" ms"), start
