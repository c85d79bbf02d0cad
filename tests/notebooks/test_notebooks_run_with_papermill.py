"""Every tutorial notebook runs with papermill (fast=True, per-cell timeout, no widget state)
and its own checks pass; the checks are read back from the executed notebook's JSON output
(the quickstart tour's run is the demo command's test).
With the real models (``fast=False``) every tutorial runs in the simulated Binder image:
test_binder_build.py."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from jevlaya_lab.notebooks import (
    MIME,
    NOTEBOOKS_DIR,
    TOUR,
    NotebookCheckError,
    checks_of,
    find_notebook,
    notebook_paths,
    run_notebook,
)

NOTEBOOKS = notebook_paths()
REQUIRED = {"01_quickstart_tour", "02_routing_explorer", "03_hooks_and_timeline",
            "04_broker_streaming_racing", "05_journal_analysis"}


def test_the_suggested_tutorials_exist() -> None:
    assert REQUIRED <= {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_has_a_parameters_cell_with_fast_and_ends_with_checks(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    params = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and "fast = False" in params[0].source  # real models unless told
    assert MIME in book.cells[-1].source and "assert not failed" in book.cells[-1].source
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), \
        "commit notebooks without outputs"


# The quickstart tour is the one notebook left out here: `jevlaya-lab demo --fast`
# (test_demo_and_notebooks_commands.py) runs it the same way (run_notebook, papermill, fast=True,
# this interpreter's kernel) and fails unless every check passes, so a second run proves nothing.
RUN_HERE = [p for p in NOTEBOOKS if p.stem != TOUR]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", RUN_HERE, ids=lambda p: p.stem)
def test_notebook_runs_and_its_checks_pass(path: Path, kernel: Path, tmp_path: Path) -> None:
    result = run_notebook(path, tmp_path, parameters={"fast": True}, cell_timeout=120)
    assert result["notebook"] == path.stem
    assert result["checks"] and all(result["checks"].values())
    json.dumps(result)


def test_a_regression_fails_the_run(kernel: Path, tmp_path: Path) -> None:
    """A notebook whose check is false fails with papermill's execution error."""
    from papermill.exceptions import PapermillExecutionError

    book = nbformat.read(NOTEBOOKS_DIR / "02_routing_explorer.ipynb", as_version=4)
    book.cells.insert(-2, nbformat.v4.new_code_cell("checks['a deliberate regression'] = False"))
    broken = tmp_path / "broken.ipynb"
    nbformat.write(book, broken)
    with pytest.raises(PapermillExecutionError, match="a deliberate regression"):
        run_notebook(broken, tmp_path / "out", parameters={"fast": True}, cell_timeout=120)


def test_missing_checks_and_unknown_names_are_clear_errors() -> None:
    with pytest.raises(NotebookCheckError, match="no application/vnd.jevlaya\\+json checks"):
        checks_of(nbformat.v4.new_notebook())
    with pytest.raises(FileNotFoundError, match="notebook='nope'.*01_quickstart_tour"):
        find_notebook("nope")
