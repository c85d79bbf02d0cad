"""Which checkpoints a Router knows and keeps resident, and the hub options they are built with.

:class:`CheckpointResidency` is the checkpoint half of :class:`~jevlaya_lab.decisions.router.Router`
(``register``, ``unregister``, ``resolve``, ``load``, ``unload``, ``attach``, ``preload``,
``load_options``): it builds Agents through
:class:`~jevlaya_lab.decisions.loaded_agents.LoadedAgents` (an LRU of at most ``max_loaded``) and fires
``on_load`` / ``on_evict`` after the LRU's lock is released. Those two events reach the Router's
installed hooks and the call's hooks with a context whose ``model`` is the checkpoint name and
``agent`` the Agent built or evicted; a hook written as ``on_load(name, agent)`` gets those two
values instead, decided once when the hook is registered.

Hub options (Laya 0.4.15's constructor keywords; they matter only for hub sources):

- ``token`` is used for every hub download; ``revision`` pins every checkpoint to one branch, tag
  or commit; ``revisions={name: rev}`` overrides it per checkpoint (a ``None`` or blank entry
  inherits ``revision``, as in Laya); ``register(..., revision=, token=)`` overrides both for that
  checkpoint; ``load(name, revision=, token=)`` overrides everything for that build. A blank
  string counts as not given; a non-string is a ``TypeError`` naming the field.
- ``sha256_digests={name: {file: sha256}}`` pins one checkpoint's files; it is merged file by
  file over ``agent_kwargs["expected_sha256"]`` (shared by every checkpoint), and
  ``register(..., expected_sha256=)`` is merged over both; a ``None`` or ``{}`` entry adds nothing.
  (Laya also reads ``LAYA_SHA256_DIGESTS`` / ``LAYA_REVISION`` from the environment; this Router
  reads only its arguments.)
- ``standalone_repos=True`` loads the public Laya checkpoints from their standalone repos
  (``convaiinnovations/laya-multilingual``, ...) instead of the bundle's subfolders; a registry
  without them refuses it, since it would change nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jevlaya_lab._hub import check_revision, check_token
from jevlaya_lab.decisions.loaded_agents import LoadedAgents
from jevlaya_lab.decisions.registry import Registry, RegistryEntry, agent_source, laya_standalone_repo
from jevlaya_lab.decisions.routing_policy import RoutingPolicy
from jevlaya_lab.hooks import CallHooks, HookRunner, PredictContext
from jevlaya_lab.hooks.context import call_scope

__all__ = ["CheckpointResidency", "check_digests"]


class CheckpointResidency:
    """The Router's registered and resident checkpoints: registering, building, evicting and
    attaching Agents."""

    _registry: Registry
    _agents: LoadedAgents
    _hooks: HookRunner
    _attach_lock: threading.Lock
    _built_revision: dict[str, str | None]
    token: str | None
    revision: str | None
    revisions: dict[str, Any]
    sha256_digests: dict[str, Any]
    agent_kwargs: dict[str, Any]
    device: Any
    policy: RoutingPolicy

    # -- registry ----------------------------------------------------------------------------
    def register(self, name: str, source: Any, description: str | None = None, *,
                 aliases: Iterable[str] = (), subfolder: str | None = None, revision: str | None = None,
                 token: str | None = None, expected_sha256: dict[str, str] | None = None) -> RegistryEntry:
        """Register checkpoint ``name`` (a directory, ``(repo, subfolder)``, hub id or ``Bundled``).

        As in Laya, ``subfolder`` picks a checkpoint inside a bundle, ``revision`` / ``token`` are
        used when it is downloaded and ``expected_sha256`` pins its files; nothing loads here.
        """
        if subfolder is not None:
            source = (source, subfolder)
        options = {k: v for k, v in (("revision", check_revision(revision)), ("token", check_token(token)),
                                     ("expected_sha256", check_digests(expected_sha256, "expected_sha256")))
                   if v is not None}
        return self._registry.register(name, source, description, aliases=aliases, load_options=options)

    def unregister(self, name: str) -> RegistryEntry:
        """Forget ``name`` (or the checkpoint an alias points to); unloads it first if resident."""
        canonical = self._registry.resolve(name)
        if canonical == self.policy.default:
            raise ValueError(f"unregister({name!r}): it is the Router's default; pass another default first")
        self.unload(canonical)
        return self._registry.unregister(canonical)

    def resolve(self, name: str) -> str:
        """The canonical checkpoint name for a name or alias."""
        return self._registry.resolve(name)

    @property
    def registered(self) -> dict[str, RegistryEntry]:
        """``{name: RegistryEntry}`` of every registered checkpoint."""
        return self._registry.registered

    def _use_standalone_repos(self) -> None:
        moved = 0
        for name, entry in self._registry.registered.items():
            repo = laya_standalone_repo(entry.source)
            if repo is not None:
                moved += 1
                self._registry.register(name, repo, entry.description, aliases=entry.aliases,
                                        load_options=entry.load_options)
        if not moved:
            raise ValueError("standalone_repos=True: no checkpoint of the public Laya bundle is registered, "
                             "so it would change nothing; use Router.laya(standalone_repos=True)")

    def _per_checkpoint(self, field: str, given: Mapping[str, Any] | None,
                        check: Callable[[Any, str], Any]) -> dict[str, Any]:
        """``{canonical name: checked value}`` from a per-checkpoint map keyed by names or aliases."""
        if given is None:
            return {}
        if not isinstance(given, Mapping):
            raise TypeError(f"{field}: expected a dict {{checkpoint name: value}}, got {type(given).__name__}")
        checked = {}
        for name, value in given.items():
            try:
                canonical = self._registry.resolve(name)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{field}: {exc}") from None
            checked[canonical] = check(value, f"{field}[{name!r}]")
        return checked

    def load_options(self, name: str, **overrides: Any) -> dict[str, Any]:
        """The keywords the loader gets for checkpoint ``name`` (the module docstring gives the
        precedence of ``token``, ``revision`` and ``expected_sha256``); ``overrides`` are
        ``load()``'s own ``revision`` / ``token``."""
        canonical = self._registry.resolve(name)
        entry = self._registry.entry(canonical)
        explicit = dict(entry.load_options)
        options: dict[str, Any] = {}
        token = overrides.get("token") or explicit.get("token") or self.token
        revision = (overrides.get("revision") or explicit.get("revision")
                    or self.revisions.get(canonical) or self.revision)
        digests = {**(self.agent_kwargs.get("expected_sha256") or {}),
                   **(self.sha256_digests.get(canonical) or {}), **(explicit.get("expected_sha256") or {})}
        if token:
            options["token"] = token
        if revision:
            options["revision"] = revision
        if digests:
            options["expected_sha256"] = digests
        return options

    def _build(self, name: str, **overrides: Any) -> Any:
        from jevlaya_lab.decisions import agent as agent_module  # torch is imported on first load

        source = agent_source(self._registry.entry(name))
        options = self.load_options(name, **overrides)
        kwargs = {"device": self.device, **self.agent_kwargs, **options, "model_id": name}
        agent = agent_module.load(source, **kwargs)
        self._built_revision[name] = options.get("revision")
        return agent

    @call_scope
    def load(self, name: str, *, revision: str | None = None, token: str | None = None,
             hooks: Sequence[Any] | None = None, hooks_raise: bool | None = None) -> Any:
        """The resident Agent for ``name`` (or an alias), building it on first use.

        ``revision`` / ``token`` override the Router's and the registration's for this build
        (hub sources only); asking for another revision than the resident one is a
        ``ValueError`` (``unload(name)`` first). Building may evict the least recently used
        checkpoint; ``on_evict`` then ``on_load`` fire after the Router's lock is released.
        Concurrent callers share one build.
        """
        overrides = {k: v for k, v in (("revision", check_revision(revision)), ("token", check_token(token))) if v}
        return self._load(self._registry.resolve(name), self._hooks.call(hooks, hooks_raise=hooks_raise),
                          overrides)

    def _load(self, name: str, calls: CallHooks, overrides: dict[str, Any] | None = None) -> Any:
        build = (lambda n: self._build(n, **overrides)) if overrides else None
        agent, built, evicted = self._agents.get(name, build)
        wanted = (overrides or {}).get("revision")
        if wanted and not built and self._built_revision.get(name) != wanted:
            raise ValueError(f"load({name!r}, revision={wanted!r}): {name!r} is resident from revision "
                             f"{self._built_revision.get(name)!r}; unload({name!r}) first to load another revision")
        first = self._fire_evicted(evicted, calls)
        if built:  # on_load fires even when an on_evict hook failed; the first failure is raised
            failure = calls.emit_each("on_load", self._model_context(name, agent))
            first = first or failure
        if first is not None:
            raise first
        return agent

    def _model_context(self, name: str, agent: Any) -> PredictContext:
        """The context of ``on_load`` / ``on_evict``: ``model`` is the name, ``agent`` the Agent."""
        return PredictContext(states=[], questions={}, model=name, agent=agent, router=self)

    def _fire_evicted(self, evicted: list[tuple[str, Any]], calls: CallHooks) -> BaseException | None:
        first = None
        for name, agent in evicted:
            failure = calls.emit_each("on_evict", self._model_context(name, agent))
            first = first or failure
        return first

    @call_scope
    def unload(self, name: str | None = None, *, hooks: Sequence[Any] | None = None,
               hooks_raise: bool | None = None) -> list[str]:
        """Free ``name`` (or every resident checkpoint); fires ``on_evict``; returns the names freed."""
        canonical = None if name is None else self._registry.resolve(name)
        dropped = self._agents.remove(canonical)
        first = self._fire_evicted(dropped, self._hooks.call(hooks, hooks_raise=hooks_raise))
        if first is not None:
            raise first
        return [n for n, _ in dropped]

    @call_scope
    def attach(self, name: str, agent: Any, *, hooks: Sequence[Any] | None = None,
               hooks_raise: bool | None = None) -> None:
        """Make an existing ``agent`` resident as ``name`` (registered on the fly if unknown).

        No ``on_load`` fires, because no checkpoint was built; LRU eviction still applies.
        """
        if not callable(getattr(agent, "predict_batch", None)):
            raise TypeError(f"attach({name!r}, agent): expected an Agent (with predict_batch), "
                            f"got {type(agent).__name__}")
        with self._attach_lock:
            if name not in self._registry:
                self._registry.register(name, None, "attached Agent")
            canonical = self._registry.resolve(name)
        evicted = self._agents.attach(canonical, agent)
        self._built_revision[canonical] = None
        first = self._fire_evicted(evicted, self._hooks.call(hooks, hooks_raise=hooks_raise))
        if first is not None:
            raise first

    @call_scope
    def preload(self, names: Iterable[str] | None = None) -> list[str]:
        """Load ``names`` (default: every registered checkpoint) now; returns the canonical names."""
        wanted = list(self._registry.names if names is None else [self._registry.resolve(n) for n in names])
        limit = self._agents.max_loaded
        if limit is not None and len(set(wanted)) > limit:
            raise ValueError(
                f"preload: {len(set(wanted))} checkpoints ({', '.join(wanted)}) exceed "
                f"max_loaded={limit}; pass fewer names or create the Router with max_loaded={len(set(wanted))}"
            )
        calls = self._hooks.call()
        for name in wanted:
            self._load(name, calls)
        return wanted

    @property
    def loaded(self) -> tuple[str, ...]:
        """Resident checkpoint names, least recently used first."""
        return self._agents.names

    @property
    def max_loaded(self) -> int | None:
        return self._agents.max_loaded


def check_digests(value: Any, field: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError(f"{field}: expected a dict {{file in the checkpoint: sha256 hex}} or None, got {value!r}")
    return dict(value)
