"""The package passes ruff and mypy as configured in pyproject.toml (`make lint`, which CI runs
first), so a full test run also reports a lint or type error a change introduced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_the_package():
    done = run("ruff", "check", "jevlaya_lab")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-1000:]


def test_mypy_finds_nothing_in_the_package():
    done = run("mypy")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-1000:]
