"""The cache folder's entries: what jevlaya_lab built there, how big, when last used, and pruning.

An *entry* is a folder ``<cache folder>/<kind>/<name>`` for each kind in :data:`CACHE_KINDS`:
``models/`` (GGUF conversions and re-quantised copies), ``checkpoints/`` (assembled bundled
checkpoints) and ``encoders/`` (the converted multilingual encoder). A name starting with ``.``
is a build or a removal in progress, never an entry. Symlinks are not followed: a kind folder or
an entry that is a symlink is left out, and a symlink inside an entry counts (and is removed) as
the link itself, so nothing outside the cache is listed or removed. The cache's other contents
(the journal, ``lines/``, ``wheels/``) are not entries; the code that writes them keeps them.

Names are ``<base>-<fingerprint>``: the fingerprint is a hex digest of what the entry was made
from (8 hex digits or more), or for the encoder the version of the wheel it was converted from.
Entries of one kind with one base name are *siblings*, copies of one thing made from different
sources: ``mini-en-0d6cf247e10a`` and ``mini-en-1399da05bc60`` (two releases of the head), or
two ``SmolLM2-135M-Instruct.Q4_1-<hex>`` conversions, whereas
``SmolLM2-135M-Instruct.Q4_1-Q8_0-<hex>`` (a re-quantised copy) has another base name.

**Last use.** :func:`record_use` touches a stamp file (:data:`STAMP`) inside the entry, at most
once every :data:`STAMP_EVERY` seconds; :func:`jevlaya_lab._cache_dir.build_directory`, the one
place every entry is built or found, calls it whenever it finds one built. On a read-only cache
it fails silently (a ``stat`` and a refused write). :func:`last_used` is the later of the
stamp's and the entry folder's mtime, so an entry never found again counts as used when it was
built.

**Pruning.** :func:`prune` removes the entries not used for a number of days (``jevlaya-lab
cache --prune DAYS``, :mod:`jevlaya_lab.commands.cache`). :func:`prune_siblings` is the automatic
part and the conservative one: when ``build_directory`` builds a new entry, only that entry's
siblings not used for :data:`SIBLING_DAYS` days go. Thirty days is this project's own choice, not
a figure any requirement fixed. Several environments (virtualenvs, a Binder image, Dask workers on a
shared volume) may share one cache folder while running different releases: an entry any of them
used within a month stays, and one that no environment has used for a month most likely belongs
to a release none of them runs any more. Removing it by mistake costs a rebuild (seconds for a
checkpoint, about 20 s for a conversion), never an error.

A removal first renames the entry to a ``.<random>.removing`` sibling, then deletes that:
a reader never finds half an entry, and a deletion stopped half-way leaves a folder no lookup
trusts, which the next prune of that kind deletes.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CACHE_KINDS", "SIBLING_DAYS", "STAMP", "STAMP_EVERY", "CacheEntry", "Pruned", "base_name",
           "check_days", "entries", "last_used", "prune", "prune_siblings", "record_use"]

CACHE_KINDS = ("models", "checkpoints", "encoders")  # what jevlaya_lab builds in its cache folder
STAMP = ".last-used"
STAMP_EVERY = 3600.0  # seconds: a stamp is touched at most once an hour per entry
SIBLING_DAYS = 30  # a new entry removes its siblings unused for this long (see the module docstring)
DAY = 86400.0
_REMOVING = ".removing"
# <base>-<fingerprint>: a hex digest of 8+ digits, or a version (0.3.0, 1.2rc1) for the encoder
_NAME = re.compile(r"(?P<base>.+)-(?:[0-9a-f]{8,64}|\d+(?:\.[0-9A-Za-z+!]+)+)")
logger = logging.getLogger("jevlaya_lab.cache")


@dataclass(frozen=True)
class CacheEntry:
    """One entry: its ``kind`` (``models``, ...), folder, size in bytes and last use (epoch seconds)."""

    kind: str
    path: Path
    size: int
    last_used: float

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class Pruned:
    """What :func:`prune` removed (or, in a dry run, would remove), and what it could not."""

    removed: list[CacheEntry] = field(default_factory=list)
    failed: list[tuple[CacheEntry, str]] = field(default_factory=list)  # (entry, why)

    @property
    def freed(self) -> int:
        """Bytes the removed entries held."""
        return sum(entry.size for entry in self.removed)


def base_name(name: str) -> str | None:
    """The name without its fingerprint (``mini-en-0d6cf247e10a`` -> ``mini-en``); ``None`` when
    the name ends in no fingerprint (such an entry has no siblings)."""
    match = _NAME.fullmatch(name)
    return match["base"] if match else None


def check_days(days: float) -> float:
    """``days`` if it is a finite number of 0 or more; else a ``ValueError`` naming ``days``."""
    if not isinstance(days, (int, float)) or isinstance(days, bool) or not math.isfinite(days) or days < 0:
        raise ValueError(f"days={days!r} is invalid: give the number of days an entry may go unused, "
                         "0 or more (0 removes every entry), e.g. 30")
    return float(days)


def record_use(entry: Path, *, now: float | None = None) -> None:
    """Note that ``entry`` was used: touch its stamp unless that was done within
    :data:`STAMP_EVERY` seconds. Never raises: a read-only or vanished entry is left as it is."""
    now = time.time() if now is None else now
    stamp = entry / STAMP
    try:
        try:
            found = stamp.lstat()
        except FileNotFoundError:
            flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            os.close(os.open(stamp, flags, 0o644))
        else:
            if not stat.S_ISREG(found.st_mode) or now - found.st_mtime < STAMP_EVERY:
                return
        os.utime(stamp, (now, now))
    except OSError:
        pass


def last_used(entry: Path) -> float:
    """When ``entry`` was last used: the later of its stamp's and its folder's mtime."""
    used = entry.lstat().st_mtime
    try:
        found = (entry / STAMP).lstat()
    except OSError:
        return used
    return max(used, found.st_mtime) if stat.S_ISREG(found.st_mode) else used


def entries(home: Path, kinds: Iterable[str] = CACHE_KINDS) -> list[CacheEntry]:
    """The entries under the cache folder ``home`` (none when it does not exist), by kind then name."""
    found: list[CacheEntry] = []
    for kind in kinds:
        found.extend(_entries_of(home / kind, kind))
    return found


def prune(home: Path, days: float, *, dry_run: bool = False, now: float | None = None) -> Pruned:
    """Remove the entries under ``home`` not used for ``days`` days (:func:`check_days`); with
    ``dry_run`` only list them. An entry that cannot be removed is reported in ``failed``."""
    cutoff = (time.time() if now is None else now) - check_days(days) * DAY
    result = Pruned()
    for kind in CACHE_KINDS:
        stale = _entries_of(home / kind, kind, unused_since=cutoff)
        if dry_run:
            result.removed.extend(stale)
            continue
        _remove(stale, result)
        _sweep(home / kind)
    return result


def prune_siblings(target: Path, *, days: float = SIBLING_DAYS, now: float | None = None) -> list[CacheEntry]:
    """Remove the siblings of the entry ``target`` (same kind folder, same :func:`base_name`)
    not used for ``days`` days; return them. Never raises: what cannot be removed stays, with
    one warning on the ``jevlaya_lab.cache`` logger."""
    base = base_name(target.name)
    if base is None:
        return []
    cutoff = (time.time() if now is None else now) - check_days(days) * DAY
    try:
        stale = _entries_of(target.parent, target.parent.name, unused_since=cutoff,
                            keep=lambda path: path.name != target.name and base_name(path.name) == base)
    except OSError as exc:  # the kind folder could not be read: nothing is removed
        logger.warning("could not look for unused copies beside %s: %s", target, exc)
        return []
    result = Pruned()
    _remove(stale, result)
    _sweep(target.parent)
    if result.failed:
        logger.warning("could not remove %d unused cache entr%s beside %s (%s); run 'jevlaya-lab cache "
                       "--prune %g' once the folder is writable, or delete them by hand",
                       len(result.failed), "y" if len(result.failed) == 1 else "ies", target,
                       "; ".join(f"{entry.path}: {why}" for entry, why in result.failed), days)
    for entry in result.removed:
        logger.info("removed %s (%d bytes), unused since %s", entry.path, entry.size, time.ctime(entry.last_used))
    return result.removed


def _entries_of(folder: Path, kind: str, *, unused_since: float = math.inf,
                keep: Callable[[Path], bool] | None = None) -> list[CacheEntry]:
    """The entries in one kind folder last used before ``unused_since`` (default: all) whose path
    ``keep`` accepts; a kind folder that is a symlink or absent has none. Only those are sized
    (a walk of each entry's files), not every entry a prune looks at."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.is_symlink() or not path.is_dir() or (keep and not keep(path)):
            continue
        try:
            used = last_used(path)
            if used < unused_since:
                found.append(CacheEntry(kind, path, _size(path), used))
        except FileNotFoundError:  # removed meanwhile by another process
            continue
    return found


def _size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (a symlink counts as itself, never followed)."""
    total = 0
    for root, _, files in os.walk(folder, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def _remove(stale: list[CacheEntry], result: Pruned) -> None:
    """Remove each entry (renamed aside first, then deleted), recording it in ``result``."""
    for entry in stale:
        aside = entry.path.with_name(f".{uuid.uuid4().hex}{_REMOVING}")  # short whatever the name
        try:
            entry.path.rename(aside)
        except FileNotFoundError:  # another process removed it first
            continue
        except OSError as exc:
            result.failed.append((entry, exc.strerror or str(exc)))
            continue
        result.removed.append(entry)
        shutil.rmtree(aside, ignore_errors=True)  # what stays is swept by the next prune


def _sweep(folder: Path) -> None:
    """Delete what an interrupted removal left in ``folder`` (``.<random>.removing``)."""
    try:
        leftovers = [] if folder.is_symlink() or not folder.is_dir() else list(folder.iterdir())
    except OSError:
        return
    for path in leftovers:
        if path.name.startswith(".") and path.name.endswith(_REMOVING) and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
