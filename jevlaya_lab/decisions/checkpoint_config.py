"""``CheckpointConfig``: the schema of ``rl_agent_config.json``, checked when it is read.

Unknown keys are kept in :attr:`CheckpointConfig.extra` and written back by
:func:`~jevlaya_lab.decisions.checkpoint.save_checkpoint`, so a round trip loses nothing.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jevlaya_lab.decisions.errors import CheckpointError, CheckpointNotFoundError

__all__ = ["CONFIG_FILE", "HEAD_ACTIVATIONS", "CheckpointConfig"]

CONFIG_FILE = "rl_agent_config.json"
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
