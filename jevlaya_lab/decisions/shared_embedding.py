"""An open part's token table, held as the own encoder's table plus the rows its tuning moved.

A checkpoint with an open part (:mod:`.open_questions`) holds two encoders. Tuning moves few rows of
the token table (only the tokens its texts hold; a bundled head ships at most
:data:`~jevlaya_lab.decisions.encoder_delta.ROWS` of them), and the table is most of a small
encoder: 96 M of ``multilingual-e5-small``'s 118 M parameters, 11.7 M of MiniLM's 22.7 M. Loaded as
written, the open part doubled the parameters a process holds (safetensors maps the file, so only the
rows a process reads become resident, in each table). :func:`load_shared` reads the open part's table
from the weights file in blocks, compares each with the own encoder's table, and keeps only the rows
that differ; :class:`SharedEmbedding` answers a lookup from the own table and puts those rows over it.

What a user sees is unchanged (decided here, as a user of the checkpoint expects):

- every lookup returns exactly the rows the file holds (tested to the bit);
- ``state_dict()`` and :func:`~jevlaya_lab.decisions.checkpoint.save_checkpoint` write the whole
  table under its own name, so a saved checkpoint keeps the Laya layout that any reader loads;
- a table that differs in more than half its rows, or whose shape differs, is loaded whole, as before;
- a copy of the open part (``copy.deepcopy``, as int8 quantisation makes) still reads the same own
  table: the table belongs to the own encoder, and copying it would undo the saving.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jevlaya_lab.decisions.errors import CheckpointError

__all__ = ["BLOCK", "SharedEmbedding", "load_shared", "table_name"]

BLOCK = 4096
"""Rows read from the file and compared at a time (6 MB of each table for a 384-wide float32 one)."""


class SharedEmbedding(nn.Module):
    """An embedding whose table is ``base``'s (an ``nn.Embedding`` owned elsewhere, not a submodule)
    with the rows ``index`` replaced by ``rows``; ``state_dict`` holds the whole table as ``weight``."""

    slot: torch.Tensor
    index: torch.Tensor
    rows: torch.Tensor

    def __init__(self, base: nn.Embedding, index: torch.Tensor, rows: torch.Tensor) -> None:
        super().__init__()
        self._base = (base,)  # a tuple: not registered, so neither saved nor moved as this module's
        self.num_embeddings, self.embedding_dim = base.num_embeddings, base.embedding_dim
        self.padding_idx = base.padding_idx
        slot = torch.full((base.num_embeddings,), -1, dtype=torch.long)
        slot[index] = torch.arange(len(index))
        self.register_buffer("slot", slot, persistent=False)
        self.register_buffer("index", index.long(), persistent=False)
        self.register_buffer("rows", rows.to(base.weight.dtype), persistent=False)
        self._register_state_dict_hook(_whole_table)  # type: ignore[no-untyped-call]

    @property
    def base(self) -> nn.Embedding:
        return self._base[0]

    @property
    def weight(self) -> torch.Tensor:
        """The whole table, built anew (the own table with the moved rows put over it)."""
        table = self.base.weight.detach().clone()
        table[self.index] = self.rows
        return table

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(ids)
        slot = self.slot[ids]
        moved = slot >= 0
        if bool(moved.any()):
            out = out.clone()
            out[moved] = self.rows[slot[moved]]
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedEmbedding:
        clone = SharedEmbedding.__new__(SharedEmbedding)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            clone.__dict__[key] = value if key == "_base" else copy.deepcopy(value, memo)
        return clone

    def _load_from_state_dict(self, state: dict[str, Any], prefix: str, metadata: Any, strict: bool,
                              missing: list[str], unexpected: list[str], errors: list[str]) -> None:
        """Take a whole table: keep the rows in which it differs from the own table."""
        table = state.get(prefix + "weight")
        if table is None:
            if strict:
                missing.append(prefix + "weight")
            return
        own = self.base.weight.detach()
        if tuple(table.shape) != tuple(own.shape):
            errors.append(f"{prefix}weight: shape {tuple(table.shape)} does not fit the shared table of shape "
                          f"{tuple(own.shape)}")
            return
        table = table.to(own.dtype)
        index = _moved_rows(table, own)
        self.slot.fill_(-1)
        self.slot[index] = torch.arange(len(index))
        self.index, self.rows = index, table[index].clone()

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {len(self.index)} rows of its own"


def _moved_rows(table: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """The indices of the rows in which ``table`` differs from ``own`` (same shape and dtype)."""
    return (table != own).any(dim=1).nonzero().flatten()


def _whole_table(module: SharedEmbedding, state: dict[str, Any], prefix: str, _: Any) -> None:
    state[prefix + "weight"] = module.weight


def table_name(encoder: nn.Module) -> str | None:
    """The state-dict name of ``encoder``'s token table, or None when it has no ``nn.Embedding`` one."""
    find = getattr(encoder, "get_input_embeddings", None)
    table = find() if callable(find) else None
    if not isinstance(table, nn.Embedding):
        return None
    return next(f"{name}.weight" for name, module in encoder.named_modules() if module is table)


_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


@dataclass(frozen=True)
class _Table:
    """Where one 2-d float tensor lies in a safetensors file; its rows are read with ``os.pread``,
    through the page cache only, never a mapping of the file (safetensors maps it, and a row read
    through the mapping stays resident in the process; its own ``pread`` backend reads the whole
    tensor for every slice)."""

    dtype: torch.dtype
    shape: tuple[int, int]
    offset: int

    @classmethod
    def find(cls, header: dict[str, Any], start: int, key: str) -> _Table | None:
        info = header.get(key)
        if not isinstance(info, dict) or info.get("dtype") not in _DTYPES or len(info.get("shape", ())) != 2:
            return None
        rows, width = info["shape"]
        return cls(_DTYPES[info["dtype"]], (rows, width), start + info["data_offsets"][0])

    def rows(self, fd: int, begin: int, end: int) -> torch.Tensor:
        width = self.shape[1] * torch.empty((), dtype=self.dtype).element_size()
        want = (end - begin) * width
        data = bytearray()
        while len(data) < want:  # a regular file may still answer a pread in parts
            part = os.pread(fd, want - len(data), self.offset + begin * width + len(data))
            if not part:
                raise CheckpointError(f"the file ends inside a tensor of shape {self.shape}; it is cut short")
            data += part
        return torch.frombuffer(data, dtype=self.dtype).view(end - begin, self.shape[1])


def load_shared(path: Path, key: str, base_key: str, base: nn.Embedding) -> SharedEmbedding | None:
    """The table ``key`` of the safetensors file ``path`` as a :class:`SharedEmbedding` over ``base``,
    the model's table loaded from ``base_key`` of the same file; None when either is not a 2-d float
    tensor, the shapes differ, or more than half the rows differ (the caller then loads it whole).

    Both tables are compared as the file holds them, ``BLOCK`` rows at a time, read with ``pread``: the
    comparison does not page in the model's own table, which safetensors maps from the file and leaves
    on disk until a lookup reads its rows."""
    if sys.byteorder != "little":  # the file is little-endian; let safetensors convert it
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        size = struct.unpack("<Q", os.pread(fd, 8, 0))[0]
        header = json.loads(os.pread(fd, size, 8))
        table, other = (_Table.find(header, 8 + size, name) for name in (key, base_key))
        own = base.weight
        if table is None or other is None or not table.shape == other.shape == tuple(own.shape):
            return None
        index: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        moved = 0
        for start in range(0, table.shape[0], BLOCK):
            end = min(start + BLOCK, table.shape[0])
            block = table.rows(fd, start, end).to(own.dtype)
            differ = _moved_rows(block, other.rows(fd, start, end).to(own.dtype))
            moved += len(differ)
            if moved * 2 > table.shape[0]:
                return None
            index.append(differ + start)
            rows.append(block[differ].clone())
    finally:
        os.close(fd)
    return SharedEmbedding(base, torch.cat(index), torch.cat(rows))
