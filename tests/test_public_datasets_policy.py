"""The public-datasets policy (tests/conftest.py) as a person running ``make test`` meets it: with the
data absent the marked tests skip and one summary line says where to put it; under CI=true they fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/decisions/test_intents_data.py::test_groups_follow_each_datasets_own_structure"


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    clean.update(JEVLAYA_DATA_DIR=str(tmp_path), PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST],
                          cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)


def test_absent_datasets_skip_with_one_line_saying_where_and_fail_under_ci(tmp_path):
    local = _run(tmp_path)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "1 skipped" in local.stdout
    summary = [line for line in local.stdout.splitlines() if "for want of the public datasets" in line]
    assert len(summary) == 1 and f"JEVLAYA_DATA_DIR={tmp_path}" in summary[0]
    assert "clinc150/, banking77/, hwu64/" in summary[0]
    ci = _run(tmp_path, CI="true")
    assert ci.returncode == 1 and "1 error" in ci.stdout, ci.stdout  # failed in setup: never a pass
    assert "CI=true" in ci.stdout


def test_present_datasets_run_the_marked_tests(tmp_path):
    for name in ("clinc150", "banking77", "hwu64"):
        (tmp_path / name).mkdir()
    (tmp_path / "clinc150" / "domains.json").write_text("{}", "utf-8")
    run = _run(tmp_path)  # the test runs (and fails on the made-up, empty domains file)
    assert "skipped" not in run.stdout and "1 failed" in run.stdout, run.stdout
