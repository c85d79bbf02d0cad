"""One definition of the hub rules (jevlaya_lab._hub), used by checkpoints, the registry and
local chat models alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from jevlaya_lab._hub import hub_offline, is_hub_id
from jevlaya_lab.decisions.registry import RegistryEntry

PACKAGE = Path(__file__).resolve().parents[1] / "jevlaya_lab"


@pytest.mark.parametrize("text, expected", [
    ("HuggingFaceTB/SmolLM2-135M-Instruct", True),
    ("org/name", True),
    ("a.b/c_d-e.f", True),
    ("gpt2", False),
    ("a/b/c", False),
    ("./org/name", False),
    ("/abs/path", False),
    ("~/models/x", False),
    ("-org/name", False),
    ("org/", False),
])
def test_hub_id_shape(text: str, expected: bool):
    assert is_hub_id(text) is expected


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
@pytest.mark.parametrize("value, expected", [("1", True), ("TRUE", True), (" on ", True), ("0", False), ("", False)])
def test_hub_offline_reads_both_variables(monkeypatch, variable, value, expected):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv(variable, value)
    assert hub_offline() is expected


def test_the_registry_classifies_sources_with_the_same_rule(tmp_path):
    assert RegistryEntry("x", "org/name").kind == "hub"
    assert RegistryEntry("x", "a/b/c").kind == "local"
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert RegistryEntry("x", str(tmp_path / "org" / "name")).kind == "local"


def test_no_other_module_defines_the_rules_again():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_hub.py":
            continue
        text = path.read_text("utf-8")
        if r"[\w.-]*/[\w.-]+" in text or ('environ' in text and '"HF_HUB_OFFLINE"' in text):
            offenders.append(str(path.relative_to(PACKAGE.parent)))
    assert not offenders, f"use jevlaya_lab._hub instead: {offenders}"
