"""One policy for tests that read the public datasets (CLINC150, BANKING77, HWU64).

A test that needs them carries ``@pytest.mark.public_datasets``. The folder is
``$JEVLAYA_DATA_DIR``, else ``shared/datasets`` beside the checkout (the training code's own
lookup, :func:`jevlaya_lab.decisions.training.datasets.default_data_dir`), and it must hold
``clinc150/``, ``banking77/`` and ``hwu64/``. Where it does not, those tests are skipped and the
run ends with one line saying where to put the data; under ``CI=true`` they fail instead, so a
CI run can never pass without the data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATASET_FOLDERS = ("clinc150", "banking77", "hwu64")
_missing: list[str] = []


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


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("public_datasets") is None or public_datasets_dir() is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the public datasets are missing and CI=true: {_where()}", pytrace=False)
    _missing.append(item.nodeid)
    pytest.skip(f"public datasets absent: {_where()}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _missing:
        terminalreporter.write_line(f"{len(_missing)} test(s) skipped for want of the public datasets: "
                                    f"{_where()}")
