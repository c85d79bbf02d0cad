"""Notebook 07 (System 1 -> LLM escalation) escalates some states, and its checks fail the run when
none is escalated (a threshold of 0 keeps every state on the fast path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevlaya_lab.notebooks import NOTEBOOKS_DIR, run_notebook

NOTEBOOK = NOTEBOOKS_DIR / "07_system1_to_llm_escalation.ipynb"


@pytest.mark.timeout(240)
def test_nothing_escalated_fails_the_notebooks_checks(kernel: Path, tmp_path: Path) -> None:
    from papermill.exceptions import PapermillExecutionError

    with pytest.raises(PapermillExecutionError, match="some states are escalated"):
        run_notebook(NOTEBOOK, tmp_path, parameters={"fast": True, "threshold": 0.0}, cell_timeout=120)
