"""One policy for tests that read the public datasets (CLINC150, BANKING77, HWU64).

A test that needs them carries ``@pytest.mark.public_datasets``. The folder is
``$JEVLAYA_DATA_DIR``, else ``shared/datasets`` beside the checkout (the training code's own
lookup, :func:`jevlaya_lab.decisions.training.datasets.default_data_dir`), and it must hold
``clinc150/``, ``banking77/`` and ``hwu64/``. Where it does not, those tests are skipped and the
run ends with one line saying where to put the data; under ``CI=true`` they fail instead, so a
CI run can never pass without the data.

It also holds the one fixture that runs a check as another user, ``as_someone_else``: the
tests run as root here, where a ``chmod`` stops nothing.

And, for ``make test``'s two pytest-xdist workers (``--dist loadfile``: whole files to a worker),
the one exception to "a file is a unit of work": the files in :data:`RUN_APART` go to one worker
as one unit, one after another. Each starts its own crowd of processes (a Jupyter server, a
browser, kernels, a Dask cluster's workers); two of them at once on two cores starve each other.
(The kill a cell printed when a Dask worker outlived its nanny's 4-second grace at close had a
cause of its own, the interpreter's teardown in a worker that loaded a model, mended in
``jevlaya_lab.frames.deciding``: the grouping alone did not stop it.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DATASET_FOLDERS = ("clinc150", "banking77", "hwu64")


def public_datasets_dir() -> Path | None:
    """The datasets folder when it holds all three datasets, else None."""
    from jevlaya_lab.decisions.training.datasets import default_data_dir

    path = default_data_dir()
    if path is None or not all((path / name).is_dir() for name in DATASET_FOLDERS):
        return None
    return path


def _where() -> str:
    env = os.environ.get("JEVLAYA_DATA_DIR")
    beside = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    return (f"JEVLAYA_DATA_DIR={env} does not hold {', '.join(f + '/' for f in DATASET_FOLDERS)}" if env
            else f"put {', '.join(f + '/' for f in DATASET_FOLDERS)} in {beside} or set JEVLAYA_DATA_DIR "
                 "to the folder that holds them")


RUN_APART = ("tests/frames/test_frames_dask.py", "tests/notebooks/test_binder_build.py",
             "tests/widgets/test_tutorials_in_jupyterlab.py")
"""Test files that start many processes each; under pytest-xdist they run in one worker, in turn."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the files of :data:`RUN_APART` as one unit of work (any other
    ``--dist`` is left to pytest-xdist)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileRunApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "run-apart" if scope in RUN_APART else scope

    return LoadFileRunApart(config, log)


SKIP_REASON = "public datasets absent"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("public_datasets") is None or public_datasets_dir() is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the public datasets are missing and CI=true: {_where()}", pytrace=False)
    pytest.skip(f"{SKIP_REASON}: {_where()}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Counted from the skip reports, which reach the process that prints the summary whether the
    tests ran here or in pytest-xdist's workers (``make test`` runs them in two)."""
    missing = [r for r in terminalreporter.stats.get("skipped", []) if SKIP_REASON in str(r.longrepr)]
    if missing:
        terminalreporter.write_line(f"{len(missing)} test(s) skipped for want of the public datasets: "
                                    f"{_where()}")


def _as_someone_else(work: Callable[[], Any]) -> Any:
    """``work()`` where a test's chmods hold: here, or, since root may write anything, in a forked
    child running as ``nobody``; its result comes back as JSON (an exception in the child fails the
    test with its repr)."""
    if os.geteuid() != 0:
        return json.loads(json.dumps(work()))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(work()).encode())
            code = 0
        except BaseException as exc:
            os.write(write, json.dumps(repr(exc)).encode())
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        text = f.read()
    assert os.waitstatus_to_exitcode(status) == 0, f"the child failed: {text}"
    return json.loads(text)


@pytest.fixture
def as_someone_else() -> Callable[[Callable[[], Any]], Any]:
    """Run a check as a user the test's chmods bind (:func:`_as_someone_else`)."""
    return _as_someone_else
