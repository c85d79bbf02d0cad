"""``jevlaya-lab cache``: the cache folder's entries (kind, name, size, last use, the total), and
``jevlaya-lab cache --prune DAYS [--dry-run]``, which removes those not used for DAYS days.

What an entry is, how its last use is recorded and what is pruned without asking:
:mod:`jevlaya_lab._cache_entries`. Bad input prints one line on stderr and exits with 2; an
entry that could not be removed is named on stderr and the exit code is 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from jevlaya_lab._cache_dir import cache_home
from jevlaya_lab._cache_entries import CacheEntry, check_days, entries, prune

__all__ = ["cache_command"]

PROG = "jevlaya-lab cache"


def cache_command(argv: list[str]) -> int:
    """``jevlaya-lab cache [--prune DAYS [--dry-run]]``."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="List what jevlaya_lab built in its cache folder ($JEVLAYA_HOME: models/, "
                               "checkpoints/, encoders/), or remove what was not used for DAYS days.")
    parser.add_argument("--prune", metavar="DAYS",
                        help="remove the entries not used for DAYS days (0 or more; 0 removes all)")
    parser.add_argument("--dry-run", action="store_true", help="with --prune: list what would go, remove nothing")
    args = parser.parse_args(argv)
    if args.prune is None:
        if args.dry_run:
            return _bad("--dry-run only goes with --prune DAYS; add --prune DAYS (e.g. --prune 30 --dry-run)")
        return _list()
    try:
        days = check_days(float(args.prune))
    except ValueError:  # not a number, or not a finite one of 0 or more: said in the option's own words
        return _bad(f"--prune DAYS={args.prune!r} is invalid: give the number of days an entry may go unused, "
                    "0 or more (0 removes every entry), e.g. --prune 30")
    return _prune(days, args.dry_run)


def _list() -> int:
    home = cache_home()
    try:
        found = entries(home)
    except OSError as exc:
        print(f"{PROG}: could not read {home}: {exc}; make it readable or set JEVLAYA_HOME to the cache folder",
              file=sys.stderr)
        return 1
    now = time.time()
    if found:
        width = max(len(entry.name) for entry in found)
        print(f"{'kind':<12} {'name':<{width}} {'size':>10}  last used")
        for entry in found:
            print(f"{entry.kind:<12} {entry.name:<{width}} {size_text(entry.size):>10}  {_when(entry, now)}")
    total = sum(entry.size for entry in found)
    print(f"total: {len(found)} entr{'y' if len(found) == 1 else 'ies'}, {size_text(total)} in {home}")
    return 0


def _prune(days: float, dry_run: bool) -> int:
    home = cache_home()
    try:
        result = prune(home, days, dry_run=dry_run)
    except OSError as exc:
        print(f"{PROG}: could not read {home}: {exc}; make it writable or set JEVLAYA_HOME to the cache folder",
              file=sys.stderr)
        return 1
    now = time.time()
    verb = "would remove" if dry_run else "removed"
    for entry in result.removed:
        print(f"{verb} {entry.kind}/{entry.name}  {size_text(entry.size)}  last used {_when(entry, now)}")
    for entry, why in result.failed:
        print(f"{PROG}: could not remove {entry.path}: {why}; make {entry.path.parent} writable and run "
              f"'{PROG} --prune {days:g}' again, or delete it by hand", file=sys.stderr)
    print(f"{'would free' if dry_run else 'freed'} {size_text(result.freed)} ({result.freed} bytes) from "
          f"{len(result.removed)} entr{'y' if len(result.removed) == 1 else 'ies'} not used for {days:g} days "
          f"in {home}")
    return 1 if result.failed else 0


def size_text(size: int) -> str:
    """``538.2 MB``: bytes in decimal units, as the rest of the project writes sizes."""
    if size < 1000:
        return f"{size} B"
    value = size / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _when(entry: CacheEntry, now: float) -> str:
    """When ``entry`` was last used, and how long ago: in minutes under an hour, in hours under a
    day, else in days."""
    seconds = max(0.0, now - entry.last_used)
    ago = (f"{int(seconds // 60)} min ago" if seconds < 3600 else f"{int(seconds // 3600)} h ago"
           if seconds < 86400 else f"{int(seconds // 86400)} days ago")
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(entry.last_used))} ({ago})"


def _bad(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2
