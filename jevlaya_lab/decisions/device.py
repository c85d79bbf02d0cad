"""Where and in which precision an Agent runs: the device, CUDA autocast, the CPU fast modes.

Kept apart from the Agent because none of it depends on the questions or the states: it is
decided once, when the Agent is built.
"""

from __future__ import annotations

import warnings

import torch

from jevlaya_lab.decisions.checkpoint import CheckpointConfig
from jevlaya_lab.decisions.model import DecisionModel

__all__ = ["QUANTIZE_MODES", "autocast_dtype", "quantize_model", "select_device"]


def autocast_dtype(config: CheckpointConfig, device: torch.device) -> torch.dtype | None:
    """The checkpoint's ``amp_dtype`` read as Laya reads it: CUDA autocasts to bfloat16 for
    ``"bf16"`` from compute capability 8, else to float16; CPU and MPS run float32."""
    if device.type != "cuda":
        return None
    if config.autocast_dtype == "bfloat16" and torch.cuda.get_device_capability(device)[0] >= 8:
        return torch.bfloat16
    return torch.float16


QUANTIZE_MODES = ("int8", "bf16")


def quantize_model(model: DecisionModel, mode: str | None, device: torch.device) -> str | None:
    """The opt-in fast modes of the CPU; off by default, because answers move a little.

    - ``"bf16"``: the forward pass runs under CPU autocast to bfloat16 (matrix products in
      bfloat16 with float32 accumulation; weights, embeddings, layer norms and softmax stay
      float32).
      Only on CPUs with native bfloat16 (AVX512-BF16 or AMX), where it is about 1.8x faster
      from ~8 states per call (at one state oneDNN's per-call weight layout eats most of the
      gain); elsewhere it would be emulated and slower, so it is refused. Probabilities moved by up to
      0.0013 on the benchmark's checkpoint but 0.03 on the sharper heads of the laya parity
      test, which it therefore does not meet (2e-3).
    - ``"int8"``: the encoder's linear layers become dynamic int8 ones (weights int8,
      activations quantised per call): about 2x faster; probabilities moved by up to 0.03 on
      the benchmark's checkpoint and 0.69 (a flipped answer) on the parity test's.

    ``bench/decisions.py --vs-laya`` reports the speed and the largest probability change of
    both against laya; ``bench/quality.py --quantize`` their accuracy on the quality bench.
    """
    if mode is None:
        return None
    if mode not in QUANTIZE_MODES:
        raise ValueError(f"quantize={mode!r}: use 'bf16' (bfloat16 matrix products, CPUs with "
                         "native bf16), 'int8' (dynamic int8 encoder) or None")
    if device.type != "cpu":
        raise ValueError(f"quantize={mode!r} runs on the CPU only, not on {device.type}; pass "
                         "device='cpu' or leave quantize=None")
    if mode == "bf16":
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            raise ValueError("quantize='bf16': this CPU has no native bfloat16 (AVX512-BF16 or "
                             "AMX), so bf16 would be slower than float32; use quantize='int8' or None")
        # The weights stay float32 (autocast rounds them per call): a model whose linear layers
        # were bfloat16 broke every use outside the Agent's autocast (the similarity prior's
        # pooled option vectors, the quality bench's cosine baseline), for no measurable gain.
        return mode
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch marks the eager quantisation API as moving to torchao
        warnings.simplefilter("ignore")
        model.encoder = quantize_dynamic(model.encoder, {torch.nn.Linear}, dtype=torch.qint8)  # type: ignore[no-untyped-call]
    return mode


def select_device(device: str | torch.device | None = None) -> torch.device:
    """An explicit device, or auto (CUDA, then MPS, then CPU); unavailable ones fall back to CPU."""
    mps = getattr(torch.backends, "mps", None)
    mps_ok = bool(mps and mps.is_available())
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if mps_ok else torch.device("cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device ({exc}); use 'cpu', 'cuda', "
                         "'cuda:0', 'mps' or None for automatic selection") from None
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": mps_ok}.get(chosen.type, False)
    if chosen.type == "cuda" and available and chosen.index is not None:
        available = chosen.index < torch.cuda.device_count()
    if not available:
        warnings.warn(f"device={device!r} is not available here; falling back to CPU",
                      RuntimeWarning, stacklevel=3)
        return torch.device("cpu")
    return chosen
