"""A simulated Binder build: a fresh venv from ``binder/requirements.txt``, then ``binder/postBuild``,
then tutorials on the real models (``fast=False``), each step timed.

Binder itself cannot run here, so this does what repo2docker does with our files: install the
pinned requirements into a new environment (torch from the CPU wheel pip finds here rather than
the PyTorch index named in the file, which is the same ``2.13.0`` CPU build), run ``postBuild``
from the repository root with that environment first on ``PATH``, and execute tutorials with
papermill in it (installed after the build: it runs the checks, Binder does not need it). Prints a table and writes ``bench/results/binder_build.json``.

    .venv/bin/python bench/binder_build.py [--notebooks 01_quickstart_tour 04_broker_streaming_racing ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NOTEBOOKS = ["01_quickstart_tour", "04_broker_streaming_racing",
                     "07_system1_to_llm_escalation"]


def local_requirements(text: str) -> str:
    """``binder/requirements.txt`` without the PyTorch index option, torch without ``+cpu``."""
    lines = []
    for line in text.splitlines():
        if line.strip().startswith(("--extra-index-url", "--index-url")):
            continue
        lines.append(re.sub(r"^torch==([\w.]+)\+cpu", r"torch==\1", line))
    return "\n".join(lines) + "\n"


def timed(label: str, cmd: list[str], results: dict[str, float], **kwargs: object) -> None:
    started = time.perf_counter()
    print(f"{label}: {' '.join(cmd)[:120]}", flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]
    results[label] = round(time.perf_counter() - started, 1)
    print(f"  {results[label]} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", nargs="*", default=DEFAULT_NOTEBOOKS)
    args = parser.parse_args()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="binder-") as tmp:
        venv = Path(tmp) / "venv"
        py = venv / "bin" / "python"
        timed("create venv", [sys.executable, "-m", "venv", str(venv)], results)
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text(local_requirements((ROOT / "binder/requirements.txt").read_text()))
        timed("pip install -r requirements", [str(py), "-m", "pip", "install", "-q", "-r",
                                              str(reqs)], results)
        # postBuild runs from the repository root with the environment's python first on PATH;
        # jupyter trust writes into this temporary HOME, not the user's
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
               "HOME": str(Path(tmp) / "home"), "PYTHONPATH": ""}
        timed("postBuild", ["bash", str(ROOT / "binder/postBuild")], results, cwd=ROOT, env=env)
        env["JEVLAYA_HOME"] = str(Path(tmp) / "home" / ".jevlaya")
        # the runner of the checks (papermill, as `jevlaya-lab notebooks --run` uses) is this
        # bench's tool, not part of the Binder image, so it is installed after the build
        timed("pip install papermill (runner)", [str(py), "-m", "pip", "install", "-q",
                                                 "papermill"], results)
        for name in args.notebooks:
            timed(f"{name} (fast=False)", [str(py), "-m", "jevlaya_lab.cli", "notebooks", "--run",
                                           "--out", str(Path(tmp) / "out"), name], results,
                  cwd=ROOT, env=env)
    width = max(map(len, results))
    for label, seconds in results.items():
        print(f"{label:<{width}}  {seconds:>7.1f} s")
    out = ROOT / "bench" / "results" / "binder_build.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
