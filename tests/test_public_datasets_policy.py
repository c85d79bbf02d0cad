"""The public-datasets policy (tests/conftest.py) as a person running ``make test`` meets it: with the
data absent the marked tests skip and one summary line says where to put it; under CI=true they fail.

The policy's hook is called directly on this test's own pytest item (marked for the occasion) for
each case: absent data locally (skip), absent data under CI=true (fail), data present (runs). One
pytest subprocess then checks what a person sees at the end of a real run: the skip and the one
summary line, printed by the process that prints the summary while the test ran in a pytest-xdist
worker, as under ``make test``. (Three subprocesses cost ~40 s on a loaded machine; this costs one.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/decisions/test_intents_data.py::test_groups_follow_each_datasets_own_structure"


def _policy() -> ModuleType:
    """A private copy of tests/conftest.py, so its list of skipped tests is not this run's."""
    spec = importlib.util.spec_from_file_location("datasets_policy_copy", ROOT / "tests" / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _marked_item(request: pytest.FixtureRequest) -> pytest.Item:
    item = request.node
    item.add_marker("public_datasets")
    return item


def _outcome(policy: ModuleType, item: pytest.Item) -> tuple[str, str]:
    """What the hook does to the item: ("skip", why), ("fail", why) or ("run", ""). Caught here, so
    a broken policy fails this test instead of skipping it."""
    try:
        policy.pytest_runtest_setup(item)
    except pytest.skip.Exception as exc:
        return "skip", str(exc)
    except pytest.fail.Exception as exc:
        return "fail", str(exc)
    return "run", ""


def test_the_policy_skips_locally_fails_under_ci_and_runs_with_the_data(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    policy = _policy()
    item = _marked_item(request)
    monkeypatch.setenv("JEVLAYA_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    assert policy.public_datasets_dir() is None
    kind, why = _outcome(policy, item)
    assert kind == "skip" and "public datasets absent: JEVLAYA_DATA_DIR=" in why, (kind, why)
    monkeypatch.setenv("CI", "true")
    kind, why = _outcome(policy, item)
    assert kind == "fail" and "missing and CI=true" in why, (kind, why)
    for name in ("clinc150", "banking77"):
        (tmp_path / name).mkdir()
    assert _outcome(policy, item)[0] == "fail"  # two of the three is still missing
    (tmp_path / "hwu64").mkdir()
    assert policy.public_datasets_dir() == tmp_path
    assert _outcome(policy, item) == ("run", "")  # the marked test runs, under CI too
    monkeypatch.delenv("CI")
    assert _outcome(policy, item) == ("run", "")


def test_a_real_run_without_the_data_skips_with_one_line_saying_where(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    clean.update(JEVLAYA_DATA_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    local = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                            "--dist", "loadfile", TEST],
                           cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "1 skipped" in local.stdout
    summary = [line for line in local.stdout.splitlines() if "for want of the public datasets" in line]
    assert len(summary) == 1 and f"JEVLAYA_DATA_DIR={tmp_path}" in summary[0], local.stdout
    assert "clinc150/, banking77/, hwu64/" in summary[0]
