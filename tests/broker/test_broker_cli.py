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
    assert "ProviderError" in capsys.readouterr().err  # the only model rejected the request


def test_llms_list_and_env_show_the_pool_and_where_keys_come_from_never_values(
        server, tmp_path, monkeypatch, capsys) -> None:
    """Parity with llmbroker 1.11: ``jevlaya-lab llms list`` and ``llms env``."""
    catalog = tmp_path / "c.json"
    catalog.write_text(json.dumps({"models": [
        {"name": "a", "base_url": server.base_url, "model": "a", "api_key_ref": "CLI_KEY_A"},
        {"name": "b", "base_url": server.base_url, "model": "b", "api_key_ref": "CLI_KEY_B"},
        {"name": "local/tiny", "base_url": "local://tiny", "model": "tiny"}]}))
    monkeypatch.setenv("JEVLAYA_CATALOG_URL", str(catalog))
    monkeypatch.setenv("CLI_KEY_A", "sk-cli-secret-0123456789")
    monkeypatch.delenv("CLI_KEY_B", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    db = str(tmp_path / "j.db")
    assert main(["llms", "list", "--db", db]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == ["a", "b", "local/tiny"]
    assert "in pool" in listed[0] and "key present" in listed[0]
    assert "key missing" in listed[1] and "not in pool" in listed[2]  # a has a key: no fallback
    assert main(["llms", "env", "--db", db, "--json"]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [{"key": "CLI_KEY_A", "set": True, "from": "environment", "models": ["a"]},
                    {"key": "CLI_KEY_B", "set": False, "from": None, "models": ["b"]}]
    assert "sk-cli-secret" not in out
