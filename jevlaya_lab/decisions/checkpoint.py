"""Checkpoint directories: reading and writing the public Laya layout (safetensors only).

A checkpoint is a directory with ``rl_agent_config.json``, ``model.safetensors``, ``tokenizer/``
and ``encoder/config.json``. :func:`load_checkpoint` accepts a directory, a ``(directory_or_repo,
subfolder)`` pair, a name or alias of the offline default registry (``"english"``/``"en"``/
``"mini-en"``, ``"multilingual"``/``"ml"``/``"mini-multi"``), ``"bundled:<name>"`` or
``Bundled(name)``, or a Hugging Face hub id.

Decisions the spec leaves open:

- Weights load strictly. Two tolerated differences, both harmless: an encoder pooler that the
  file does not contain is removed from the model (``encoder.pooler.*`` was often not saved),
  and stale ``encoder.embeddings.position_ids`` / ``token_type_ids`` buffers in the file are
  ignored (current transformers does not persist them).
- Unknown keys of ``rl_agent_config.json`` are kept in :attr:`CheckpointConfig.extra` and
  written back by :func:`save_checkpoint`, so a round trip loses nothing.
- A hub id is tried in the local Hugging Face cache first. Only when it is not cached and the
  hub is reachable (not ``HF_HUB_OFFLINE``, a TCP connection within 3 s) is it downloaded;
  otherwise :class:`CheckpointNotFoundError` names the local alternatives.
- Weights are loaded on the CPU; the Agent moves the model to its device.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

from jevlaya_lab._hub import check_revision, check_token, hub_offline, is_hub_id
from jevlaya_lab.decisions.errors import CheckpointError, CheckpointNotFoundError
from jevlaya_lab.decisions.weights import weights_on_meta

CONFIG_FILE = "rl_agent_config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"
ENCODER_DIR = "encoder"
_LEGACY_BUFFERS = ("encoder.embeddings.position_ids", "encoder.embeddings.token_type_ids")
HEAD_ACTIVATIONS = ("relu", "gelu")
"""Activations of the head layers' feed-forward (config key ``head_activation``)."""
log = logging.getLogger("jevlaya_lab.decisions")


@dataclass
class CheckpointConfig:
    """The contents of ``rl_agent_config.json``, with the meaning Laya 0.4.15 gives each key.

    Keys Laya reads or writes that only training uses (``cost_wrong_act``, ``training``) are
    kept and written back; keys neither library knows go to :attr:`extra` with a debug log.
    """

    encoder: str = ""
    """Base encoder id (informative; the encoder is built from ``encoder/config.json``)."""
    head_layers: int = 2
    act_costs: list[float] | dict[str, float] = field(default_factory=list)
    """Action costs as Laya writes them (a mapping action -> cost, e.g. ``{"escalate": 0.5}``)
    or a list; the act head has ``len(act_costs) + 1`` outputs either way."""
    max_len: int = 512
    head_max_len: int = 192
    temperature: list[Any] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    """Per type: [choice, score, noul]; numeric strings are accepted (checked when applied)."""
    temperature_by_options: dict[str, Any] = field(default_factory=dict)
    amp_dtype: str | None = None
    """CUDA autocast dtype: ``"bf16"`` (or ``"bfloat16"``) for bfloat16; anything else, or
    nothing, is float16 as in Laya. CPU and MPS run in float32."""
    head_activation: str = "relu"
    """The head layers' activation: ``"relu"`` (Laya's, torch's default) or ``"gelu"``."""
    option_layout: str | None = None
    """``"sequential"`` (the default; the only layout published checkpoints use)."""
    cost_wrong_act: Any = None
    """Training-only (Laya's cost of acting on a wrong answer); kept, not used at inference."""
    training: Any = None
    """Training-only metadata Laya writes; kept, not used at inference."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not interpret, kept for round trips."""

    _OPTIONAL = ("amp_dtype", "option_layout", "cost_wrong_act", "training")

    @property
    def n_act(self) -> int:
        return len(self.act_costs) + 1

    @property
    def autocast_dtype(self) -> str:
        """``"bfloat16"`` or ``"float16"``: what CUDA autocasts to (Laya's reading of amp_dtype)."""
        return "bfloat16" if self.amp_dtype in ("bf16", "bfloat16") else "float16"

    @classmethod
    def from_dict(cls, data: Any, *, source: str = CONFIG_FILE) -> CheckpointConfig:
        """Validate a parsed config; errors name ``source``, the key and the value."""
        if not isinstance(data, dict):
            raise CheckpointError(f"{source}: expected a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: v for k, v in data.items() if k not in known}
        if extra:
            log.debug("%s: keys %s are not used by this version; kept and ignored", source, sorted(extra))
        config = cls(**{k: v for k, v in data.items() if k in known}, extra=extra)
        config.validate(source)
        return config

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> CheckpointConfig:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{path} is missing; a checkpoint directory needs "
                                          f"{CONFIG_FILE}") from None
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{path} is not valid JSON ({exc})") from None
        return cls.from_dict(data, source=str(path))

    def validate(self, source: str = CONFIG_FILE) -> None:
        """Check types and ranges (temperature values are checked, with warnings, when applied)."""
        def bad(key: str, value: Any, want: str) -> CheckpointError:
            return CheckpointError(f"{source}: {key} = {value!r} is invalid; {want}")

        if not isinstance(self.encoder, str):
            raise bad("encoder", self.encoder, "use the base encoder id as a string")
        for key, low in (("head_layers", 0), ("max_len", 1), ("head_max_len", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise bad(key, value, f"use an int >= {low}")
        costs = self.act_costs.values() if isinstance(self.act_costs, dict) else self.act_costs
        if not isinstance(self.act_costs, (list, dict)) or any(
            isinstance(c, bool) or not isinstance(c, (int, float)) for c in costs
        ):
            raise bad("act_costs", self.act_costs,
                      "use a mapping action -> cost such as {'escalate': 0.5}, or a list of numbers")
        if not isinstance(self.temperature, list) or len(self.temperature) != 3:
            raise bad("temperature", self.temperature, "use a list of 3 numbers [choice, score, noul]")
        if not isinstance(self.temperature_by_options, dict):
            raise bad("temperature_by_options", self.temperature_by_options,
                      "use a dict like {'choice:2': 1.3}")
        if self.amp_dtype is not None and not isinstance(self.amp_dtype, str):
            raise bad("amp_dtype", self.amp_dtype, "use 'bf16', 'fp16' or leave it out")
        if self.head_activation not in HEAD_ACTIVATIONS:
            raise bad("head_activation", self.head_activation, f"use one of {list(HEAD_ACTIVATIONS)}")
        if self.option_layout not in (None, "sequential"):
            want = ("the parallel option layout needs per-layer attention masks that this version "
                    "does not implement; use a checkpoint trained on the sequential layout"
                    if self.option_layout == "parallel" else "use 'sequential' or leave it out")
            raise bad("option_layout", self.option_layout, want)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "encoder": self.encoder,
            "head_layers": self.head_layers,
            "act_costs": dict(self.act_costs) if isinstance(self.act_costs, dict) else list(self.act_costs),
            "max_len": self.max_len,
            "head_max_len": self.head_max_len,
            "temperature": list(self.temperature),
            "temperature_by_options": dict(self.temperature_by_options),
        }
        if self.head_activation != "relu":
            data["head_activation"] = self.head_activation
        data.update({k: getattr(self, k) for k in self._OPTIONAL if getattr(self, k) is not None})
        data.update(self.extra)
        return data


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns; unpacks as ``model, tokenizer, config``."""

    model: Any
    tokenizer: Any
    config: CheckpointConfig


def _local_alternatives() -> str:
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
            f"{reason}. Connect and retry, or use one of the {_local_alternatives()}")
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
                                      f"hub id 'owner/name'; {_local_alternatives()}")
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
    raise CheckpointNotFoundError(f"no checkpoint directory at {text!r}; {_local_alternatives()}")


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
    expected = model.state_dict()
    has_pooler = any(k.startswith("encoder.pooler.") for k in tensors)
    if not has_pooler and getattr(model.encoder, "pooler", None) is not None:
        model.encoder.pooler = None
        expected = model.state_dict()
    tensors = {k: v for k, v in tensors.items() if not (k in _LEGACY_BUFFERS and k not in expected)}
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

    def build() -> Any:
        encoder = AutoModel.from_config(encoder_config)
        return DecisionModel(encoder, head_layers=config.head_layers, n_act=config.n_act,
                             activation=config.head_activation, prior=prior_config(config, path / CONFIG_FILE))

    with weights_on_meta():
        model = build()
    # assign: the loaded tensors become the parameters (no second copy of every weight)
    model.load_state_dict(_fit_state_dict(model, tensors, weights), strict=True, assign=True)
    if _has_meta(model):  # a weight the mode could not leave empty: build it the ordinary way
        model = build()
        model.load_state_dict(_fit_state_dict(model, tensors, weights), strict=True, assign=True)
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
