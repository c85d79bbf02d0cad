"""``jevlaya-lab ask``: streams one answer from the pool; errors exit 1 with a message."""

from __future__ import annotations

import json
from pathlib import Path

from jevlaya_lab.cli import main
from jevlaya_lab.local import FaultProfile


def write_catalog(path: Path, server, *names: str) -> Path:
    path.write_text(json.dumps({"models": [
        {"name": n, "base_url": server.base_url, "model": n} for n in names]}))
    return path


def test_ask_streams_the_answer_and_reports_the_model(server, tmp_path, monkeypatch,
                                                      capsys) -> None:
    monkeypatch.setenv("JEVLAYA_CATALOG_URL", str(write_catalog(tmp_path / "c.json", server,
                                                                "a")))
    assert main(["ask", "--db", str(tmp_path / "j.db"), "--max-tokens", "5", "--calls", "1",
                 "hello"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "[a call_id=" in err and '"status": "ok"' in err


def test_ask_exits_1_when_no_model_answers(server, tmp_path, monkeypatch, capsys) -> None:
    server.set_fault("b", FaultProfile(status=400))
    monkeypatch.setenv("JEVLAYA_CATALOG_URL", str(write_catalog(tmp_path / "c.json", server,
                                                                "b")))
    assert main(["ask", "--db", str(tmp_path / "j.db"), "hello"]) == 1
    assert "NoLLMAvailableError" in capsys.readouterr().err
