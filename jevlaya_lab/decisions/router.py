"""``Router``: pick a checkpoint per request, keep a few resident, run the hook lifecycle per request.

The Router is put together from three parts: routing (``route`` / ``route_batch``, never loads a
model; the precedence chain is :mod:`~jevlaya_lab.decisions.routing_policy`), residency
(``load`` / ``unload`` / ``attach`` / ``preload`` and the hub options,
:mod:`~jevlaya_lab.decisions.router_loading`) and prediction, here.

``predict`` is ``predict_batch`` with one request. Every request gets its own
``PredictContext``; all requests are validated and routed (``on_route``) before anything loads;
checkpoints are visited in order of first appearance, and the requests of one checkpoint run as
a :class:`~jevlaya_lab.decisions.router_batch.CheckpointGroup` through the one hook lifecycle.
An end hook that raises stops the batch after every request of its group has ended (as a loop of
``predict`` calls would stop); later groups never start. Within one request, the first failing
``on_predict_end`` hook stops that request's end hooks (as in Laya); every other started request
still gets its ``on_predict_end``.

A hook on ``on_route`` may replace ``ctx.decision`` with a new decision, a plain dict with a
``model`` key, or just a name/alias; aliases are resolved to the canonical name at once, so
requests pinned through an alias share the forward pass of that checkpoint.

One request, one run id: a request's predict context keeps the ``run_id`` of its ``on_route``
context (Laya gives them two), so a hook or a trace sees routing, start and end of a request as
one run. Every public call (``predict``, ``route``, ``load``, ``unload``, ...) is one
:func:`~jevlaya_lab.hooks.context.call_scope`: all contexts it creates, ``on_load`` /
``on_evict`` and the Agent's own included, carry the call's id as ``parent_id``. (A ``route``
with no hook listening, no callable guesser and no ``explain`` creates none, and skips it.)

``agent_kwargs`` may not set what the Router sets itself (``token``, ``revision``,
``subfolder``, ``model_id``): a ``ValueError`` says where to put it instead. ``preload=True``
loads every registered checkpoint at construction, raising ``max_loaded`` to fit them all (as
Laya); ``preload(names)`` later still refuses more names than ``max_loaded``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack

from jevlaya_lab._hub import check_revision, check_token
from jevlaya_lab.decisions import detect as detection
from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.loaded_agents import LoadedAgents
from jevlaya_lab.decisions.registry import (
    DEFAULT_MODELS,
    LAYA_MODELS,
    LAYA_TASKS,
    LAYA_WORKFLOWS,
    Registry,
)
from jevlaya_lab.decisions.router_batch import CheckpointGroup, check_rewritten, check_skipped
from jevlaya_lab.decisions.router_loading import CheckpointResidency, check_digests
from jevlaya_lab.decisions.routing_policy import REQUEST_KEYS, Decision, RoutingPolicy
from jevlaya_lab.hooks import CallHooks, HookHost, HookRunner, PredictContext
from jevlaya_lab.hooks.context import call_scope, new_run_id
from jevlaya_lab.hooks.options import HookKeywords, HookOptions

__all__ = ["REQUEST_KEYS", "Decision", "Router"]


class Router(HookHost, CheckpointResidency):
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
        self.sha256_digests = self._per_checkpoint("sha256_digests", sha256_digests, check_digests)
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
                check_rewritten(ctx)
                result = scan(ctx.states[0], ctx.questions, window=window, stride=stride,
                              aggregate=aggregate, batch_size=batch_size)
                result["routing"] = decision
                ctx.results = [result]
            else:
                for skipped in check_skipped(ctx):
                    skipped.setdefault("routing", ctx.decision)
        assert ctx.results is not None  # the lifecycle left one result per request
        return ctx.results[0]

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
            group = CheckpointGroup(self, name, agent, calls, call)
            for i, result in zip(indices, group.run([requests[i] for i in indices],
                                                   [routed[i] for i in indices])):
                results[i] = result
        return results

    def __repr__(self) -> str:
        return (f"Router(registered={list(self._registry.names)}, loaded={list(self.loaded)}, "
                f"max_loaded={self.max_loaded}, default={self.default!r})")
