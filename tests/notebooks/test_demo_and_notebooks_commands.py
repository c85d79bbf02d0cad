"""`jevlaya-lab demo` (the offline tour into reports/) and `jevlaya-lab notebooks`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jevlaya_lab.cli import main
from jevlaya_lab.notebooks import TOUR


@pytest.mark.timeout(240)
def test_demo_runs_the_tour_and_writes_html_json_and_the_executed_notebook(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "reports"
    assert main(["demo", "--fast", "--out", str(out)]) == 0
    report = json.loads((out / "demo.json").read_text())
    assert report["notebook"] == TOUR and report["checks"] and all(report["checks"].values())
    assert Path(report["output"]) == out / f"{TOUR}.ipynb" and Path(report["output"]).is_file()
    html = (out / "demo.html").read_text()
    assert html.startswith("<!doctype html>") and "<script" not in html
    assert "one result per state" in html
    printed = capsys.readouterr().out
    assert "done in" in printed and "demo.html" in printed


def test_notebooks_lists_the_tutorials(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notebooks"]) == 0
    listed = capsys.readouterr().out.split()
    assert any(line.endswith(f"{TOUR}.ipynb") for line in listed) and len(listed) >= 5


def test_notebooks_unknown_name_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notebooks", "nope"]) == 2
    err = capsys.readouterr().err
    assert "notebook='nope': not found" in err and TOUR in err
