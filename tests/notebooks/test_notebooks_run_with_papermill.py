"""The tutorials as papermill runs them: each has a ``fast`` parameters cell and ends with its
checks, a false check fails the run, and missing checks or an unknown name are clear errors.

Each tutorial runs twice elsewhere, so it is not run a third time here (on this 2-core machine the
third run cost 160 s of the test command):
- on the fast parameters in a real JupyterLab (tests/widgets/test_tutorials_in_jupyterlab.py): the
  same cells, the same ``fast = True`` and the same checks, which fail the test, plus the views;
- on the real models (``fast=False``) through papermill (:func:`jevlaya_lab.notebooks.run_notebook`)
  in the simulated Binder image (test_binder_build.py);
- and the quickstart tour once more by ``jevlaya-lab demo --fast`` (test_demo_and_notebooks_commands.py),
  papermill on the fast parameters in this interpreter's kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from jevlaya_lab.notebooks import (
    MIME,
    NOTEBOOKS_DIR,
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
