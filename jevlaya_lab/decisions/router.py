"""``Router``: pick a checkpoint per request, keep a few resident, run the hook lifecycle per request.

Routing (``route`` / ``route_batch``) never loads a model: the precedence chain lives in
:mod:`jevlaya_lab.decisions.routing_policy`, the names and the LRU of resident Agents in
:mod:`jevlaya_lab.decisions.registry`; this module runs the hook lifecycle around them.

``predict`` / ``predict_batch`` follow the lifecycle page (seed 000 wins over 002): every request
gets its own ``PredictContext``; all requests are validated and routed (``on_route``) before
anything loads; checkpoints are visited in order of first appearance; start hooks of a
checkpoint's requests all run before its forward passes, which are grouped by (questions,
``max_len``, ``head_max_len``) as the start hooks left them; ends run in reverse input order; a
failure fails every started request of that checkpoint group (``on_error`` then
``on_predict_end``, reverse input order) and stops the batch. The steps of one request's
lifecycle (start, finish, fail) are :class:`jevlaya_lab.hooks.CallHooks`'s, the same the Agent
uses; this module only decides their order across the requests of a group.

Decisions the spec leaves open, written down here:
- ``predict`` is ``predict_batch`` with one request, so both share one lifecycle implementation.
- A request's own ``max_len`` / ``head_max_len`` wins over the call's; a start hook wins over both.
- An end hook that raises stops the batch after every request of its checkpoint group has ended
  (as a loop of ``predict`` calls would stop); later groups never start.
- ``on_load`` / ``on_evict`` reach the Router's installed hooks and the call's hooks. They get a
  context (Laya's form) whose ``model`` is the checkpoint name and ``agent`` the Agent built or
  evicted (Laya passes ``None`` for an evicted one); a hook written as ``on_load(name, agent)``
  (the seed's form) gets those two values instead, decided once when the hook is registered.
- Within one request, the first failing ``on_predict_end`` hook stops that request's end hooks
  (as in Laya); every other started request still gets its ``on_predict_end``.
- A hook on ``on_route`` may replace ``ctx.decision`` with a new decision, a plain dict with a
  ``model`` key, or just a name/alias; aliases are resolved to the canonical name at once, so
  requests pinned through an alias share the forward pass of that checkpoint.
- One request, one run id: a request's predict context keeps the ``run_id`` of its ``on_route``
  context (Laya gives them two), so a hook or a trace sees routing, start and end of a request
  as one run. Every public call (``predict``, ``route``, ``load``, ``unload``, ...) is one
  :func:`~jevlaya_lab.hooks.context.call_scope`: all contexts it creates, ``on_load`` /
  ``on_evict`` and the Agent's own included, carry the call's id as ``parent_id``. (A ``route``
  with no hook listening, no callable guesser and no ``explain`` creates none, and skips it.)

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
- ``agent_kwargs`` may not set what the Router sets itself (``token``, ``revision``,
  ``subfolder``, ``model_id``): a ``ValueError`` says where to put it instead.
- ``preload=True`` loads every registered checkpoint at construction, raising ``max_loaded`` to
  fit them all (as Laya); ``preload(names)`` later still refuses more names than ``max_loaded``.
- ``standalone_repos=True`` loads the public Laya checkpoints from their standalone repos
  (``convaiinnovations/laya-multilingual``, ...) instead of the bundle's subfolders; a registry
  without them refuses it, since it would change nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Unpack, cast

from jevlaya_lab._hub import check_revision, check_token
from jevlaya_lab.decisions import detect as detection
from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.registry import (
    DEFAULT_MODELS,
    LAYA_MODELS,
    LAYA_TASKS,
    LAYA_WORKFLOWS,
    LoadedAgents,
    Registry,
    RegistryEntry,
    agent_source,
    laya_standalone_repo,
)
from jevlaya_lab.decisions.routing_policy import REQUEST_KEYS, Decision, RoutingPolicy
from jevlaya_lab.hooks import CallHooks, HookHost, HookRunner, PredictContext
from jevlaya_lab.hooks.context import call_scope, new_run_id
from jevlaya_lab.hooks.options import HookKeywords, HookOptions

__all__ = ["REQUEST_KEYS", "Decision", "Router"]


class Router(HookHost):
    """Routes each request to a registered checkpoint and runs it on a resident ``Agent``.

    ``models`` is ``None`` (the offline default registry: ``english`` and ``multilingual``, both
    bundled), a :class:`~jevlaya_lab.decisions.registry.Registry`, or a dict
    ``name -> source`` / ``name -> {"source", "aliases", "description"}``. See
    :meth:`laya` for the public Laya hub checkpoints. Use it as a context manager to unload
    every checkpoint at the end.
    """

    def __init__(
        self,
        models: Mapping[str, Any] | Registry | None = None,
        *,
        max_loaded: int | None = 2,
        default: str | None = None,
        english: str = "english",
        multilingual: str = "multilingual",
        tasks: Mapping[str, str] | None = None,
        workflows: Mapping[str, Iterable[str]] | None = None,
        hooks: Sequence[Any] | None = None,
        on_predict_start: Callable[[PredictContext], Any] | None = None,
        on_predict_end: Callable[[PredictContext], Any] | None = None,
        hooks_raise: bool = True,
        hooks_concurrent: bool = True,
        hooks_timeout: float | None = None,
        lang_guess: str | Callable[[Any], str | None] | None = None,
        auto_task_detection: bool = False,
        device: Any = None,
        agent_kwargs: Mapping[str, Any] | None = None,
        token: str | None = None,
        revision: str | None = None,
        revisions: Mapping[str, str | None] | None = None,
        sha256_digests: Mapping[str, Mapping[str, str] | None] | None = None,
        standalone_repos: bool = False,
        preload: bool = False,
    ):
        self._registry = Registry(DEFAULT_MODELS if models is None else models)
        if not self._registry.names:
            raise ValueError("models: no checkpoint registered; pass models={'name': source, ...} or None")
        if max_loaded is not None and (isinstance(max_loaded, bool) or not isinstance(max_loaded, int)
                                       or max_loaded < 1):
            raise ValueError(f"max_loaded: expected a positive int or None (no limit), got {max_loaded!r}")
        if standalone_repos:
            self._use_standalone_repos()
        self.token = check_token(token)
        self.revision = check_revision(revision)
        self.revisions = self._per_checkpoint("revisions", revisions, check_revision)
        self.sha256_digests = self._per_checkpoint("sha256_digests", sha256_digests, _check_digests)
        reserved = sorted({"token", "revision", "subfolder", "model_id"} & set(agent_kwargs or {}))
        if reserved:
            raise ValueError(f"agent_kwargs: the Router sets {', '.join(map(repr, reserved))} itself; pass "
                             "Router(token=..., revision=...) or register(name, source, subfolder=...) instead")
        self.policy = RoutingPolicy(
            self._registry, default=default, english=english, multilingual=multilingual, tasks=tasks,
            workflows=workflows, lang_guess=lang_guess, auto_task_detection=auto_task_detection,
        )
        self.device = device
        self.agent_kwargs = dict(agent_kwargs or {})
        self._hooks = HookRunner(options=HookOptions(
            hooks=hooks, on_predict_start=on_predict_start, on_predict_end=on_predict_end,
            hooks_raise=hooks_raise, hooks_concurrent=hooks_concurrent, hooks_timeout=hooks_timeout))
        self._agents = LoadedAgents(self._build, max_loaded)
        self._attach_lock = threading.Lock()
        self._built_revision: dict[str, str | None] = {}
        if preload:
            wanted = len(self._registry.names)
            if self._agents.max_loaded is not None and self._agents.max_loaded < wanted:
                self._agents.max_loaded = wanted  # every checkpoint resident, as Laya's preload=True
            self.preload()

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

    @classmethod
    def laya(cls, **kwargs: Any) -> Router:
        """A Router over the public Laya hub checkpoints (``english``, ``multilingual``,
        ``typed-decisions``) with Laya's four typed-decisions workflows (exact question-id sets;
        they decide with ``auto_task_detection=True``) and Laya's default (``multilingual``).
        Loading needs the hub; offline, loading fails fast and names the local alternatives.
        Keyword arguments are passed to :class:`Router`."""
        kwargs.setdefault("tasks", LAYA_TASKS)
        kwargs.setdefault("workflows", LAYA_WORKFLOWS)
        kwargs.setdefault("default", "multilingual")
        return cls(LAYA_MODELS, **kwargs)

    # -- routing settings (see RoutingPolicy) ---------------------------------------------------
    @property
    def default(self) -> str:
        """The checkpoint for states without letters or with an undecided language."""
        return self.policy.default

    @property
    def tasks(self) -> dict[str, str]:
        return self.policy.tasks

    @property
    def workflows(self) -> dict[str, frozenset[str]]:
        return self.policy.workflows

    @property
    def auto_task_detection(self) -> bool:
        return self.policy.auto_task_detection

    @auto_task_detection.setter
    def auto_task_detection(self, value: bool) -> None:
        self.policy.auto_task_detection = bool(value)

    # -- registry ------------------------------------------------------------------------------
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
                                     ("expected_sha256", _check_digests(expected_sha256, "expected_sha256")))
                   if v is not None}
        return self._registry.register(name, source, description, aliases=aliases, load_options=options)

    def unregister(self, name: str) -> RegistryEntry:
        """Forget ``name`` (or the checkpoint an alias points to); unloads it first if resident."""
        canonical = self._registry.resolve(name)
        if canonical == self.default:
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

    # -- routing -------------------------------------------------------------------------------
    def route(
        self,
        state: Any,
        questions: Mapping[str, Any] | None = None,
        *,
        model: str | None = None,
        task: str | None = None,
        lang: str | None = None,
        lang_guess: str | Callable[[Any], str | None] | None = None,
        hooks: Sequence[Any] | None = None,
        hooks_raise: bool | None = None,
        explain: bool = False,
    ) -> Decision:
        """Decide which checkpoint answers ``state``; fires ``on_route``; never loads a model."""
        if model is None and task is None and lang is None and lang_guess is None and hooks is None \
                and not explain and self.policy.detects_only and not self._hooks.listens("on_route"):
            # The common call: only detection decides, no hook sees or changes the decision and
            # nothing can create a hook context, so there is no chain to walk and no call scope
            # to open (its id would never be read).
            self.policy.check_state(state, questions, "route", need_questions=False)
            return self.policy.by_detection(state, questions)
        request = {"state": state, "questions": questions, "model": model, "task": task,
                   "lang": lang, "lang_guess": lang_guess}
        self.policy.check_fields(request, "route", need_questions=False)
        if hooks is None and not explain and not callable(lang_guess) and not callable(self.policy.lang_guess) \
                and not self._hooks.listens("on_route"):
            return self.policy.decide(request)[0]  # no hook context can be made: no call scope
        return self._scoped_route(request, hooks, hooks_raise, explain)

    @call_scope
    def _scoped_route(self, request: dict[str, Any], hooks: Sequence[Any] | None, hooks_raise: bool | None,
                      explain: bool) -> Decision:
        return self._route(request, self._hooks.call(hooks, hooks_raise=hooks_raise), explain)[0]

    @call_scope
    def route_batch(
        self,
        requests: Sequence[Mapping[str, Any]],
        *,
        hooks: Sequence[Any] | None = None,
        hooks_raise: bool | None = None,
        explain: bool = False,
    ) -> list[Decision]:
        """Route every request (dicts with the keys of :data:`REQUEST_KEYS`); all are checked first."""
        self.policy.check_requests(requests, need_questions=False)
        calls = self._hooks.call(hooks, hooks_raise=hooks_raise)
        return [self._route(r, calls, explain)[0] for r in requests]

    def _route(self, request: Mapping[str, Any], calls: CallHooks | None,
               explain: bool) -> tuple[Decision, str | None]:
        """The request's decision (``on_route`` fired) and the run id its predict context keeps
        (``None`` when no hook saw an ``on_route`` context: nothing to keep). ``calls=None``: the
        caller knows that no hook listens to ``on_route``."""
        started = time.perf_counter() if explain else 0.0
        state, questions = request["state"], request.get("questions")
        decision, steps = self.policy.decide(request, explain=explain)
        if explain:
            found = decision["detection"] or detection.detect(state)
            decision["explain"] = {
                "steps": steps,
                "detection": found,
                "registered": list(self._registry.names),
                "default": self.default,
                "elapsed_us": round((time.perf_counter() - started) * 1e6, 1),
            }
        if calls is None or not calls.listens("on_route"):  # nothing could change the decision
            return decision, None  # a request's predict context then gets a new run id
        ctx = PredictContext(states=[state], questions=questions, decision=decision,
                             model=decision.model, router=self)
        calls.emit("on_route", ctx)
        return self.policy.settle(ctx.decision, decision), ctx.run_id

    # -- loading -------------------------------------------------------------------------------
    def load_options(self, name: str, **overrides: Any) -> dict[str, Any]:
        """The keywords the loader gets for checkpoint ``name`` (see the module docstring for
        the precedence of ``token``, ``revision`` and ``expected_sha256``); ``overrides`` are
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

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.unload()

    # -- prediction ----------------------------------------------------------------------------
    def predict(
        self,
        state: Any,
        questions: Mapping[str, Any],
        *,
        model: str | None = None,
        task: str | None = None,
        lang: str | None = None,
        lang_guess: str | Callable[[Any], str | None] | None = None,
        max_len: int | None = None,
        head_max_len: int | None = None,
        min_confidence: Any = None,
        hook_options: HookOptions | None = None,
        **hook_keywords: Unpack[HookKeywords],
    ) -> dict[str, Any]:
        """Route ``state`` and answer ``questions`` with the chosen checkpoint; adds ``routing``."""
        request = {"state": state, "questions": questions, "model": model, "task": task,
                   "lang": lang, "lang_guess": lang_guess, "max_len": max_len, "head_max_len": head_max_len}
        self.policy.check_request(request, "predict", need_questions=True)
        options = HookOptions.of_call(hook_options, hook_keywords, "predict")
        return self._predict([request], options, min_confidence=min_confidence)[0]

    def predict_batch(
        self,
        requests: Sequence[Mapping[str, Any]],
        *,
        batch_size: int | None = None,
        max_len: int | None = None,
        head_max_len: int | None = None,
        min_confidence: Any = None,
        sort_by_length: bool = False,
        hook_options: HookOptions | None = None,
        **hook_keywords: Unpack[HookKeywords],
    ) -> list[dict[str, Any]]:
        """Answer many requests (``{"state", "questions", "model"?, "task"?, "lang"?,
        "lang_guess"?, "max_len"?, "head_max_len"?}``), sharing forward passes where possible.
        Results come back in input order, each with ``routing``."""
        self.policy.check_requests(requests, need_questions=True)
        check_budget("max_len", max_len, optional=True)
        check_budget("head_max_len", head_max_len, optional=True)
        options = HookOptions.of_call(hook_options, hook_keywords, "predict_batch")
        return self._predict(requests, options, batch_size=batch_size, max_len=max_len,
                             head_max_len=head_max_len, min_confidence=min_confidence,
                             sort_by_length=sort_by_length)

    predict_many = predict_batch
    """Laya's other name for :meth:`predict_batch`."""

    @call_scope
    def predict_long(
        self,
        state: Any,
        questions: Mapping[str, Any],
        *,
        model: str | None = None,
        task: str | None = None,
        lang: str | None = None,
        lang_guess: str | Callable[[Any], str | None] | None = None,
        window: int | None = None,
        stride: int | None = None,
        aggregate: str = "auto",
        batch_size: int | None = None,
        hook_options: HookOptions | None = None,
        **hook_keywords: Unpack[HookKeywords],
    ) -> dict[str, Any]:
        """Route ``state`` as :meth:`predict` does, then read all of it in token windows with the
        chosen Agent's ``predict_long`` (see :mod:`jevlaya_lab.decisions.long`), as in Laya.

        The Router's hooks wrap the whole call like :meth:`predict`'s (a start hook may rewrite
        the state or ``skip()``); the result carries ``routing`` and ``usage["windows"]``. There
        is no ``max_len`` / ``head_max_len``: ``window`` sizes what is read at once.
        """
        request = {"state": state, "questions": questions, "model": model, "task": task,
                   "lang": lang, "lang_guess": lang_guess}
        self.policy.check_request(request, "predict_long", need_questions=True)
        calls = self._hooks.call(options=HookOptions.of_call(hook_options, hook_keywords, "predict_long"))
        decision, run_id = self._route(request, calls, False)
        agent = self._load(decision.model, calls)
        scan = getattr(agent, "predict_long", None)
        if not callable(scan):
            raise TypeError(f"predict_long: the Agent attached as {decision.model!r} "
                            f"({type(agent).__name__}) has no predict_long; attach a jevlaya_lab Agent")
        ctx = PredictContext(states=[state], questions=questions, run_id=run_id or new_run_id(),
                             decision=decision, model=decision.model, agent=agent, router=self)
        with calls.lifecycle(ctx):
            if ctx.results is None:
                _check_rewritten(ctx)
                result = scan(ctx.states[0], ctx.questions, window=window, stride=stride,
                              aggregate=aggregate, batch_size=batch_size)
                result["routing"] = decision
                ctx.results = [result]
            else:
                for skipped in _check_skipped(ctx):
                    skipped.setdefault("routing", ctx.decision)
        return cast(list, ctx.results)[0]

    # -- schema-driven decisions (Laya's decide / decide_batch) ----------------------------------
    def decide(self, state: Any, schema: Any = None, *, questions: Mapping[str, Any] | None = None,
               return_details: bool = False, min_confidence: Any = None, **predict_kwargs: Any) -> Any:
        """Route ``state`` and answer it against a JSON schema or pydantic model; see
        :func:`jevlaya_lab.decisions.structured.decide`. Other keywords (``model=``, ``task=``,
        ``lang=``, ``hooks=``, budgets) go to :meth:`predict`; the details carry ``routing``."""
        from jevlaya_lab.decisions.structured import decide

        return decide(self, state, schema, questions=questions, return_details=return_details,
                      min_confidence=min_confidence, **predict_kwargs)

    def decide_batch(self, states: Sequence[Any], schema: Any = None, *,
                     questions: Mapping[str, Any] | None = None, return_details: bool = False,
                     min_confidence: Any = None, **predict_kwargs: Any) -> list[Any]:
        """:meth:`decide` for many states through one :meth:`predict_batch` call: each state is a
        request, so states may route to different checkpoints; ``model=``, ``task=``, ``lang=``,
        ``lang_guess=``, ``max_len=`` and ``head_max_len=`` are copied onto every request."""
        from jevlaya_lab.decisions.structured import decide_batch

        return decide_batch(self, states, schema, questions=questions, return_details=return_details,
                            min_confidence=min_confidence, **predict_kwargs)

    @call_scope
    def _predict(self, requests: Sequence[Mapping[str, Any]], options: HookOptions,
                 **call: Any) -> list[dict[str, Any]]:
        calls = self._hooks.call(options=options)
        routed = [self._route(r, calls, False) for r in requests]
        by_model: dict[str, list[int]] = {}
        for i, (decision, _) in enumerate(routed):
            by_model.setdefault(decision.model, []).append(i)
        results: list[Any] = [None] * len(requests)
        for name, indices in by_model.items():
            agent = self._load(name, calls)
            group = _CheckpointGroup(self, name, agent, calls, call)
            for i, result in zip(indices, group.run([requests[i] for i in indices],
                                                   [routed[i] for i in indices])):
                results[i] = result
        return results

    def __repr__(self) -> str:
        return (f"Router(registered={list(self._registry.names)}, loaded={list(self.loaded)}, "
                f"max_loaded={self.max_loaded}, default={self.default!r})")


class _CheckpointGroup:
    """The requests of one ``predict_batch`` call that go to one checkpoint (lifecycle page)."""

    def __init__(self, router: Router, name: str, agent: Any, calls: CallHooks, call: dict[str, Any]):
        self.router, self.name, self.agent, self.calls, self.call = router, name, agent, calls, call

    def run(self, requests: list[Mapping[str, Any]],
            routed: list[tuple[Decision, str | None]]) -> list[dict[str, Any]]:
        """One context per request through the hook lifecycle, with one forward pass per
        batching key in between; the results in request order."""
        with self.calls.lifecycle(self._contexts(requests, routed)) as started:
            self._infer(started)
        return [cast(list, ctx.results)[0] for ctx in started]  # the lifecycle set every ctx.results

    def _contexts(self, requests: list[Mapping[str, Any]],
                  routed: list[tuple[Decision, str | None]]) -> Iterator[PredictContext]:
        for request, (decision, run_id) in zip(requests, routed):
            yield PredictContext(
                states=[request["state"]], questions=request["questions"], decision=decision,
                run_id=run_id or new_run_id(),
                model=self.name, agent=self.agent, router=self.router,
                max_len=_first_given(request.get("max_len"), self.call.get("max_len")),
                head_max_len=_first_given(request.get("head_max_len"), self.call.get("head_max_len")),
            )

    def _infer(self, contexts: list[PredictContext]) -> None:
        """Skipped requests keep their results; the rest share one forward pass per batching key."""
        groups: dict[tuple, list[PredictContext]] = {}
        for ctx in contexts:
            if ctx.results is not None:
                for result in _check_skipped(ctx):
                    result.setdefault("routing", ctx.decision)
                continue
            _check_rewritten(ctx)
            groups.setdefault((_freeze(ctx.questions), ctx.max_len, ctx.head_max_len), []).append(ctx)
        for (_, max_len, head_max_len), members in groups.items():
            outputs = self.agent.predict_batch(
                [ctx.states[0] for ctx in members], members[0].questions,
                batch_size=self.call.get("batch_size"), max_len=max_len, head_max_len=head_max_len,
                min_confidence=self.call.get("min_confidence"),
                sort_by_length=self.call.get("sort_by_length", False),
            )
            for ctx, result in zip(members, outputs):
                result["routing"] = ctx.decision
                ctx.results = [result]


def _check_digests(value: Any, field: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError(f"{field}: expected a dict {{file in the checkpoint: sha256 hex}} or None, got {value!r}")
    return dict(value)


def _check_skipped(ctx: PredictContext) -> list[dict]:
    if not isinstance(ctx.results, list) or len(ctx.results) != 1:
        raise ValueError(f"on_predict_start: a Router request takes exactly one result; use "
                         f"ctx.skip([result]), got ctx.results = {ctx.results!r}")
    for result in ctx.results:
        if not isinstance(result, dict):
            raise TypeError(f"ctx.skip(): a Router result must be a dict, got {type(result).__name__} {result!r}")
    return ctx.results


def _check_rewritten(ctx: PredictContext) -> None:
    if not isinstance(ctx.states, (list, tuple)) or len(ctx.states) != 1:
        raise ValueError(
            f"on_predict_start: ctx.states of a Router request must hold exactly one state, got "
            f"{ctx.states!r}; replace the state as ctx.states = [new_state]"
        )
    if not isinstance(ctx.questions, Mapping):
        raise TypeError(f"on_predict_start: ctx.questions must be a dict, got {type(ctx.questions).__name__}")


def _freeze(value: Any) -> Any:
    """A hashable, order-keeping, type-aware key for questions (``1`` and ``True`` stay apart)."""
    if isinstance(value, Mapping):
        return ("dict", tuple((_freeze(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_freeze(v) for v in value))
    if isinstance(value, (str, int, float, bool, type(None))):
        return (type(value).__name__, value)
    return ("object", id(value))


def _first_given(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
