"""One error root: every exception class jevlaya_lab defines derives from ``JevlayaError``,
lives in its area's ``errors`` module, keeps its built-in base and is public at the top."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import jevlaya_lab
from jevlaya_lab import JevlayaError

# Exceptions that never reach a caller, each with the reason it may stay outside the tree.
INTERNAL = {
    "jevlaya_lab.broker.http.Failure": "a provider outcome, turned into a ProviderError by to_error()",
    "jevlaya_lab.broker.wire.DecodingError": "one of the wire's errors (WIRE_ERRORS), which http.py "
                                             "turns into an unavailable Failure; never leaves it",
    "jevlaya_lab.local.fault_injection.Cut": "raised inside the local server's generation to drop "
                                             "a connection on purpose (cut_after); never leaves it",
    "jevlaya_lab.local.fault_injection.Stopping": "the local server abandons a request while it "
                                                  "stops; caught by its own handler",
    "jevlaya_lab.local.limits.TooManyObjects": "raised and caught inside the local server's request "
                                               "parsing, answered as a JSON 400",
}
# Modules outside the five areas that may define their own error next to the code raising it.
TOP_LEVEL_HOMES = {"jevlaya_lab.errors", "jevlaya_lab.notebooks", "jevlaya_lab.binder", "jevlaya_lab.telemetry"}

# The built-in base each public error had before the root existed: `except` clauses written
# against it must keep working.
BUILTIN_BASES = {
    "CatalogError": ValueError,
    "BrokerClosedError": RuntimeError,
    "QuestionError": ValueError,
    "SchemaError": ValueError,
    "StateError": ValueError,
    "LabelError": ValueError,
    "BudgetError": ValueError,
    "TokenizerError": TypeError,
    "CheckpointError": ValueError,
    "CheckpointNotFoundError": FileNotFoundError,
    "BundledCheckpointError": RuntimeError,
    "DatasetError": FileNotFoundError,
    "InvalidHookError": TypeError,
    "JournalSchemaError": RuntimeError,
    "UnsupportedSourceError": ValueError,
    "JournalUnavailableError": ConnectionError,
    "LocalModelError": RuntimeError,
    "ChatRequestError": ValueError,
    "FaultProfileError": ValueError,
    "UnknownModelError": LookupError,
    "UnknownLLMError": KeyError,
    "PromptError": ValueError,
    "NotebookCheckError": AssertionError,
    "BinderBuildError": RuntimeError,
    "FrameError": ValueError,
    "TelemetryError": ValueError,
}


def defined_exceptions() -> dict[str, type[BaseException]]:
    """``module.Name`` -> class, for every public exception class a jevlaya_lab module defines."""
    found = {}
    for info in pkgutil.walk_packages(jevlaya_lab.__path__, "jevlaya_lab."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == module.__name__ and not name.startswith("_")):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_error_class_derives_from_the_root_and_lives_in_an_errors_module():
    found = defined_exceptions()
    assert "jevlaya_lab.broker.errors.NoLLMAvailableError" in found  # the walk saw the package
    wrong_base, wrong_home = [], []
    for qualified, cls in found.items():
        if qualified in INTERNAL or issubclass(cls, Warning):
            continue
        if not issubclass(cls, JevlayaError):
            wrong_base.append(qualified)
        if not (cls.__module__.endswith(".errors") or cls.__module__ in TOP_LEVEL_HOMES):
            wrong_home.append(qualified)
    assert not wrong_base, f"derive these from jevlaya_lab.errors.JevlayaError: {wrong_base}"
    assert not wrong_home, f"move these into their area's errors.py: {wrong_home}"


def test_every_public_error_and_warning_is_exported_from_the_top():
    found = defined_exceptions()
    missing = sorted(q for q, cls in found.items()
                     if q not in INTERNAL and getattr(jevlaya_lab, cls.__name__, None) is not cls)
    assert not missing, f"add these to jevlaya_lab._EXPORTS: {missing}"


@pytest.mark.parametrize("name", sorted(BUILTIN_BASES))
def test_each_error_keeps_its_builtin_base(name: str):
    cls = getattr(jevlaya_lab, name)
    assert issubclass(cls, JevlayaError)
    assert issubclass(cls, BUILTIN_BASES[name]), f"{name} lost its {BUILTIN_BASES[name].__name__} base"


def test_catalog_error_is_inside_the_broker_hierarchy():
    assert issubclass(jevlaya_lab.CatalogError, jevlaya_lab.BrokerError)
    assert issubclass(jevlaya_lab.LLMRequestError, jevlaya_lab.BrokerError)
    assert not issubclass(jevlaya_lab.CatalogError, jevlaya_lab.LLMRequestError)


def test_a_raised_error_is_caught_by_the_root_and_by_its_old_builtin_base(tmp_path):
    from jevlaya_lab.broker.catalog import parse_catalog
    from jevlaya_lab.decisions.questions import parse_questions
    from jevlaya_lab.hooks import HookRunner
    from jevlaya_lab.journal import open_store

    with pytest.raises(JevlayaError) as caught:
        parse_questions({"q": {"type": "choice", "options": []}})
    assert isinstance(caught.value, ValueError) and type(caught.value).__name__ == "QuestionError"
    with pytest.raises(ValueError) as caught:
        open_store("mysql://user:secret@db.example/j")
    assert isinstance(caught.value, jevlaya_lab.UnsupportedSourceError)
    assert "secret" not in str(caught.value)
    with pytest.raises(jevlaya_lab.CatalogError, match="'models' list"):
        parse_catalog({"entries": []}, "test")
    with pytest.raises(TypeError) as caught:
        HookRunner(hooks=[object()])
    assert isinstance(caught.value, jevlaya_lab.InvalidHookError)


def test_errors_and_result_types_import_without_torch():
    names = ", ".join(sorted(n for n, m in jevlaya_lab._EXPORTS.items()
                             if m.endswith((".errors", ".results", ".routing"))))
    code = (f"import sys; from jevlaya_lab import {names}; "
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
