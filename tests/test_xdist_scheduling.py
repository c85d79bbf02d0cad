"""``make test`` runs two pytest-xdist workers that take whole files; the files that each start a
crowd of processes (tests/conftest.py's ``RUN_APART``) are one unit of work, so they never run at
the same time. Checked on the scheduler the hook builds, with this run's own configuration."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("xdist_policy_copy", ROOT / "tests" / "conftest.py")
assert _spec and _spec.loader
policy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy)


def test_the_files_that_start_many_processes_are_one_unit_and_the_others_their_own(
        pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in policy.RUN_APART:
        assert (ROOT / path).is_file(), path  # a moved or renamed file would silently run beside the others
    monkeypatch.setattr(pytestconfig.option, "dist", "loadfile")
    monkeypatch.setattr(pytestconfig.option, "numprocesses", 2)
    monkeypatch.setattr(pytestconfig.option, "tx", ["popen"] * 2)
    scheduler = policy.pytest_xdist_make_scheduler(pytestconfig, None)
    scopes = {scheduler._split_scope(f"{path}::test_x[1]") for path in policy.RUN_APART}
    assert scopes == {"run-apart"}
    assert scheduler._split_scope("tests/broker/test_broker_wire.py::test_x") == "tests/broker/test_broker_wire.py"
    monkeypatch.setattr(pytestconfig.option, "dist", "load")
    assert policy.pytest_xdist_make_scheduler(pytestconfig, None) is None  # other modes: pytest-xdist's own
