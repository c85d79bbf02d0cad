"""``LLMConfig``: one registry entry (a model behind an OpenAI-compatible endpoint).

An entry names a *key reference* (``api_key_ref``), never a key: the key is resolved per caller
at call time (see :mod:`jevlaya_lab.broker.keys`), so entries are safe to print and journal.
``base_url`` may be ``local://<model>`` for a model the broker serves itself on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

_FIELDS = ("name", "base_url", "model", "api_key_ref", "parallel", "weight", "labels", "alias")


@dataclass(frozen=True)
class LLMConfig:
    """A model in the pool.

    ``parallel`` caps concurrent requests to it; ``weight`` (0..1) is the curated prior quality
    that host ratings are blended with; ``labels`` are free-form tags (e.g. ``"local"``);
    ``alias`` is a second name for ``direct(alias)`` (as in llmbroker). The alias belongs to the
    broker it is given to (``models=``, ``direct=``): it is not stored in the database.
    """

    name: str
    base_url: str
    model: str
    api_key_ref: str | None = None
    parallel: int = 4
    weight: float = 0.5
    labels: tuple[str, ...] = field(default_factory=tuple)
    alias: str | None = None

    def __post_init__(self) -> None:
        for key in ("name", "base_url", "model"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"LLMConfig.{key}={value!r}: must be a non-empty string")
        if "://" not in self.base_url:
            raise ValueError(f"LLMConfig.base_url={self.base_url!r} (model {self.name!r}): must be "
                             "an URL such as 'https://api.example.com/v1' or 'local://tiny'")
        if self.api_key_ref is not None and (not isinstance(self.api_key_ref, str)
                                             or not self.api_key_ref.strip()):
            raise ValueError(f"LLMConfig.api_key_ref={self.api_key_ref!r} (model {self.name!r}): "
                             "must be the name of a key (e.g. 'OPENAI_API_KEY') or None")
        if isinstance(self.parallel, bool) or not isinstance(self.parallel, int) \
                or self.parallel < 1:
            raise ValueError(f"LLMConfig.parallel={self.parallel!r} (model {self.name!r}): must "
                             "be an integer >= 1")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) \
                or not 0.0 <= float(self.weight) <= 1.0:
            raise ValueError(f"LLMConfig.weight={self.weight!r} (model {self.name!r}): must be a "
                             "number between 0 and 1")
        if isinstance(self.labels, str):
            raise ValueError(f"LLMConfig.labels={self.labels!r} (model {self.name!r}): must be a "
                             "list of strings, e.g. ['local']")
        if self.alias is not None and (not isinstance(self.alias, str) or not self.alias.strip()):
            raise ValueError(f"LLMConfig.alias={self.alias!r} (model {self.name!r}): must be a "
                             "non-empty string (a second name for direct(alias)) or None")
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "weight", float(self.weight))

    @classmethod
    def coerce(cls, value: LLMConfig | Mapping[str, Any]) -> LLMConfig:
        """Accept an ``LLMConfig`` or a dict with the same keys (unknown keys are an error)."""
        if isinstance(value, LLMConfig):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"models entry {value!r}: must be an LLMConfig or a dict with keys "
                            f"{', '.join(_FIELDS)}")
        unknown = set(value) - set(_FIELDS) - {"origin"}
        if unknown:
            raise ValueError(f"models entry {value.get('name')!r}: unknown field(s) "
                             f"{sorted(unknown)}; allowed: {', '.join(_FIELDS)}")
        missing = [k for k in ("name", "base_url", "model") if k not in value]
        if missing:
            raise ValueError(f"models entry {dict(value)!r}: missing field(s) {missing}")
        return cls(**{k: v for k, v in value.items() if k in _FIELDS})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def is_local(self) -> bool:
        return self.base_url.startswith("local://")


def check_direct(models: list[LLMConfig], direct: Any) -> list[LLMConfig]:
    """The ``direct=`` entries of a broker, checked against its ``models=``: models reached
    only with ``direct()`` (never pool members, never stored). Names must be new, and an alias
    names exactly one entry among ``models=`` and ``direct=``."""
    if isinstance(direct, (str, bytes, Mapping, LLMConfig)) or not isinstance(direct, Sequence):
        raise TypeError(f"direct={direct!r:.80}: must be a list of LLMConfig entries or dicts "
                        "(the models to reach only with direct(alias) / direct(name=...))")
    entries = []
    for entry in direct:
        if isinstance(entry, str):
            raise TypeError(f"direct=[{entry!r}]: give an LLMConfig or a dict (name, base_url, "
                            "model, api_key_ref, alias); every model of the registry is "
                            "reachable already with direct(name=...)")
        entries.append(LLMConfig.coerce(entry))
    names = [m.name for m in models] + [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"direct=: {dup} named twice (in models= or direct=); give each entry "
                         "its own name")
    aliases = [m.alias for m in (*models, *entries) if m.alias is not None]
    dup = sorted({a for a in aliases if aliases.count(a) > 1})
    if dup:
        raise ValueError(f"alias {dup[0]!r} is given to several entries; an alias names exactly "
                         "one model")
    return entries
