"""`make lab`: JupyterLab from the project's environment on 127.0.0.1 with notebooks/ open and the
tutorials' kernel registered, started as a person would (the make target's command)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_make_target_runs_the_lab_command():
    dry = subprocess.run(["make", "-n", "lab", "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert "-m jevlaya_lab.cli lab" in dry.stdout, dry.stdout + dry.stderr


def test_lab_serves_the_notebooks_on_loopback_with_the_kernel(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "jv-test-token"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    log = (tmp_path / "lab.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "jevlaya_lab.cli", "lab", "--no-browser", f"--port={port}",
                             f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        contents = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=5) as reply:
                    contents = json.load(reply)
                break
            except OSError:
                time.sleep(0.5)
        assert contents is not None, (tmp_path / "lab.log").read_text(errors="replace")[-3000:]
        names = {item["name"] for item in contents["content"]}
        assert "01_quickstart_tour.ipynb" in names and "07_system1_to_llm_escalation.ipynb" in names
        with urllib.request.urlopen(f"{base}/api/kernelspecs?token={token}", timeout=10) as reply:
            assert "jevlaya-lab" in json.load(reply)["kernelspecs"]
        printed = (tmp_path / "lab.log").read_text(errors="replace")
        assert "starting JupyterLab on 127.0.0.1" in printed and "127.0.0.1" in printed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
