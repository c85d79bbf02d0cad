"""A private kernel spec for this venv's interpreter (never the user's Jupyter setup)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevlaya_lab.notebooks import private_kernel


@pytest.fixture(scope="session")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jupyter")
    mp = pytest.MonkeyPatch()
    private_kernel(root)  # sets JUPYTER_PATH for this process and the kernels it starts
    yield root
    mp.undo()
