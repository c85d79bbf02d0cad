"""``jevlaya-lab serve`` as a process: models and faults from the command line, clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx

from jevlaya_lab.cli import main


def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "jevlaya_lab.cli", "serve", "--port", "0",
                                "--stop-after", "60", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    line = process.stdout.readline() if process.stdout else ""
    found = re.search(r"serving (http://127\.0\.0\.1:\d+/v1)", line)
    if not found:
        process.kill()
        raise AssertionError(f"no 'serving' line: {line!r} {process.stderr.read() if process.stderr else ''}")
    return process, found.group(1)


def test_serve_command_serves_models_with_faults_and_stops_on_sigterm() -> None:
    process, base_url = start("--model", "tiny", "--model", "b=tiny:1", "--fault", "b=rate-limited,every=2", "--threads", "1",
                              "--api-key-env", "LOCAL_TEST_KEY", env={"LOCAL_TEST_KEY": "k1"})
    try:
        headers = {"Authorization": "Bearer k1"}
        assert [m["id"] for m in httpx.get(f"{base_url}/models", headers=headers).json()["data"]] == ["tiny-0", "b"]
        body = {"model": "b", "messages": [{"role": "user", "content": "hi"}]}
        statuses = [httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=30).status_code
                    for _ in range(2)]
        assert statuses == [200, 429]
        assert httpx.post(f"{base_url}/chat/completions", json=body, timeout=30).status_code == 401
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "stopped" in out


def test_serve_command_rejects_bad_arguments_with_exit_code_2(capsys: object) -> None:
    assert main(["serve", "--model", "tiny", "--fault", "tiny-0=nonsense"]) == 2
    assert main(["serve", "--model", "tiny:x"]) == 2
    assert main(["serve", "--model", "tiny", "--threads", "0"]) == 2
    assert main(["serve", "--model", "tiny", "--fault", "other=slow"]) == 2
    assert main(["serve", "--model", "tiny", "--max-connections", "0"]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "max_connections=0 is invalid" in err
    assert "preset 'nonsense' is unknown" in err
    assert "tiny:SEED" in err
    assert "--threads=0" in err
    assert "'other' is not served here" in err
