"""Checkpoint names for the Router: the registry of names, aliases and sources.

A **source** says where a checkpoint comes from:

- a local directory (``str`` or ``os.PathLike``),
- ``(directory_or_repo, subfolder)`` for one checkpoint inside a bundle,
- a Hugging Face hub id ``"org/name"`` (loads only when the hub is reachable; offline the
  checkpoint loader fails fast and names the local alternatives),
- ``Bundled("mini-en")`` (or the string ``"bundled:mini-en"``) for a checkpoint shipped with
  jevlaya_lab, assembled by :func:`jevlaya_lab.decisions.bundled.checkpoint_dir` on first load.

Names and aliases are matched case-insensitively. Registering a name or alias one edit away
from an existing one warns (``NearTypoWarning``), because it is usually a typo that would
otherwise silently create a second checkpoint; resolving an unknown name raises a
``ValueError`` that lists every name and alias and suggests the closest one, but never
auto-corrects.

Which of them are resident is :mod:`~jevlaya_lab.decisions.loaded_agents`'s concern.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Union

from jevlaya_lab._hub import is_hub_id
from jevlaya_lab.decisions.errors import NearTypoWarning

__all__ = [
    "DEFAULT_MODELS",
    "LAYA_MODELS",
    "LAYA_TASKS",
    "LAYA_WORKFLOWS",
    "Bundled",
    "NearTypoWarning",
    "Registry",
    "RegistryEntry",
    "agent_source",
    "laya_standalone_repo",
]


@dataclass(frozen=True)
class Bundled:
    """A checkpoint shipped with jevlaya_lab (``"mini-en"`` or ``"mini-multi"``)."""

    name: str

    def __str__(self) -> str:
        return f"bundled:{self.name}"


Source = Union[str, os.PathLike[str], tuple[Any, ...], Bundled, None]


@dataclass(frozen=True)
class RegistryEntry:
    """One registered checkpoint: canonical ``name``, its ``source``, aliases and description.

    ``source`` is ``None`` for a name that only exists because an Agent was attached to it.
    """

    name: str
    source: Source
    description: str | None = None
    aliases: tuple[str, ...] = field(default=())
    load_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Passed to the loader: ``revision``, ``token``, ``expected_sha256`` (never shown in reprs)."""

    @property
    def kind(self) -> str:
        """``"bundled"``, ``"subfolder"``, ``"local"``, ``"hub"`` or ``"attached"``."""
        source = self.source
        if source is None:
            return "attached"
        if isinstance(source, Bundled):
            return "bundled"
        if isinstance(source, tuple):
            return "subfolder"
        text = os.fspath(source)
        if isinstance(source, os.PathLike) or not is_hub_id(text) or Path(text).expanduser().exists():
            return "local"
        return "hub"


def normalize_source(source: Any, where: str) -> Source:
    """Check a source and return it in canonical form (``"bundled:x"`` becomes ``Bundled("x")``)."""
    if isinstance(source, str) and source.startswith("bundled:"):
        source = Bundled(source.split(":", 1)[1])
    if isinstance(source, Bundled):
        from jevlaya_lab.decisions.bundled import BUNDLED

        if source.name not in BUNDLED:
            raise ValueError(f"{where}: no bundled checkpoint named {source.name!r}; "
                             f"jevlaya_lab ships {', '.join(map(repr, BUNDLED))}")
        return source
    if isinstance(source, str):
        if not source.strip():
            raise ValueError(f"{where}: the source is an empty string; pass a checkpoint "
                             f"directory, a hub id 'org/name' or Bundled('mini-en')")
        return source
    if isinstance(source, os.PathLike):
        return Path(source)
    if isinstance(source, tuple):
        if len(source) == 2 and isinstance(source[0], (str, os.PathLike)) and isinstance(source[1], str):
            return (source[0], source[1])
        raise TypeError(f"{where}: a bundle source is (directory_or_repo, subfolder), got {source!r}")
    raise TypeError(
        f"{where}: expected a checkpoint directory, a hub id 'org/name', "
        f"(directory_or_repo, subfolder) or Bundled('mini-en'), got {type(source).__name__} {source!r}"
    )


def agent_source(entry: RegistryEntry) -> Any:
    """What to hand to the checkpoint loader for ``entry`` (a bundled name becomes its directory)."""
    if isinstance(entry.source, Bundled):
        from jevlaya_lab.decisions import bundled  # lazy: routing works without the bundle code

        return bundled.checkpoint_dir(entry.source.name)
    if entry.source is None:
        raise ValueError(
            f"model {entry.name!r} has no source: it was attached as an Agent and has since been "
            f"unloaded; attach it again or register({entry.name!r}, <checkpoint directory>)"
        )
    return entry.source


def one_edit_apart(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` differ by one insertion, deletion, substitution or swap."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


class Registry:
    """Canonical checkpoint names, their aliases and sources. Thread-safe."""

    def __init__(self, models: Mapping[str, Any] | Registry | None = None):
        self._lock = threading.RLock()
        self._entries: dict[str, RegistryEntry] = {}
        self._lookup: dict[str, str] = {}  # casefolded name or alias -> canonical name
        self._repos: dict[str, str | None] = {}  # canonical name -> repo(name), made at registration
        self.version = 0
        """Counts the changes of the registered names (register, unregister): what depends on
        them may be kept until it changes."""
        if isinstance(models, Registry):
            models = models.registered
        for name, given in (models or {}).items():
            if isinstance(given, RegistryEntry):
                self.register(name, given.source, given.description, aliases=given.aliases,
                              load_options=given.load_options)
            elif isinstance(given, Mapping):
                unknown = set(given) - {"source", "description", "aliases"}
                if unknown or "source" not in given:
                    raise ValueError(
                        f"models[{name!r}]: expected keys 'source' (required), 'description', "
                        f"'aliases'; got {sorted(map(str, given))}"
                    )
                self.register(name, given["source"], given.get("description"),
                              aliases=given.get("aliases", ()))
            else:
                self.register(name, given)

    def register(
        self, name: str, source: Any, description: str | None = None, *, aliases: Iterable[str] = (),
        load_options: Mapping[str, Any] | None = None,
    ) -> RegistryEntry:
        """Add (or replace) checkpoint ``name`` with ``source`` and optional ``aliases``;
        ``load_options`` (``revision``, ``token``, ``expected_sha256``) go to the loader."""
        name = _check_name(name, "register(name)")
        if isinstance(aliases, str):
            aliases = (aliases,)
        alias_list = tuple(_check_name(a, "register(aliases)") for a in aliases)
        source = normalize_source(source, f"register({name!r}, source)") if source is not None else None
        entry = RegistryEntry(name, source, description, alias_list, dict(load_options or {}))
        with self._lock:
            replaced = self._entries.get(self._lookup.get(name.casefold(), ""))
            if replaced is not None and replaced.name.casefold() != name.casefold():
                raise ValueError(
                    f"register({name!r}): {name!r} is already an alias of {replaced.name!r}; "
                    f"unregister({replaced.name!r}) first or choose another name"
                )
            for alias in alias_list:
                owner = self._lookup.get(alias.casefold())
                if owner is not None and owner.casefold() != name.casefold():
                    raise ValueError(
                        f"register({name!r}, aliases): alias {alias!r} already belongs to "
                        f"{owner!r}; choose another alias or unregister({owner!r}) first"
                    )
            if replaced is not None:
                self._drop(replaced)
            self._warn_near(name, alias_list)
            self._entries[name] = entry
            self._repos[name] = _repo_of(source)
            self.version += 1
            for key in (name, *alias_list):
                self._lookup[key.casefold()] = name
        return entry

    def _warn_near(self, name: str, aliases: tuple[str, ...]) -> None:
        for new in (name, *aliases):
            for known in self._lookup:
                if len(new) >= 4 and one_edit_apart(new.casefold(), known):
                    warnings.warn(
                        f"register({name!r}): {new!r} is one edit away from the registered "
                        f"{known!r} (checkpoint {self._lookup[known]!r}); if that is a typo, "
                        f"use the existing name instead",
                        NearTypoWarning,
                        stacklevel=4,
                    )

    def _drop(self, entry: RegistryEntry) -> None:
        del self._entries[entry.name]
        del self._repos[entry.name]
        self.version += 1
        for key in (entry.name, *entry.aliases):
            self._lookup.pop(key.casefold(), None)

    def unregister(self, name: str) -> RegistryEntry:
        """Remove the checkpoint that ``name`` (a name or alias) refers to, with all its aliases."""
        with self._lock:
            entry = self._entries[self.resolve(name)]
            self._drop(entry)
            return entry

    def resolve(self, name: str) -> str:
        """The canonical name for ``name`` or an alias; a ``ValueError`` listing valid names otherwise.

        As in Laya, matching ignores case and surrounding spaces and reads ``_`` as ``-``
        (``"Typed_Decisions"`` is ``typed-decisions``).
        """
        if not isinstance(name, str):
            raise TypeError(f"model: expected a registered name (str), got {type(name).__name__} {name!r}")
        canonical = self._find(name)
        if canonical is None:
            raise ValueError(self._unknown_message(name))
        return canonical

    def _find(self, name: str) -> str | None:
        key = name.strip().casefold()
        found = self._lookup.get(key)
        return found if found is not None else self._lookup.get(key.replace("_", "-"))

    def repo(self, name: str) -> str | None:
        """Where checkpoint ``name`` comes from, as one string (a decision's ``repo``); made once
        at registration, since every routing decision carries it."""
        try:
            return self._repos[name]  # a canonical name, as decisions hold
        except KeyError:
            return self._repos[self.resolve(name)]

    def _unknown_message(self, name: str) -> str:
        with self._lock:
            listing = "; ".join(
                f"{e.name}" + (f" (aliases: {', '.join(e.aliases)})" if e.aliases else "")
                for e in self._entries.values()
            ) or "none registered"
            near = [k for k in self._lookup if one_edit_apart(name.casefold(), k)]
        hint = f" Did you mean {near[0]!r}?" if near else ""
        return (f"model: unknown checkpoint name {name!r}.{hint} Registered: {listing}. "
                f"Use one of these or register({name!r}, <source>) first")

    def entry(self, name: str) -> RegistryEntry:
        """The entry for ``name`` or one of its aliases."""
        with self._lock:
            return self._entries[self.resolve(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(name) is not None

    @property
    def registered(self) -> dict[str, RegistryEntry]:
        """A snapshot ``{name: RegistryEntry}`` in registration order."""
        with self._lock:
            return dict(self._entries)

    @property
    def names(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._entries)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self.names)})"


def _repo_of(source: Any) -> str | None:
    """A source as one string: ``repo/subfolder``, a directory, or ``bundled:<name>``."""
    if source is None:
        return None
    if isinstance(source, tuple):
        return f"{os.fspath(source[0])}/{source[1]}"
    return str(source) if isinstance(source, Bundled) else os.fspath(source)


def _check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"{where}: expected a non-empty string, got {name!r}")
    if name != name.strip():
        raise ValueError(f"{where}: {name!r} has leading or trailing spaces; pass {name.strip()!r}")
    return name


DEFAULT_MODELS: dict[str, dict[str, Any]] = {
    "english": {
        "source": Bundled("mini-en"),
        "aliases": ("en", "eng", "mini-en"),
        "description": "bundled English checkpoint (MiniLM encoder), works offline",
    },
    "multilingual": {
        "source": Bundled("mini-multi"),
        "aliases": ("ml", "multi", "mini-multi"),
        "description": "bundled multilingual checkpoint, works offline",
    },
}
"""The offline default registry: the two checkpoints that ship with jevlaya_lab."""

LAYA_REPO = "convaiinnovations/laya"
LAYA_MODELS: dict[str, dict[str, Any]] = {
    "english": {
        "source": LAYA_REPO,
        "aliases": ("en", "eng", "laya", "default"),
        "description": "public Laya checkpoint for English (ModernBERT-large, hub download)",
    },
    "multilingual": {
        "source": (LAYA_REPO, "multilingual"),
        "aliases": ("ml", "multi", "laya-multilingual"),
        "description": "public Laya checkpoint for 100+ languages (mmBERT-base, hub download)",
    },
    "typed-decisions": {
        "source": (LAYA_REPO, "typed-decisions"),
        "aliases": ("typed", "decisions", "laya-typed-decisions"),
        "description": "public Laya checkpoint for the typed-decisions workflows (hub download)",
    },
}
"""The public Laya hub checkpoints (``Router.laya()``), laid out as Laya 0.4.15 loads them by
default: one bundle repo, the English checkpoint at its root, the others in subfolders (the
alias ``default`` names the English one, as in Laya). Loading them needs the hub."""

def laya_standalone_repo(source: Any) -> str | None:
    """The standalone hub repo of a checkpoint of the Laya bundle (``Router(standalone_repos=True)``):
    the bundle root is ``convaiinnovations/laya`` itself, a subfolder ``x`` is ``convaiinnovations/laya-x``.
    ``None`` for any other source."""
    if source == LAYA_REPO:
        return LAYA_REPO
    if isinstance(source, tuple) and source[0] == LAYA_REPO:
        return f"{LAYA_REPO}-{source[1]}"
    return None


LAYA_WORKFLOWS: dict[str, frozenset[str]] = {
    "agent_trace_observability": frozenset({"action", "needs_review", "outcome", "risk", "urgency"}),
    "customer_service": frozenset({"action", "category", "churn_risk", "needs_human", "urgency"}),
    "invoice_processing": frozenset({"discrepancy_severity", "disposition", "duplicate",
                                     "matches_order", "urgency"}),
    "security_incidents": frozenset({"credential_compromise", "disposition", "severity",
                                     "true_positive", "urgency"}),
}
"""The question-id sets of the typed-decisions checkpoint's four workflows (Laya's signatures):
a request asking exactly one of these sets matches that workflow."""

LAYA_TASKS: dict[str, str] = {"typed-decisions": "typed-decisions",
                              **{name: "typed-decisions" for name in LAYA_WORKFLOWS}}
