"""``import jevlaya_lab`` stays cheap: no torch, no transformers."""

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


def test_every_public_name_resolves_to_the_object_its_module_defines():
    import importlib

    import jevlaya_lab

    for name, module in jevlaya_lab._EXPORTS.items():
        assert getattr(jevlaya_lab, name) is getattr(importlib.import_module(module), name), name
    for name, module in jevlaya_lab._SUBPACKAGES.items():
        assert getattr(jevlaya_lab, name) is importlib.import_module(module), name


def test_every_broker_exception_is_public_at_the_top_level():
    import jevlaya_lab
    from jevlaya_lab.broker import errors

    public = {n for n, v in vars(errors).items()
              if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == errors.__name__
              and not n.startswith("_")}
    missing = public - set(jevlaya_lab.__all__)
    assert not missing, f"add these to jevlaya_lab._EXPORTS: {sorted(missing)}"
