"""A private kernel spec for this venv's interpreter (never the user's Jupyter setup), and the
simulated Binder image, built in the background from the start of the run.

The Binder build (:func:`jevlaya_lab.binder.build`: pip into a fresh venv, then ``postBuild``)
takes minutes, almost all of it in pip and postBuild's own processes, on one core. A test run
is one pytest process, mostly on one core too; so when the run includes the tests that use the
image, the build starts as soon as collection is done, in its own process (its own session,
``nice``: the tests in front keep priority), while the tests before it run on the other core.
The image is the same as one built when the first test asks for it: the same function, the same
``binder/`` files, a fresh folder; the tests wait for it, fail with the end of its log when a
step failed, and remove it when the module is done. At the end of the run, a build still going
(the run stopped early, or deselected its tests after collection) is stopped by its process
group's id and its folder removed.

Under pytest-xdist (``make test`` runs two workers) every worker collects every test, so none
starts the build at collection: the worker that gets the Binder tests builds on first use. Its
wait is not lost time, as the build then takes that worker's core while the other worker runs
tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from jevlaya_lab import binder
from jevlaya_lab.notebooks import private_kernel

BINDER_TESTS = "test_binder_build.py"
IMAGE_FIXTURE = "image"
BUILD_TIMEOUT = 1500.0  # seconds: as long as the module's own timeout
_BUILD = "from pathlib import Path; import sys; from jevlaya_lab import binder; binder.build(Path(sys.argv[1]))"


class BackgroundBuild:
    """``binder.build`` of a fresh image folder in a child process started now."""

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="jevlaya-binder-", dir=binder.scratch_dir()))
        self.root = self.scratch / "image"
        self.log = self.scratch / "build.log"
        self.started = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["nice", "-n", "5", sys.executable, "-c", _BUILD, str(self.root)],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def wait(self) -> binder.BinderImage:
        """The built image; a failed or overlong build fails the test with its log's end."""
        try:
            code = self.proc.wait(timeout=max(1.0, BUILD_TIMEOUT - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"the simulated Binder build took over {BUILD_TIMEOUT:.0f} s:\n{self.tail()}")
        if code:
            pytest.fail(f"the simulated Binder build failed (exit code {code}):\n{self.tail()}")
        return binder.BinderImage(self.root)

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """Stop the build if it still runs (its whole process group, by the group's id)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)


_build_key = pytest.StashKey[BackgroundBuild]()


def _uses_image(item: pytest.Item) -> bool:
    return item.path.name == BINDER_TESTS and IMAGE_FIXTURE in getattr(item, "fixturenames", ())


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker collects all: build on first use
        return
    if session.config.option.collectonly or not any(_uses_image(item) for item in session.items):
        return
    session.config.stash[_build_key] = BackgroundBuild()


def pytest_sessionfinish(session: pytest.Session) -> None:
    build = session.config.stash.get(_build_key, None)
    if build is not None:
        build.remove()


@pytest.fixture(scope="session")
def binder_build(request: pytest.FixtureRequest) -> BackgroundBuild:
    """The build started after collection (or one started now, when the hook started none)."""
    build = request.config.stash.get(_build_key, None)
    if build is None:
        build = request.config.stash[_build_key] = BackgroundBuild()
    return build


@pytest.fixture(scope="session")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jupyter")
    mp = pytest.MonkeyPatch()
    private_kernel(root)  # sets JUPYTER_PATH for this process and the kernels it starts
    yield root
    mp.undo()
