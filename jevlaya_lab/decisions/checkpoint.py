"""Checkpoint directories: reading and writing the public Laya layout (safetensors only).

A checkpoint is a directory with ``rl_agent_config.json``, ``model.safetensors``, ``tokenizer/``
and ``encoder/config.json``. :func:`load_checkpoint` accepts a directory, a ``(directory_or_repo,
subfolder)`` pair, a name or alias of the offline default registry (``"english"``/``"en"``/
``"mini-en"``, ``"multilingual"``/``"ml"``/``"mini-multi"``), ``"bundled:<name>"`` or
``Bundled(name)``, or a Hugging Face hub id.

The schema of ``rl_agent_config.json`` is :mod:`~.checkpoint_config` and finding a source on
disk or on the hub :mod:`~.checkpoint_source`; this module reads and writes the files.

- Weights load strictly. Two tolerated differences, both harmless: an encoder pooler that the
  file does not contain is removed from the model (``encoder.pooler.*`` was often not saved;
  the same for an open part's encoder, :mod:`~.open_questions`),
  and stale ``encoder.embeddings.position_ids`` / ``token_type_ids`` buffers in the file are
  ignored (current transformers does not persist them).
- An open part's token table is held as the own encoder's table plus the rows in which the file's
  two tables differ (:mod:`~.shared_embedding`); :func:`save_checkpoint` writes it whole again.
- Unknown keys of ``rl_agent_config.json`` are kept in :attr:`CheckpointConfig.extra` and
  written back by :func:`save_checkpoint`, so a round trip loses nothing.
- Weights are loaded on the CPU; the Agent moves the model to its device.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

from jevlaya_lab.decisions.checkpoint_config import CONFIG_FILE, HEAD_ACTIVATIONS, CheckpointConfig
from jevlaya_lab.decisions.checkpoint_source import resolve_source
from jevlaya_lab.decisions.errors import CheckpointError, CheckpointNotFoundError
from jevlaya_lab.decisions.open_questions import OPEN_KEY, OPEN_PREFIX, open_config
from jevlaya_lab.decisions.weights import weights_on_meta

WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
ENCODER_DIR = "encoder"
_LEGACY_BUFFERS = ("encoder.embeddings.position_ids", "encoder.embeddings.token_type_ids")
log = logging.getLogger("jevlaya_lab.decisions")

# CheckpointConfig, CONFIG_FILE, HEAD_ACTIVATIONS and resolve_source are defined beside this
# module and importable from here, where checkpoint code has always found them.
__all__ = ["CONFIG_FILE", "ENCODER_DIR", "HEAD_ACTIVATIONS", "TOKENIZER_DIR", "WEIGHTS_FILE", "Checkpoint",
           "CheckpointConfig", "CheckpointError", "CheckpointNotFoundError", "load_checkpoint",
           "prior_config", "resolve_source", "rope_fields_for_4x", "save_checkpoint", "verify_digests"]


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns; unpacks as ``model, tokenizer, config``."""

    model: Any
    tokenizer: Any
    config: CheckpointConfig


def _check_files(path: Path) -> None:
    if not path.is_dir():
        raise CheckpointNotFoundError(f"checkpoint directory {path} does not exist")
    if not (path / WEIGHTS_FILE).is_file():
        pickles = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
        hint = (f" (found {pickles}: pickled weights are never loaded; convert them to "
                "safetensors with safetensors.torch.save_file)") if pickles else ""
        raise CheckpointNotFoundError(f"{path / WEIGHTS_FILE} is missing{hint}")
    for sub, what in ((Path(ENCODER_DIR) / "config.json", "the encoder's transformers config"),
                      (Path(TOKENIZER_DIR), "the tokenizer folder")):
        if not (path / sub).exists():
            raise CheckpointNotFoundError(f"{path / sub} is missing; a checkpoint needs {what}")


def _fit_state_dict(model: Any, tensors: dict[str, Any], weights: Path) -> dict[str, Any]:
    """Apply the tolerated differences, then check names and shapes strictly."""
    for prefix, part in (("", model), (OPEN_PREFIX, model.open_model)):  # the open part's encoder too
        has_pooler = any(k.startswith(f"{prefix}encoder.pooler.") for k in tensors)
        if part is not None and not has_pooler and getattr(part.encoder, "pooler", None) is not None:
            part.encoder.pooler = None
    expected = model.state_dict()
    tensors = {k: v for k, v in tensors.items()
               if not (k.removeprefix(OPEN_PREFIX) in _LEGACY_BUFFERS and k not in expected)}
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing tensors {missing[:8]}{' ...' if len(missing) > 8 else ''}")
        if unexpected:
            parts.append(f"unexpected tensors {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
        raise CheckpointError(f"{weights}: {'; '.join(parts)}; the file does not match the "
                              f"layout given by {CONFIG_FILE} and {ENCODER_DIR}/config.json "
                              "(check head_layers, act_costs and the encoder config)")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{weights}: tensor {name} has shape {tuple(tensor.shape)} but the "
                                  f"config gives {tuple(expected[name].shape)}; check "
                                  f"{CONFIG_FILE} and {ENCODER_DIR}/config.json")
    # the model's dtypes win (an fp16 file still runs in fp32 on the CPU)
    return {k: v if v.dtype == expected[k].dtype else v.to(expected[k].dtype) for k, v in tensors.items()}


def _open_table(model: Any) -> str | None:
    """The state-dict name of the open part's token table, when the model has an open part whose
    encoder's table may be shared with the own encoder's (:mod:`.shared_embedding`)."""
    from jevlaya_lab.decisions.shared_embedding import table_name

    if model.open_model is None:
        return None
    name = table_name(model.open_model.encoder)
    return None if name is None or name != table_name(model.encoder) else f"{OPEN_PREFIX}encoder.{name}"


def _share_open_table(model: Any, weights: Path) -> None:
    """Put the own encoder's table with the rows that differ (:class:`~.shared_embedding.SharedEmbedding`)
    in place of the open part's whole token table, unless most rows differ. The whole table was loaded
    as safetensors maps it, so none of its rows had been read into memory."""
    from jevlaya_lab.decisions.shared_embedding import load_shared

    key = _open_table(model)
    if key is None:
        return
    shared = load_shared(weights, key, key.removeprefix(OPEN_PREFIX), model.encoder.get_input_embeddings())
    if shared is not None:
        model.open_model.encoder.set_input_embeddings(shared)


def rope_fields_for_4x(encoder_config: dict[str, Any]) -> dict[str, Any]:
    """transformers-4 RoPE attributes for an encoder config saved by transformers 5.

    transformers 5 writes ``rope_parameters`` (per layer type for ModernBERT), 4.x reads
    ``rope_theta`` / ``rope_scaling`` (ModernBERT: ``global_rope_theta`` / ``local_rope_theta``);
    without the mapping 4.x silently uses its default bases. Returns only the attributes to set.
    """
    params = encoder_config.get("rope_parameters")
    if not isinstance(params, dict):
        return {}
    out: dict[str, Any] = {}
    if "full_attention" in params or "sliding_attention" in params:
        for layer_type, key in (("full_attention", "global_rope_theta"),
                                ("sliding_attention", "local_rope_theta")):
            theta = (params.get(layer_type) or {}).get("rope_theta")
            if theta is not None:
                out[key] = theta
        return out
    if params.get("rope_theta") is not None:
        out["rope_theta"] = params["rope_theta"]
    scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if scaling.get("rope_type", "default") != "default":
        out["rope_scaling"] = scaling
    return out


def _encoder_config(path: Path) -> Any:
    from transformers import AutoConfig, __version__

    file = path / ENCODER_DIR / "config.json"
    try:
        config = AutoConfig.from_pretrained(path / ENCODER_DIR, local_files_only=True)
        if int(__version__.split(".")[0]) < 5:
            for key, value in rope_fields_for_4x(json.loads(file.read_text(encoding="utf-8"))).items():
                setattr(config, key, value)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{file}: cannot build the encoder config ({exc})") from None
    return config


def prior_config(config: CheckpointConfig, source: Any = CONFIG_FILE) -> Any:
    """The checkpoint's :class:`~jevlaya_lab.decisions.prior.PriorConfig`, or None when it declares none."""
    from jevlaya_lab.decisions.prior import PRIOR_KEY, PriorConfig

    if PRIOR_KEY not in config.extra:
        return None
    try:
        return PriorConfig.from_value(config.extra[PRIOR_KEY])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: {exc}") from None



def verify_digests(path: Path, expected_sha256: Any) -> None:
    """Check files of a checkpoint against pinned SHA-256 digests (``{relative path: hex}``)."""
    import hashlib

    if not isinstance(expected_sha256, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in expected_sha256.items()):
        raise TypeError(f"expected_sha256 must be a dict {{file in the checkpoint: sha256 hex}}, "
                        f"e.g. {{'model.safetensors': '53aa...'}}; got {expected_sha256!r}")
    for name, digest in expected_sha256.items():
        file = path / name
        if not file.is_file():
            raise CheckpointNotFoundError(f"expected_sha256 names {name!r}, but {file} does not exist")
        sha = hashlib.sha256()
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        if sha.hexdigest() != digest.strip().lower():
            raise CheckpointError(f"{file}: SHA-256 is {sha.hexdigest()}, expected {digest}; the file "
                                  "is not the one that was pinned, so it is not loaded")


def _has_meta(model: Any) -> bool:
    """Whether any parameter or buffer of ``model`` is still a ``meta`` tensor."""
    return any(t.is_meta for t in (*model.parameters(), *model.buffers()))


def load_checkpoint(source: Any, *, subfolder: str | None = None, revision: str | None = None,
                    token: str | None = None, expected_sha256: dict[str, str] | None = None) -> Checkpoint:
    """Load ``(model, tokenizer, config)`` from a checkpoint source (see the module docstring).

    ``subfolder``, ``revision`` and ``token`` are as for :func:`resolve_source`;
    ``expected_sha256`` pins files of the checkpoint (``{"model.safetensors": hex}``) and a
    mismatch refuses to load (as in Laya). The model is in eval mode on the CPU. Raises
    :class:`CheckpointNotFoundError` for missing sources or files and :class:`CheckpointError`
    for malformed contents.
    """
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    from jevlaya_lab.decisions.encoding import row_tokenizer
    from jevlaya_lab.decisions.model import DecisionModel

    path = resolve_source(source, subfolder=subfolder, revision=revision, token=token)
    _check_files(path)
    if expected_sha256 is not None:
        verify_digests(path, expected_sha256)
    config = CheckpointConfig.from_file(path / CONFIG_FILE)
    encoder_config = _encoder_config(path)
    weights = path / WEIGHTS_FILE
    try:
        tensors = load_file(weights)
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{weights} is not a readable safetensors file ({exc})") from None

    opened = open_config(config, path / CONFIG_FILE)

    def build() -> Any:
        open_model = None
        if opened is not None:  # the open part: the same encoder layout, its own head (open_questions)
            open_model = DecisionModel(
                AutoModel.from_config(encoder_config), head_layers=opened.head_layers,  # type: ignore[no-untyped-call]
                n_act=opened.n_act, activation=opened.head_activation,
                prior=prior_config(opened, f"{path / CONFIG_FILE}: {OPEN_KEY}"))
        encoder = AutoModel.from_config(encoder_config)  # type: ignore[no-untyped-call]
        return DecisionModel(encoder, head_layers=config.head_layers, n_act=config.n_act,
                             activation=config.head_activation, prior=prior_config(config, path / CONFIG_FILE),
                             open_model=open_model)

    with weights_on_meta():
        model = build()
    # assign: the loaded tensors become the parameters (no second copy of every weight)
    model.load_state_dict(_fit_state_dict(model, tensors, weights), strict=True, assign=True)
    if _has_meta(model):  # a weight the mode could not leave empty: build it the ordinary way
        model = build()
        model.load_state_dict(_fit_state_dict(model, tensors, weights), strict=True, assign=True)
    _share_open_table(model, weights)
    model.eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path / TOKENIZER_DIR, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / TOKENIZER_DIR}: cannot load the tokenizer ({exc})") from None
    row_tokenizer(tokenizer)  # fail now, not on the first predict, if it cannot build rows
    return Checkpoint(model, tokenizer, config)


def save_checkpoint(directory: str | os.PathLike[str], model: Any, tokenizer: Any,
                    config: CheckpointConfig) -> Path:
    """Write a checkpoint directory that :func:`load_checkpoint` (and Laya) can read."""
    import torch
    from safetensors.torch import save_file

    if not isinstance(config, CheckpointConfig):
        raise TypeError(f"config must be a CheckpointConfig, got {type(config).__name__}")
    config.validate()
    path = Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
    temps = config.temperature
    if len(temps) == 3 and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in temps):
        state["temperature"] = torch.tensor(temps, dtype=state["temperature"].dtype)
    save_file(state, path / WEIGHTS_FILE, metadata={"format": "pt"})
    model.encoder.config.save_pretrained(path / ENCODER_DIR)
    tokenizer.save_pretrained(path / TOKENIZER_DIR)
    (path / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2, ensure_ascii=False) + "\n",
                                    encoding="utf-8")
    return path
