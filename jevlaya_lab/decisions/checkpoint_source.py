"""Where a checkpoint source is on disk: directories, bundle subfolders, bundled names, hub ids.

:func:`resolve_source` turns any source into a local directory. A hub id is tried in the local
Hugging Face cache first; only when it is not cached and the hub is reachable (not
``HF_HUB_OFFLINE``, a TCP connection within 3 s) is it downloaded; otherwise
:class:`~jevlaya_lab.decisions.errors.CheckpointNotFoundError` names the local alternatives.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jevlaya_lab._hub import check_revision, check_token, hub_offline, is_hub_id
from jevlaya_lab.decisions.checkpoint_config import CONFIG_FILE
from jevlaya_lab.decisions.errors import CheckpointNotFoundError

__all__ = ["local_alternatives", "resolve_source"]


def local_alternatives() -> str:
    return ("local alternatives: a checkpoint directory (load('path/to/dir'), e.g. one written "
            "by save_checkpoint or make_tiny_checkpoint), a (directory, subfolder) pair, or the "
            "bundled checkpoints 'english' (alias 'en', 'mini-en') and 'multilingual' (alias 'ml', "
            "'mini-multi'), e.g. load('mini-en')")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connection to the hub endpoint within ``timeout`` (DNS included)."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def _from_hub(repo_id: str, subfolder: str | None, *, revision: str | None = None,
              token: str | None = None) -> Path:
    from huggingface_hub import snapshot_download

    patterns = [f"{subfolder.strip('/')}/*"] if subfolder else None
    pinned: dict[str, Any] = {"revision": revision, "token": token}
    try:
        root = snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True, **pinned)
        path = Path(root) / subfolder if subfolder else Path(root)
        if (path / CONFIG_FILE).is_file():
            return path
    except Exception:  # not cached: fall through to the online attempt
        pass
    where = f"{repo_id!r}" + (f" (subfolder {subfolder!r})" if subfolder else "")
    if hub_offline() or not _hub_reachable():
        reason = "HF_HUB_OFFLINE is set" if hub_offline() else "the Hugging Face hub is unreachable"
        raise CheckpointNotFoundError(
            f"cannot load {where}: it is not a local directory, not in the local hub cache, and "
            f"{reason}. Connect and retry, or use one of the {local_alternatives()}")
    root = snapshot_download(repo_id, allow_patterns=patterns, **pinned)
    return Path(root) / subfolder if subfolder else Path(root)


def resolve_source(source: Any, *, subfolder: str | None = None, revision: str | None = None,
                   token: str | None = None) -> Path:
    """Turn a source into a local checkpoint directory (downloading a hub id when online).

    ``subfolder`` makes ``source`` the ``(directory_or_repo, subfolder)`` pair; ``revision`` (a
    branch, tag or commit) and ``token`` are used for hub downloads only, as in Laya; a blank one
    counts as not given and a non-string is a ``TypeError`` naming it.
    """
    revision, token = check_revision(revision), check_token(token)
    if subfolder is not None:
        if isinstance(source, tuple) or not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"subfolder={subfolder!r} needs a directory or hub id as the source, "
                            f"got {source!r}")
        source = (source, subfolder)
    if isinstance(source, tuple):
        if len(source) != 2 or not all(isinstance(s, (str, os.PathLike)) for s in source):
            raise TypeError(f"source {source!r}: a tuple source must be (directory_or_repo, "
                            "subfolder), both strings")
        base, sub = (os.fspath(s) for s in source)
        if Path(base).expanduser().is_dir():
            return Path(base).expanduser() / sub
        if is_hub_id(base):
            return _from_hub(base, sub, revision=revision, token=token)
        raise CheckpointNotFoundError(f"source {source!r}: {base!r} is neither a directory nor a "
                                      f"hub id 'owner/name'; {local_alternatives()}")
    from jevlaya_lab.decisions import bundled, registry

    if isinstance(source, registry.Bundled):
        return bundled.checkpoint_dir(source.name)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a directory path, a (directory_or_repo, subfolder) pair, "
                        f"a bundled or registered name or a hub id, got {type(source).__name__} {source!r}")
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointNotFoundError(f"source {text!r} is a file; pass the checkpoint directory "
                                      f"that holds {CONFIG_FILE}")
    if isinstance(source, str):
        if text.startswith("bundled:"):
            return bundled.checkpoint_dir(text.split(":", 1)[1])
        defaults = registry.Registry(registry.DEFAULT_MODELS)
        if text in defaults:
            return Path(registry.agent_source(defaults.entry(text)))
        if is_hub_id(text):
            return _from_hub(text, None, revision=revision, token=token)
    raise CheckpointNotFoundError(f"no checkpoint directory at {text!r}; {local_alternatives()}")
