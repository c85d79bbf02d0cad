"""Calling hooks: the installed hooks of an Agent or Router, the hooks of one call, and the one
definition of the predict lifecycle that both Agent and Router follow.

Ordering (lifecycle page, "ordering rules"): installed hooks run before per-call hooks, list
order within each; every hook finishes an event before the next event starts.

The lifecycle of one :class:`~jevlaya_lab.hooks.PredictContext` (:class:`CallHooks`):
:meth:`~CallHooks.start` runs ``on_predict_start``; on success :meth:`~CallHooks.finish` sets
``elapsed_ms`` and ``usage`` and runs ``on_predict_end``; on failure :meth:`~CallHooks.fail` sets
``error``, ``elapsed_ms`` and ``usage``, runs ``on_error`` and then ``on_predict_end``. The Agent
wraps its work in :meth:`~CallHooks.lifecycle` (one context); the Router starts, finishes and fails
the contexts of a checkpoint group with the same three steps, in the seed's order.

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
from typing import Any, Callable, Iterable, Iterator

from .base import HOOK_EVENTS, RegisteredHook, check_callable, register_hook
from .context import aggregate_usage
from .errors import InvalidHookError


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

    def __init__(
        self,
        hooks: Iterable[Any] | None = None,
        *,
        on_predict_start: Callable[[Any], Any] | None = None,
        on_predict_end: Callable[[Any], Any] | None = None,
        hooks_raise: bool = True,
        hooks_concurrent: bool = True,
        hooks_timeout: float | None = None,
    ):
        self.hooks_raise = bool(hooks_raise)
        self.hooks_concurrent = bool(hooks_concurrent)
        self.hooks_timeout = check_timeout(hooks_timeout)
        self._lock = threading.RLock()  # serialises hook invocations when not concurrent
        # guards changes to the installed tuple; calls read a snapshot of it without locking
        self._install_lock = threading.Lock()
        self._installed: tuple[RegisteredHook, ...] = _collect(hooks, on_predict_start, on_predict_end)

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

    def listens(self, event: str) -> bool:
        """Whether an installed hook implements ``event``: a call without hooks of its own and
        without such a hook can skip the event, and building its context, altogether."""
        return bool(self._installed) and any(event in registered.calls for registered in self._installed)

    def call(
        self,
        hooks: Iterable[Any] | None = None,
        on_predict_start: Callable[[Any], Any] | None = None,
        on_predict_end: Callable[[Any], Any] | None = None,
        *,
        hooks_raise: bool | None = None,
        hooks_timeout: float | None = None,
    ) -> CallHooks:
        """The hooks of one call: installed, then this call's (``None`` and ``[]`` add nothing)."""
        per_call = _collect(hooks, on_predict_start, on_predict_end)
        active = (*self._installed, *per_call) if per_call else self._installed
        raising = self.hooks_raise if hooks_raise is None else bool(hooks_raise)
        timeout = self.hooks_timeout if hooks_timeout is None else check_timeout(hooks_timeout)
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

    def with_hooks(self, extra: Iterable[Any] | None) -> CallHooks:
        """These hooks followed by ``extra`` (for a per-call list added after the fact)."""
        more = _collect(extra, None, None)
        return CallHooks(self.runner, (*self.active, *more), self.raising, self.timeout) if more else self

    # -- events ----------------------------------------------------------------------------
    def listens(self, event: str) -> bool:
        """Whether any hook of this call implements ``event`` (callers may then skip building
        its context)."""
        return bool(self.active) and any(event in registered.calls for registered in self.active)

    def emit(self, event: str, ctx: Any) -> None:
        """Run ``event`` on every hook that implements it; the first failure raises (or warns)."""
        failure = self._run(event, ctx, stop_at_first=True)
        if failure is not None:
            raise failure

    def emit_each(self, event: str, ctx: Any) -> BaseException | None:
        """Run ``event`` on every hook even if some fail; return the first failure, if any."""
        return self._run(event, ctx, stop_at_first=False)

    def emit_error(self, ctx: Any) -> None:
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

    # -- the predict lifecycle (one definition for Agent and Router) -----------------------
    def start(self, ctx: Any) -> None:
        """``on_predict_start``; a hook may rewrite the context, set budgets or ``skip()``."""
        self.emit("on_predict_start", ctx)

    def finish(self, ctx: Any) -> BaseException | None:
        """Success path: ``elapsed_ms``, ``usage``, then ``on_predict_end``; returns its failure."""
        _close(ctx)
        return self._run("on_predict_end", ctx, stop_at_first=True)

    def fail(self, ctx: Any, exc: BaseException) -> None:
        """Failure path: ``error``, ``elapsed_ms``, ``usage``, ``on_error``, then every
        ``on_predict_end``; nothing here replaces ``exc`` (failures become notes on it)."""
        ctx.error = exc
        _close(ctx)
        self.emit_error(ctx)
        late = self._run("on_predict_end", ctx, stop_at_first=False)
        if late is not None and late is not exc:
            _attach(exc, late, "while ending this failed call, on_predict_end")

    @contextlib.contextmanager
    def lifecycle(self, ctx: Any) -> Iterator[Any]:
        """Start, then the caller's work, then finish or fail: the Agent's whole call."""
        try:
            self.start(ctx)
            yield ctx
        except BaseException as exc:
            self.fail(ctx, exc)
            raise
        failure = self.finish(ctx)
        if failure is not None:
            raise failure

    # -- invocation ------------------------------------------------------------------------
    def _run(self, event: str, ctx: Any, stop_at_first: bool) -> BaseException | None:
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

    def _invoke(self, registered: RegisteredHook, event: str, call: Callable[[Any], Any], ctx: Any) -> None:
        if self.timeout is not None:
            run = lambda: _bounded(call, ctx, self.timeout, f"{registered.name}.{event}")  # noqa: E731
        else:
            run = lambda: _complete(call(ctx))  # noqa: E731
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


def _close(ctx: Any) -> None:
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


__all__ = ["CallHooks", "HookHost", "HookRunner", "HOOK_EVENTS", "check_timeout"]
