"""The cache folder: where jevlaya_lab keeps what it builds, and how it builds there safely.

:func:`cache_home` is the one rule for the folder, used by every area:

- ``$JEVLAYA_HOME`` when set;
- else ``$JEVLAYA_LAB_CACHE``, the older name, kept as an alias (``JEVLAYA_HOME`` wins when both
  are set);
- else the per-user cache directory: ``$XDG_CACHE_HOME/jevlaya_lab`` (``~/.cache/jevlaya_lab``)
  on Linux, ``~/Library/Caches/jevlaya_lab`` on macOS, ``%LOCALAPPDATA%\\jevlaya_lab\\Cache`` on
  Windows.

Inside it: ``broker.db`` (the default journal), ``models/`` (chat models converted from GGUF and
re-quantised GGUF copies), ``checkpoints/`` (assembled bundled checkpoints), ``encoders/`` (the
converted multilingual encoder), ``lines/`` (read statements' reference statistics,
:mod:`jevlaya_lab.decisions.line_store`) and ``journal-spill/`` (PostgreSQL rows waiting for the
server). ``~/.cache/jevlaya_lab/wheels/`` (the llama.cpp and Binder wheels) belongs to the
Makefile and :mod:`jevlaya_lab.binder`, at that path whatever this rule says. The folders in
``models/``, ``checkpoints/`` and ``encoders/`` are the cache's *entries*
(:mod:`jevlaya_lab._cache_entries`; ``jevlaya-lab cache`` lists and prunes them).

:func:`build_directory` is the one way an entry is built or found there: built into a temporary
sibling, then renamed into place, so a crash or a concurrent process never leaves a half-built
folder that a later call would trust. Finding one built records its use (a stamp touched at most
once an hour); building a new one in a kind folder removes its siblings (the same thing made
from other sources) that nobody used for 30 days
(:func:`~jevlaya_lab._cache_entries.prune_siblings`).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from jevlaya_lab._cache_entries import CACHE_KINDS, prune_siblings, record_use

__all__ = ["HOME_ENV", "HOME_ENV_ALIAS", "build_directory", "cache_home", "models_dir"]

HOME_ENV = "JEVLAYA_HOME"
HOME_ENV_ALIAS = "JEVLAYA_LAB_CACHE"


def cache_home() -> Path:
    """The cache folder (not created here): see the module docstring for the rule."""
    for variable in (HOME_ENV, HOME_ENV_ALIAS):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "jevlaya_lab"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "jevlaya_lab" / "Cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "jevlaya_lab"


def models_dir() -> Path:
    """``models/`` in the cache folder: chat models converted from GGUF (transformers copies and
    re-quantised GGUF files)."""
    return cache_home() / "models"


def build_directory(target: Path, build: Callable[[Path], object], *, ready: Callable[[Path], bool]) -> Path:
    """Return ``target``, building it first unless ``ready(target)`` already holds.

    ``build(staging)`` fills an empty temporary sibling of ``target``, which is then renamed to
    ``target``. When another process renamed its copy first, ours is dropped and theirs is used
    (callers build equivalent contents for equal targets); when the rename fails otherwise, the
    ``OSError`` propagates. The staging folder is always removed.

    A ``target`` found ready has its use recorded (:func:`~jevlaya_lab._cache_entries.record_use`,
    which never raises). A ``target`` built here in one of the cache's kind folders (``models/``,
    ``checkpoints/``, ``encoders/``) removes its siblings unused for 30 days
    (:func:`~jevlaya_lab._cache_entries.prune_siblings`, which never raises either).
    """
    if ready(target):
        record_use(target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    staging.mkdir()
    built = False
    try:
        build(staging)
        try:
            staging.rename(target)
            built = True
        except OSError:  # another process finished first; its copy is as good as ours
            if not ready(target):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if built and _is_kind_folder(target.parent):
        prune_siblings(target)
    return target


def _is_kind_folder(folder: Path) -> bool:
    """Whether ``folder`` is one of the cache folder's kind folders: only there are siblings pruned."""
    if folder.name not in CACHE_KINDS:
        return False
    try:
        return folder.parent.samefile(cache_home())
    except OSError:
        return False
