"""One cache folder rule and one atomic-build helper (jevlaya_lab._cache_dir) for every area."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jevlaya_lab import _cache_dir
from jevlaya_lab._cache_dir import build_directory, cache_home
from jevlaya_lab._cache_entries import STAMP

PACKAGE = Path(__file__).resolve().parents[1] / "jevlaya_lab"


def test_jevlaya_home_wins_and_the_old_name_is_an_alias(monkeypatch, tmp_path):
    monkeypatch.setenv("JEVLAYA_LAB_CACHE", str(tmp_path / "old"))
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "new"))
    assert cache_home() == tmp_path / "new"
    monkeypatch.delenv("JEVLAYA_HOME")
    assert cache_home() == tmp_path / "old"


def test_without_either_variable_the_per_user_cache_is_used(monkeypatch, tmp_path):
    monkeypatch.delenv("JEVLAYA_HOME", raising=False)
    monkeypatch.delenv("JEVLAYA_LAB_CACHE", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_home() == tmp_path / "xdg" / "jevlaya_lab"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # set but empty counts as unset
    assert cache_home() == Path.home() / ".cache" / "jevlaya_lab"


def test_the_journal_and_the_local_models_use_the_same_folder(monkeypatch, tmp_path):
    from jevlaya_lab.journal import open_store
    from jevlaya_lab.local import loading

    monkeypatch.delenv("JEVLAYA_HOME", raising=False)
    monkeypatch.setenv("JEVLAYA_LAB_CACHE", str(tmp_path))  # the alias reaches every area too
    store = open_store()
    try:
        assert store.location == str(tmp_path / "broker.db")
    finally:
        store.close()
    assert loading.cache_dir() == tmp_path / "models"


def test_no_other_module_reads_the_cache_variables():
    names = (_cache_dir.HOME_ENV, _cache_dir.HOME_ENV_ALIAS, "XDG_CACHE_HOME", "LOCALAPPDATA")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_cache_dir.py":
            continue
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if "environ" in line and any(name in line for name in names):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{number}")
    assert not offenders, f"use jevlaya_lab._cache_dir.cache_home() instead: {offenders}"


def _fill(staging: Path, text: str = "ours") -> None:
    (staging / "data.txt").write_text(text)
    (staging / "READY").write_text("")


def _ready(path: Path) -> bool:
    return (path / "READY").is_file()


def test_build_directory_builds_once_and_leaves_no_staging(tmp_path):
    target = tmp_path / "cache" / "thing"
    calls = []
    assert build_directory(target, lambda s: calls.append(_fill(s)), ready=_ready) == target
    assert build_directory(target, lambda s: calls.append(_fill(s, "again")), ready=_ready) == target
    assert len(calls) == 1 and (target / "data.txt").read_text() == "ours"
    assert sorted(p.name for p in target.parent.iterdir()) == ["thing"]


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    target = tmp_path / "thing"

    def broken(staging: Path) -> None:
        (staging / "half.bin").write_bytes(b"x" * 10)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_directory(target, broken, ready=_ready)
    assert list(tmp_path.iterdir()) == []


def test_losing_the_rename_race_uses_the_winners_copy(tmp_path):
    target = tmp_path / "thing"

    def slow_build(staging: Path) -> None:
        _fill(staging, "ours")
        target.mkdir()  # another process renames its finished copy into place meanwhile
        _fill(target, "theirs")

    assert build_directory(target, slow_build, ready=_ready) == target
    assert (target / "data.txt").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["thing"]


def test_a_rename_failure_without_a_finished_target_is_raised(tmp_path):
    target = tmp_path / "thing"

    def blocked(staging: Path) -> None:
        _fill(staging)
        target.mkdir()
        (target / "junk").write_text("not a finished build")

    with pytest.raises(OSError):
        build_directory(target, blocked, ready=_ready)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thing"]


def test_processes_racing_to_build_end_with_one_complete_copy(tmp_path):
    target = tmp_path / "cache" / "thing"
    code = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from jevlaya_lab._cache_dir import build_directory

        def build(staging):
            for i in range(20):
                (staging / f"part{{i}}").write_text(str(os.getpid()))
                time.sleep(0.005)
            (staging / "READY").write_text(str(os.getpid()))

        out = build_directory(Path({str(target)!r}), build, ready=lambda p: (p / "READY").is_file())
        print(len([p for p in out.iterdir() if p.name != {STAMP!r}]))  # a later finder stamps its use
    """)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(4)]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == ["21"] * 4
    writers = {(target / f"part{i}").read_text() for i in range(20)} | {(target / "READY").read_text()}
    assert len(writers) == 1, "the folder mixes files from several builds"
    assert [p.name for p in target.parent.iterdir()] == ["thing"]
