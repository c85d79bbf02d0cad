"""A simulated Binder build: what repo2docker does with ``binder/``, done here in a fresh venv.

Binder itself cannot run here, so :func:`build` does with our files what repo2docker does: a new
environment, ``pip install -r binder/requirements.txt`` into it (torch from the CPU wheel pip
finds on this machine rather than the PyTorch index the file names: the same ``2.13.0`` CPU
build, see :func:`local_requirements`), then ``binder/postBuild`` from the repository root with
that environment first on ``PATH`` and a fresh ``HOME`` (so the caches it warms, and
``jupyter trust``, land in the image's home, never the user's). The image's tutorials then run
as a Binder session runs them: :meth:`BinderImage.run_tutorial` starts the kernel through
``binder/start`` with the image's Python, and papermill (the runner of the checks, from *this*
environment: Binder does not need it, so it is not put into the image) executes the notebook.

Four things keep it fast without changing what is tested. The wheels pip chose for these
``binder/`` files are kept in a wheel folder (:func:`binder_wheels`, outside the checkout, named
by a digest of ``binder/requirements.txt``, ``binder/postBuild``, the build backend and this
Python), filled once by ``pip download`` from the indexes, and the build installs from it with
``--no-index``: the same files, resolved the same way, without a network round trip per package
(pip's HTTP cache cannot help here: the indexes this machine reaches send no caching headers, so
a build spent most of its minutes waiting on the network). That is what Binder does too: it
rebuilds the pip step only when the files it comes from change. A change to any of those files
names a new folder, filled afresh. Then pip uses the user's pip cache; ``--no-compile`` (the same
files are installed; the modules a process imports are compiled then, and written for the next
one, instead of every module at install time); and :func:`scratch_dir` puts the image in RAM
when there is room, since removing it from disk is slow. ``postBuild`` itself runs unchanged,
with its ``--no-deps`` installs (from the wheel folder too).

``bench/binder_build.py`` times the steps; ``tests/notebooks/test_binder_build.py`` builds the
image and runs tutorials on the real models (``fast=False``) in it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jevlaya_lab._cache_entries import CACHE_KINDS  # what jevlaya_lab builds in its cache folder
from jevlaya_lab.errors import JevlayaError
from jevlaya_lab.notebooks import find_notebook, notebook_paths, private_kernel, run_notebook

ROOT = Path(__file__).resolve().parents[1]
BINDER_DIR = ROOT / "binder"
KERNEL = "jevlaya-binder"
# what the image's processes must not inherit from the process that builds it: a PYTHONPATH to
# a checkout, a cache folder outside the image's home, or a ban on writing bytecode (Binder has
# none: with --no-compile the first import writes what later processes read)
CLEARED = ("PYTHONPATH", "JEVLAYA_HOME", "JEVLAYA_LAB_CACHE", "PYTHONDONTWRITEBYTECODE")
# the built image is ~3.1 GB (venv 1.5 GB, warmed caches 1.6 GB); the tutorials' kernels need a
# few GB more
IMAGE_ROOM = 8 << 30
RAM_ROOM = 12 << 30
LLAMA_CPP_VERSION = "0.3.36"  # as in the Makefile and binder/postBuild


class BinderBuildError(JevlayaError, RuntimeError):
    """A step of the simulated Binder build failed (the message names the step and command)."""


def tutorials() -> list[str]:
    """Every tutorial's name (``01_quickstart_tour``, ...): what an image is checked with."""
    return [p.stem for p in notebook_paths()]


def local_requirements(text: str) -> str:
    """``binder/requirements.txt`` without the PyTorch index option, torch without ``+cpu``:
    pip then takes the CPU wheel of the same release that lies on this machine."""
    lines = []
    for line in text.splitlines():
        if line.strip().startswith(("--extra-index-url", "--index-url")):
            continue
        lines.append(re.sub(r"^torch==([\w.]+)\+cpu", r"torch==\1", line))
    return "\n".join(lines) + "\n"


@dataclass
class BinderImage:
    """A built image under ``root``: ``venv/`` (the environment), ``home/`` (its user's home,
    with the caches postBuild warmed); ``seconds`` holds each step's wall time."""

    root: Path
    seconds: dict[str, float] = field(default_factory=dict)
    wheels: Path | None = None  # the wheel folder pip installed from (:func:`binder_wheels`)

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self) -> dict[str, str]:
        """The variables the image's processes see on top of the caller's: its home and cache
        folder, its ``bin`` first on ``PATH``, nothing pointing back at the builder."""
        return {**{name: "" for name in CLEARED},
                "HOME": str(self.home), "XDG_CACHE_HOME": str(self.home / ".cache"),
                "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def cache_entries(self) -> set[str]:
        """The model caches in the image's home (``.cache/jevlaya_lab/models/<x>``,
        ``.../checkpoints/<y>``, ``.../encoders/<z>``, wherever a cache folder under the home
        holds them): a tutorial that finds the caches postBuild warmed adds nothing here."""
        return {str(entry.relative_to(self.home)) for kind in CACHE_KINDS
                for pattern in (f"*/{kind}/*", f"*/*/{kind}/*") for entry in self.home.glob(pattern)
                if not entry.name.startswith(".")}

    def statement_lines(self) -> set[str]:
        """The read statements' numbers kept in the image's default cache folder
        (``.cache/jevlaya_lab/lines/<key>.json``, :mod:`jevlaya_lab.decisions.line_store`):
        postBuild runs the tutorial that asks a user's own statements, so that tutorial, run again
        in a session, reads no statement anew and adds nothing here."""
        return {p.name for p in (self.home / ".cache" / "jevlaya_lab" / "lines").glob("*.json")}

    def run_tutorial(self, name: str, out_dir: Path, *, fast: bool = False,
                     cell_timeout: float = 600.0) -> dict[str, Any]:
        """Execute tutorial ``name`` in the image as a Binder session would (kernel started by
        ``binder/start`` with the image's Python, cwd ``out_dir``); returns its checks, like
        :func:`jevlaya_lab.notebooks.run_notebook`, whose errors it raises."""
        argv = ["bash", str(BINDER_DIR / "start"), str(self.python), "-m", "ipykernel_launcher",
                "-f", "{connection_file}"]
        private_kernel(self.root / "jupyter", name=KERNEL, argv=argv, env=self.env())
        started = time.perf_counter()
        result = run_notebook(find_notebook(name), out_dir, parameters={"fast": fast},
                              cell_timeout=cell_timeout, kernel_name=KERNEL)
        self.seconds[f"{name} (fast={fast})"] = round(time.perf_counter() - started, 1)
        return result


def llama_wheels() -> Path:
    """The builder's llama.cpp wheel folder: ``$LLAMA_WHEELS``, else the Makefile's default."""
    given = os.environ.get("LLAMA_WHEELS")
    default = Path.home() / ".cache/jevlaya_lab/wheels" / f"llama-cpp-python-{LLAMA_CPP_VERSION}-x86-64-v3"
    return Path(given) if given else default


def postbuild_pins(text: str) -> list[str]:
    """The ``name==version`` pins postBuild installs from an index (its ``pip install`` lines,
    not the ones with ``--no-index``, which name their own folder)."""
    pins: list[str] = []
    for line in text.splitlines():
        command = line.split("#", 1)[0]
        if "pip install" not in command or "--no-index" in command:
            continue
        pins += [pin for pin in re.findall(r"[\"']?([A-Za-z0-9][A-Za-z0-9_.\-]*==[A-Za-z0-9_.+!\-]+)[\"']?", command)
                 if "$" not in pin]
    return pins


def build_requires() -> list[str]:
    """The project's build backend requirements (``[build-system] requires`` of pyproject.toml):
    what ``pip install -e .`` in postBuild installs into its isolated build environment."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as fh:
        return list(tomllib.load(fh).get("build-system", {}).get("requires", []))


def binder_wheels(requirements: str) -> Path:
    """The wheel folder of this build: ``$BINDER_WHEELS`` when set, else a folder beside the
    llama.cpp wheels named by a digest of what decides its content: the requirements pip gets
    (``requirements``, the text :func:`local_requirements` made), ``binder/postBuild``, the build
    backend's requirements and this Python's version and platform."""
    given = os.environ.get("BINDER_WHEELS")
    if given:
        return Path(given)
    digest = hashlib.sha256()
    for part in (requirements, (BINDER_DIR / "postBuild").read_text("utf-8"), "\n".join(build_requires()),
                 f"{sys.version_info[:2]} {sys.platform} {os.uname().machine}"):
        digest.update(part.encode("utf-8") + b"\0")
    return llama_wheels().parent / f"binder-{digest.hexdigest()[:16]}"


def fill_wheels(image: BinderImage, target: Path, requirements: Path, env: dict[str, str],
                log: Callable[[str], object]) -> None:
    """``pip download`` (the image's pip, from the indexes) of everything the build installs from
    an index into ``target``: the requirements with their dependencies, postBuild's ``--no-deps``
    pins, the build backend. Filled in a sibling folder, then renamed: a folder that exists is
    complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=f"{target.name}.part-", dir=target.parent))
    try:
        download = [str(image.python), "-m", "pip", "download", "-q", "-d", str(part)]
        _step(image, "download wheels (once for these binder/ files)", [*download, "-r", str(requirements)],
              log, env=env)
        pins = postbuild_pins((BINDER_DIR / "postBuild").read_text("utf-8"))
        _step(image, "download postBuild's wheels", [*download, "--no-deps", *pins, *build_requires()],
              log, env=env)
        try:
            part.rename(target)
        except OSError:  # another build filled it meanwhile: keep that one
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(part, ignore_errors=True)


def scratch_dir() -> Path:
    """Where to build an image: ``/dev/shm`` when that RAM-backed folder and the free memory
    have room for it, else the system temp folder. Removing the ~3 GB image from a disk can take
    minutes (on this machine's ext4, mounted with ``discard``, 126 s), from RAM about a second."""
    shm = Path("/dev/shm")
    try:
        shm_free = shutil.disk_usage(shm).free if shm.is_dir() and os.access(shm, os.W_OK) else 0
        available = next((int(line.split()[1]) * 1024 for line in
                          Path("/proc/meminfo").read_text().splitlines()
                          if line.startswith("MemAvailable:")), 0)
    except OSError:
        shm_free = available = 0
    return shm if shm_free >= IMAGE_ROOM and available >= RAM_ROOM else Path(tempfile.gettempdir())


def build(root: Path, *, log: Callable[[str], object] = print) -> BinderImage:
    """Build the image under ``root`` (created; a non-empty folder is refused): venv,
    requirements, postBuild. Raises :class:`BinderBuildError` naming the step that failed."""
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise BinderBuildError(f"root={str(root)!r} is not empty; build the image in a new folder")
    image = BinderImage(root)
    image.home.mkdir(parents=True)
    pip = [str(image.python), "-m", "pip"]
    _step(image, "create venv", [sys.executable, "-m", "venv", str(image.venv)], log)
    # the user's pip cache, asked of pip before HOME moves (None when caching is switched off)
    cache = subprocess.run([*pip, "cache", "dir"], capture_output=True, text=True)
    # and the user's llama.cpp wheel folder (see the Makefile's llama-wheel): postBuild installs
    # the wheel found there instead of compiling llama.cpp again, or compiles it into that folder
    env = {**os.environ, **image.env(), "LLAMA_WHEELS": str(llama_wheels()),
           **({"PIP_CACHE_DIR": cache.stdout.strip()} if cache.returncode == 0 else {})}
    requirements = root / "requirements.txt"
    text = local_requirements((BINDER_DIR / "requirements.txt").read_text("utf-8"))
    requirements.write_text(text, "utf-8")
    wheels = binder_wheels(text)
    if not wheels.is_dir():
        fill_wheels(image, wheels, requirements, env, log)
    # every index install (postBuild's too, and its build backend's) from the wheel folder only
    env = {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    image.wheels = wheels
    _step(image, "pip install -r requirements",
          [*pip, "install", "-q", "--no-compile", "-r", str(requirements)], log, env=env)
    _step(image, "postBuild", ["bash", str(BINDER_DIR / "postBuild")], log, env=env, cwd=ROOT)
    return image


def _step(image: BinderImage, label: str, cmd: list[str], log: Callable[[str], object],
          **kwargs: Any) -> None:
    log(f"{label}: {' '.join(cmd)[:160]}")
    started = time.perf_counter()
    done = subprocess.run(cmd, check=False, **kwargs)
    image.seconds[label] = round(time.perf_counter() - started, 1)
    if done.returncode:
        raise BinderBuildError(f"simulated Binder build, step {label!r} failed with exit code "
                               f"{done.returncode} after {image.seconds[label]} s: {' '.join(cmd)} "
                               "(its output is above)")
    log(f"  {image.seconds[label]} s")
