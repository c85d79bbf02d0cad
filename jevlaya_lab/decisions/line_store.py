"""The reference statistics of read statements, kept in the cache folder from one process to the next.

A yes/no statement read against reference messages (:mod:`jevlaya_lab.decisions.statement_reader`,
"Read against reference messages") needs the mean and the spread of its blended answer over the
reader's reference texts: one reader pass per text, about 2 s for ``mini-en``'s 300 texts on a 2-core
CPU, in every process that asks the statement. The two numbers follow from the model, the reader's
config and the statement alone, so :class:`LineStore` keeps them in ``lines/`` inside the cache folder
(:func:`jevlaya_lab._cache_dir.cache_home`, so ``$JEVLAYA_HOME`` moves it with the rest): a kernel
after a restart, a second process or a Dask worker reads them instead of reading the texts again.

What a user may rely on, as with the rest of the cache folder:

- One small JSON file per statement and model, named by :func:`line_key`, a digest of everything the
  two numbers depend on: the statement's tokens, the reader's config (its layers, blend, line and
  reference texts), the statement's vector, center and spread as the prior computes them (they change
  with the encoder's and the prior's weights) and the reader's own weights. A changed model never
  reads another model's numbers; the folder may be deleted at any time.
- A file is written to a temporary sibling and renamed into place, so a concurrent process never
  reads half of one. A file that cannot be read or does not hold two finite numbers (a spread > 0) is
  ignored and written anew.
- A folder that cannot be written costs time only: the numbers are used, and one ``RuntimeWarning``
  per store names the folder, the error and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from jevlaya_lab._cache_dir import cache_home

__all__ = ["LineStore", "line_key"]

FOLDER = "lines"
"""The store's folder inside the cache folder."""


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The exact bytes of a tensor, after its dtype and shape."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return f"{flat.dtype}{tuple(tensor.shape)}".encode() + flat.view(torch.uint8).numpy().tobytes()


def line_key(statement: Sequence[int], config: Any, vector: torch.Tensor, center: torch.Tensor,
             spread: torch.Tensor, reader: torch.nn.Module) -> str:
    """The file name (hex digest) of a statement's numbers: its token ids, the reader config
    (``layers``, ``blend``, ``line``, ``reference``), the statement's prior ``vector``, ``center`` and
    ``spread``, and every tensor of ``reader``'s state (names included)."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(json.dumps([list(statement), config.layers, config.blend, config.line, list(config.reference)],
                             ensure_ascii=False).encode("utf-8"))
    for tensor in (vector, center, spread):
        digest.update(_tensor_bytes(torch.as_tensor(tensor)))
    for name, value in reader.state_dict().items():
        digest.update(name.encode("utf-8"))
        digest.update(_tensor_bytes(value))
    return digest.hexdigest()


class LineStore:
    """``(mean, spread)`` of read statements by :func:`line_key`, as files in ``folder`` (default:
    ``lines/`` in the cache folder, resolved at each call so a changed ``$JEVLAYA_HOME`` is
    followed)."""

    def __init__(self, folder: Path | str | None = None) -> None:
        self._folder = None if folder is None else Path(folder)
        self._warned = False

    @property
    def folder(self) -> Path:
        """Where the files are."""
        return self._folder if self._folder is not None else cache_home() / FOLDER

    def get(self, key: str) -> tuple[float, float] | None:
        """The numbers stored under ``key``; None when there is no file or it does not hold them."""
        try:
            value = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
            mean, spread = float(value["mean"]), float(value["spread"])
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if not (math.isfinite(mean) and math.isfinite(spread) and spread > 0):
            return None
        return mean, spread

    def put(self, key: str, value: tuple[float, float]) -> tuple[float, float]:
        """Store ``value`` under ``key`` (atomically) and return it; a failed write warns once."""
        folder = self.folder
        staging = folder / f".{key}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            staging.write_text(json.dumps({"mean": value[0], "spread": value[1]}), encoding="utf-8")
            os.replace(staging, folder / f"{key}.json")
        except OSError as error:
            with contextlib.suppress(OSError):
                staging.unlink(missing_ok=True)
            if not self._warned:
                self._warned = True
                warnings.warn(f"jevlaya_lab: cannot keep read statements' reference statistics in {folder} "
                              f"({error}); each new statement is read against its reference texts again in each "
                              "process. Make the folder writable or set JEVLAYA_HOME to a writable folder.",
                              RuntimeWarning, stacklevel=3)
        return value
