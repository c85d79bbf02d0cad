"""Fixtures: a private PostgreSQL server for the journal tests.

The server starts once per test session, and only when a test asks for ``pg_server`` (or a
fixture built on it): initdb into a temporary directory, ``postgres`` listening on 127.0.0.1 on a
free port with its unix socket in that directory, password login (scram-sha-256) so the tests
exercise real credentials. As root it runs as the ``postgres`` system user (initdb refuses root).
It is stopped by its own pid at the end. Missing server binaries FAIL the tests with what to
install: a skipped test is not a pass.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BINARIES = ("initdb", "pg_ctl", "postgres")
INSTALL_HINT = ("install the PostgreSQL server: apt-get install -y postgresql (Debian/Ubuntu; "
                ".ci/run does this), or put initdb, pg_ctl and postgres on PATH")


def find_pg_bindir() -> Path:
    """The directory holding initdb, pg_ctl and postgres: PATH first, then Debian's layout."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted((Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
                         reverse=True)
    for folder in candidates:
        if all(os.access(folder / name, os.X_OK) for name in BINARIES):
            return folder
    pytest.fail(f"PostgreSQL server binaries {BINARIES} not found on PATH or in "
                f"/usr/lib/postgresql/*/bin; {INSTALL_HINT}", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One throwaway PostgreSQL cluster (superuser ``jevlaya`` with a random password)."""

    user = "jevlaya"

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.password = "pw-" + secrets.token_hex(8)
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:  # initdb refuses root: run the cluster as the postgres user
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("running as root needs a 'postgres' system user to own the test "
                            f"server; {INSTALL_HINT}", pytrace=False)
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        self.dir = Path(tempfile.mkdtemp(prefix="jevlaya-pg-"))
        if self._as:
            os.chown(self.dir, self._as["user"], self._as["group"])
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def _run(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run([str(self.bindir / args[0]), *args[1:]], cwd=self.dir,
                              capture_output=True, text=True, timeout=timeout, **self._as)
        if done.returncode != 0:
            pytest.fail(f"{args[0]} failed ({done.returncode}): {done.stderr[-800:]}",
                        pytrace=False)

    def start(self, timeout: float = 30.0) -> None:
        pwfile = self.dir / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=scram-sha-256",
                  f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync", "--no-instructions")
        pwfile.unlink()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "shared_buffers=16MB", "-c", "max_connections=60"],
                cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                **self._as)
        atexit.register(self.stop)
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"postgres exited with {self.proc.returncode}: "
                            f"{self.log.read_text(errors='replace')[-800:]}", pytrace=False)
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"postgres not ready after {timeout} s: "
                                f"{self.log.read_text(errors='replace')[-800:]}", pytrace=False)
                time.sleep(0.05)

    def url(self, dbname: str = "postgres", *, schema: str | None = None,
            password: bool = True) -> str:
        auth = f"{self.user}:{self.password}" if password else self.user
        url = f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"
        return url + (f"?options=-csearch_path%3D{schema}" if schema else "")

    def admin(self, dbname: str = "postgres") -> Any:
        import psycopg

        return psycopg.connect(self.url(dbname), autocommit=True)

    def stop(self) -> None:
        """pg_ctl stop -m immediate, then kill our postgres pid if it is still alive."""
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "stop", "-m",
                            "immediate", "-w", "-t", "10"], cwd=self.dir, capture_output=True,
                           timeout=20, **self._as)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    server = PostgresServer(find_pg_bindir())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    """A URL (password included) whose search path is a fresh, empty schema: one journal."""
    schema = "t_" + secrets.token_hex(6)
    with pg_server.admin() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return pg_server.url(schema=schema)


@pytest.fixture
def pg_database(pg_server: PostgresServer) -> str:
    """The name of a fresh, empty database (for tests of the default ``jevlaya_lab`` schema)."""
    name = "d_" + secrets.token_hex(6)
    with pg_server.admin() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return name
