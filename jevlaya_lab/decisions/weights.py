"""Model weights without waste: building a model whose weights a file replaces, and writing tensors.

Both exist for memory and load time: :func:`weights_on_meta` skips allocating and
randomly initialising weights that are overwritten right away, :func:`write_safetensors` writes a
safetensors file without a second copy of every tensor. Used by checkpoint loading and by the
assembly and conversion of the bundled checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jevlaya_lab.decisions.errors import CheckpointError


def weights_on_meta() -> Any:
    """A block that builds a model whose weights the checkpoint replaces, without allocating or
    initialising them.

    Inside the block, ``torch.empty`` of a floating dtype with no device (how ``nn.Linear``,
    ``nn.Embedding``, ``nn.LayerNorm`` and attention layers allocate their weights) makes a
    ``meta`` tensor: no memory, and the random init that follows is a no-op. Everything else
    (``arange`` / ``zeros`` buffers such as BERT's ``position_ids``) is built for real, so the
    buffers a checkpoint does not store keep their values. It is a torch function mode, and
    those are thread-local: a load in one thread changes nothing for a model built at the same
    time in another (transformers' ``no_init_weights`` patches ``torch.nn.init`` for the whole
    process, and concurrent loads once left it patched, giving later models NaN weights). The
    random init of mini-multi's 118 M-parameter encoder was most of its load and doubled its
    peak memory.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    class WeightsOnMeta(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func is torch.empty and kwargs.get("device") is None:
                dtype = kwargs.get("dtype")
                if dtype is None or dtype.is_floating_point:
                    kwargs = {**kwargs, "device": "meta"}
            return func(*args, **kwargs)

    return WeightsOnMeta()


_SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                       "int32": "I32", "int8": "I8", "uint8": "U8", "bool": "BOOL", "float64": "F64"}


def write_safetensors(tensors: dict[str, Any], path: Path, metadata: dict[str, str]) -> None:
    """Write ``tensors`` in the safetensors layout, one tensor's memory at a time.

    ``safetensors.torch.save_file`` (and transformers' ``save_pretrained``) first copy every
    tensor into bytes, so writing mini-multi's 470 MB encoder held it twice and the first use of
    the bundled checkpoints peaked at 1.4 GB. Here each tensor's own buffer is written as it is
    (little-endian, C order), in name order: an 8-byte header size, the JSON header padded to 8
    bytes, then the data, as the format prescribes; ``safetensors`` reads the file back.
    """
    import sys

    import torch

    if sys.byteorder != "little":
        raise CheckpointError("write_safetensors writes native bytes and needs a little-endian machine")
    header: dict[str, Any] = {"__metadata__": metadata}
    start = 0
    names = sorted(tensors)
    for key in names:
        tensor = tensors[key]
        kind = _SAFETENSORS_DTYPES.get(str(tensor.dtype).removeprefix("torch."))
        if kind is None:
            raise CheckpointError(f"tensor {key!r} has dtype {tensor.dtype}, which write_safetensors "
                                  "does not store")
        size = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": kind, "shape": list(tensor.shape), "data_offsets": [start, start + size]}
        start += size
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    with path.open("wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        for key in names:  # the tensor's own bytes: no copy (the machine is little-endian)
            tensor = tensors[key].detach().cpu().contiguous().reshape(-1)
            if tensor.numel():
                handle.write(tensor.view(torch.uint8).numpy().data)
