"""``import jevlaya_lab`` stays cheap: no torch, no transformers (spec §3, last rule)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "tokenizers", "safetensors")


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_jevlaya_lab_does_not_import_torch():
    out = run(f"import sys, jevlaya_lab; print([m for m in {HEAVY!r} if m in sys.modules])")
    assert out == "[]"


def test_hooks_and_decisions_packages_do_not_import_torch_either():
    code = ("import sys, jevlaya_lab; from jevlaya_lab import PredictContext, BaseHook, HOOK_EVENTS; "
            "import jevlaya_lab.decisions, jevlaya_lab.hooks; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    assert run(code) == "[]"


def test_first_use_of_agent_loads_the_model_code():
    out = run("import sys, jevlaya_lab; jevlaya_lab.Agent; print('torch' in sys.modules)")
    assert out == "True"
