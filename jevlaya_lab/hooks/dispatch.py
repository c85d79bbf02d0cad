"""Calling hooks: the installed hooks of an Agent or Router, the hooks of one call, and the one
definition of the predict lifecycle that Agent, Router, batches and long states all run.

Ordering: installed hooks run before per-call hooks, list order within each; every hook finishes
an event before the next event starts.

The lifecycle (:meth:`CallHooks.lifecycle`, the only entry point; ``tests/test_structure.py``
checks that nothing outside this package runs the steps itself) takes the contexts of one call in
input order, one for an Agent call, one per request of a Router checkpoint group:

1. ``on_predict_start`` for each context in order; a hook may rewrite the context, set budgets or
   ``skip()``; a failure here fails every context started so far, this one included;
2. the caller's work (the ``with`` block): tokenisation and the forward pass;
3. success: for each context in reverse order, ``elapsed_ms`` and ``usage`` (the results' sum,
   unless a hook set it), then ``on_predict_end``; the first end-hook failure is raised after all
   contexts have ended;
4. failure: for each started context in reverse order, ``error``, ``elapsed_ms``, ``usage``,
   ``on_error``, then every ``on_predict_end``; the error propagates unchanged.

Failures: with ``hooks_raise=True`` the first failing hook stops the event and its own
exception propagates (its type is kept, a note names the hook and the event); with
``hooks_raise=False`` each failure becomes one ``RuntimeWarning`` and the event continues.
``on_error`` never masks the error being reported: a failing ``on_error`` hook is attached to
that error as a note (and warned about when ``hooks_raise=False``); so is a failing
``on_predict_end`` on the failure path.

``hooks_concurrent=False`` holds one re-entrant lock per runner around each single hook
invocation (not the whole call), so a hook may call back into the same Agent/Router.
``hooks_timeout`` (seconds, per runner or per call) bounds each hook invocation: an overrunning
hook raises ``TimeoutError`` (a warning when ``hooks_raise=False``). Python threads cannot be
interrupted, so the overrunning hook finishes in the background; the timeout protects the call.
An event method that returns an awaitable (``async def``) is run to completion before the next
hook, on a private event loop when the calling thread already runs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Unpack

from .base import HOOK_EVENTS, RegisteredHook, check_callable, register_hook
from .context import PredictContext, aggregate_usage
from .errors import InvalidHookError
from .options import HookEvent, HookKeywords, HookOptions, HookSettings


def check_timeout(value: Any, name: str = "hooks_timeout") -> float | None:
    """``None`` or a positive finite number of seconds; anything else is a ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name} = {value!r} must be a positive number of seconds or None "
                         f"(no limit), e.g. {name}=2.0")
    return float(value)


class HookRunner:
    """Holds the installed hooks (validated at registration) and builds each call's hooks."""

    def __init__(self, hooks: Iterable[Any] | None = None, /, options: HookOptions | None = None,
                 **settings: Unpack[HookSettings]) -> None:
        """``HookRunner(hooks, options)`` or ``HookRunner(hooks, hooks_raise=..., ...)`` with the
        fields of :class:`HookOptions` as keywords (``hooks_raise`` defaults to ``True``)."""
        if options is None:
            options = HookOptions(**settings)
        elif settings:
            raise TypeError(f"HookRunner: pass options= or keywords ({', '.join(settings)}), not both")
        if hooks is not None:
            if options.hooks is not None:
                raise TypeError("HookRunner: hooks given both positionally and in options; pass them once")
            options = replace(options, hooks=hooks)
        self.hooks_raise = True if options.hooks_raise is None else bool(options.hooks_raise)
        self.hooks_concurrent = True if options.hooks_concurrent is None else bool(options.hooks_concurrent)
        self.hooks_timeout = check_timeout(options.hooks_timeout)
        self._lock = threading.RLock()  # serialises hook invocations when not concurrent
        # guards changes to the installed tuple; calls read a snapshot of it without locking
        self._install_lock = threading.Lock()
        self._installed: tuple[RegisteredHook, ...] = _collect(
            options.hooks, options.on_predict_start, options.on_predict_end)

    # -- installation -----------------------------------------------------------------------
    @property
    def installed(self) -> tuple[Any, ...]:
        """The installed hooks, in the order they run."""
        return tuple(r.hook for r in self._installed)

    def add_hook(self, hook: Any) -> None:
        """Install ``hook`` after the ones already installed (validated now)."""
        registered = register_hook(hook, "add_hook")
        with self._install_lock:
            self._installed = (*self._installed, registered)

    def remove_hook(self, hook: Any) -> None:
        """Uninstall ``hook``; a ``ValueError`` if it is not installed."""
        with self._install_lock:
            installed = list(self._installed)
            for i, candidate in enumerate(installed):
                if candidate.hook is hook:
                    del installed[i]
                    self._installed = tuple(installed)
                    return
        raise ValueError(f"remove_hook: {hook!r} is not installed; installed: {list(self.installed)}")

    @contextlib.contextmanager
    def hooks_installed(self, *hooks: Any) -> Iterator[None]:
        """Install ``hooks`` for the duration of a ``with`` block."""
        for hook in hooks:
            register_hook(hook, "hooks_installed")
        for hook in hooks:
            self.add_hook(hook)
        try:
            yield
        finally:
            for hook in reversed(hooks):
                with contextlib.suppress(ValueError):
                    self.remove_hook(hook)

    def listens(self, event: HookEvent) -> bool:
        """Whether an installed hook implements ``event``: a call without hooks of its own and
        without such a hook can skip the event, and building its context, altogether."""
        return bool(self._installed) and any(event in registered.calls for registered in self._installed)

    def call(self, hooks: Sequence[Any] | None = None, /, options: HookOptions | None = None,
             **keywords: Unpack[HookKeywords]) -> CallHooks:
        """The hooks of one call: installed, then this call's (``None`` and ``[]`` add nothing).
        ``options`` and the keywords are one call's :class:`HookOptions` (see ``of_call``)."""
        if keywords or options is None or type(options) is not HookOptions:
            options = HookOptions.of_call(options, keywords, "call")
        if hooks is not None:
            if options.hooks is not None:
                raise TypeError("call: hooks given both positionally and in options; pass them once")
            options = replace(options, hooks=hooks)
        if options.hooks_concurrent is not None:
            raise TypeError("call: hooks_concurrent applies to the installed hooks only")
        per_call = _collect(options.hooks, options.on_predict_start, options.on_predict_end)
        active = (*self._installed, *per_call) if per_call else self._installed
        raising = self.hooks_raise if options.hooks_raise is None else bool(options.hooks_raise)
        timeout = self.hooks_timeout if options.hooks_timeout is None else check_timeout(options.hooks_timeout)
        return CallHooks(self, active, raising, timeout)


class CallHooks:
    """The hooks of one call with its failure and timeout settings; emits events and runs the
    predict lifecycle (see the module docstring)."""

    def __init__(self, runner: HookRunner, active: tuple[RegisteredHook, ...], raising: bool,
                 timeout: float | None):
        self.runner, self.active, self.raising, self.timeout = runner, active, raising, timeout

    @property
    def hooks(self) -> tuple[Any, ...]:
        return tuple(r.hook for r in self.active)

    # -- events ----------------------------------------------------------------------------
    def listens(self, event: HookEvent) -> bool:
        """Whether any hook of this call implements ``event`` (callers may then skip building
        its context)."""
        return bool(self.active) and any(event in registered.calls for registered in self.active)

    def emit(self, event: HookEvent, ctx: PredictContext) -> None:
        """Run ``event`` on every hook that implements it; the first failure raises (or warns)."""
        failure = self._run(event, ctx, stop_at_first=True)
        if failure is not None:
            raise failure

    def emit_each(self, event: HookEvent, ctx: PredictContext) -> BaseException | None:
        """Run ``event`` on every hook even if some fail; return the first failure, if any."""
        return self._run(event, ctx, stop_at_first=False)

    def emit_error(self, ctx: PredictContext) -> None:
        """Run ``on_error``; never raises, so the error in ``ctx.error`` is what propagates."""
        for registered in self.active:
            call = registered.calls.get("on_error")
            if call is None:
                continue
            try:
                self._invoke(registered, "on_error", call, ctx)
            except Exception as exc:
                if not self.raising:
                    _warn(registered, "on_error", exc)
                _attach(ctx.error, exc, f"while reporting this error, hook {registered.name}.on_error")

    # -- the predict lifecycle (the one definition; see the module docstring) ----------------
    @contextlib.contextmanager
    def lifecycle(self, contexts: PredictContext | Iterable[PredictContext]) -> Iterator[list[PredictContext]]:
        """Start ``contexts`` in order, run the ``with`` block (the call's work) on the list of
        them, then end them in reverse order: finished on success, failed with the block's
        exception otherwise. An Agent call passes its one context; a Router checkpoint group an
        iterable with one per request, each built just before its start hooks run (its
        ``started_at`` is then its own)."""
        started: list[PredictContext] = []
        try:
            for ctx in [contexts] if isinstance(contexts, PredictContext) else contexts:
                started.append(ctx)
                self._start(ctx)
            yield started
        except BaseException as exc:
            for ctx in reversed(started):  # every started context fails with exc
                self._fail(ctx, exc)
            raise
        first: BaseException | None = None
        for ctx in reversed(started):
            failure = self._finish(ctx)
            first = first or failure
        if first is not None:
            raise first

    def _start(self, ctx: PredictContext) -> None:
        """``on_predict_start``; a hook may rewrite the context, set budgets or ``skip()``."""
        self.emit("on_predict_start", ctx)

    def _finish(self, ctx: PredictContext) -> BaseException | None:
        """Success path: ``elapsed_ms``, ``usage``, then ``on_predict_end``; returns its failure."""
        _close(ctx)
        return self._run("on_predict_end", ctx, stop_at_first=True)

    def _fail(self, ctx: PredictContext, exc: BaseException) -> None:
        """Failure path: ``error``, ``elapsed_ms``, ``usage``, ``on_error``, then every
        ``on_predict_end``; nothing here replaces ``exc`` (failures become notes on it)."""
        ctx.error = exc
        _close(ctx)
        self.emit_error(ctx)
        late = self._run("on_predict_end", ctx, stop_at_first=False)
        if late is not None and late is not exc:
            _attach(exc, late, "while ending this failed call, on_predict_end")

    # -- invocation ------------------------------------------------------------------------
    def _run(self, event: HookEvent, ctx: PredictContext, stop_at_first: bool) -> BaseException | None:
        first: BaseException | None = None
        for registered in self.active:
            call = registered.calls.get(event)
            if call is None:
                continue
            try:
                self._invoke(registered, event, call, ctx)
            except Exception as exc:
                if not self.raising:
                    _warn(registered, event, exc)
                    continue
                exc.add_note(f"raised by hook {registered.name}.{event}")
                first = first or exc
                if stop_at_first:
                    break
        return first

    def _invoke(self, registered: RegisteredHook, event: str, call: Callable[[Any], Any],
                ctx: PredictContext) -> None:
        timeout = self.timeout

        def run() -> None:
            if timeout is not None:
                _bounded(call, ctx, timeout, f"{registered.name}.{event}")
            else:
                _complete(call(ctx))

        if self.runner.hooks_concurrent:
            run()
        else:
            with self.runner._lock:
                run()


def _collect(hooks: Any, on_start: Any, on_end: Any) -> tuple[RegisteredHook, ...]:
    if hooks is None:
        collected: list[RegisteredHook] = []
    elif isinstance(hooks, (list, tuple)):
        collected = [register_hook(h) for h in hooks]
    else:
        raise InvalidHookError(
            f"hooks: expected a list of hook instances, got {type(hooks).__name__}; "
            f"write hooks=[hook]"
        )
    if on_start is not None:
        collected.append(register_hook(check_callable(on_start, "on_predict_start")))
    if on_end is not None:
        collected.append(register_hook(check_callable(on_end, "on_predict_end")))
    return tuple(collected)


def _close(ctx: PredictContext) -> None:
    ctx.elapsed_ms = (time.perf_counter() - ctx.started_at) * 1000.0
    if ctx.results and ctx.usage is None:
        ctx.usage = aggregate_usage(ctx.results)


def _attach(error: BaseException | None, failure: BaseException, what: str) -> None:
    if error is None:
        return
    error.add_note(f"{what} raised {type(failure).__name__}: {failure}")
    if error.__context__ is None:  # keep the hook failure reachable
        error.__context__ = failure


# -- async event methods --------------------------------------------------------------------
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="jevlaya-hooks-loop", daemon=True).start()
        return _loop


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _complete(result: Any) -> Any:
    """Run an awaitable a hook returned to completion (on a private loop inside a running one)."""
    if not inspect.isawaitable(result):
        return result
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(result))
    return asyncio.run_coroutine_threadsafe(_await(result), _background_loop()).result()


def _bounded(call: Callable[[Any], Any], ctx: Any, timeout: float, name: str) -> None:
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            _complete(call(ctx))
            outcome.append(None)
        except BaseException as exc:  # re-raised in the calling thread
            outcome.append(exc)

    worker = threading.Thread(target=target, name=f"hook {name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"hook {name} exceeded hooks_timeout={timeout:g}s (it keeps running in "
                           "the background; raise hooks_timeout or make the hook faster)")
    if outcome and outcome[0] is not None:
        raise outcome[0]


def _warn(registered: RegisteredHook, event: str, exc: BaseException) -> None:
    warnings.warn(
        f"hook {registered.name}.{event} raised {type(exc).__name__}: {exc} "
        f"(ignored because hooks_raise=False)",
        RuntimeWarning,
        stacklevel=6,
    )


class HookHost:
    """Hook management shared by Agent and Router: both keep their ``HookRunner`` in ``_hooks``."""

    _hooks: HookRunner

    @property
    def hooks(self) -> tuple[Any, ...]:
        """The installed hooks, in the order they run."""
        return self._hooks.installed

    def add_hook(self, hook: Any) -> None:
        """Install ``hook`` after the installed ones (installed hooks run before per-call hooks)."""
        self._hooks.add_hook(hook)

    def remove_hook(self, hook: Any) -> None:
        """Uninstall ``hook``; a ``ValueError`` if it is not installed."""
        self._hooks.remove_hook(hook)

    def hooks_installed(self, *hooks: Any) -> contextlib.AbstractContextManager[None]:
        """Install ``hooks`` for the duration of a ``with`` block."""
        return self._hooks.hooks_installed(*hooks)


__all__ = ["CallHooks", "HookHost", "HookOptions", "HookRunner", "HOOK_EVENTS", "check_timeout"]
