"""``HookRunner``: installed hooks of one Agent or Router, and the rules for calling them.

Ordering (lifecycle page, "ordering rules"): installed hooks run before per-call hooks, list
order within each; every hook finishes an event before the next event starts.

Failures: with ``hooks_raise=True`` the first failing hook stops the event and its own
exception propagates (its type is kept, a note names the hook and the event); with
``hooks_raise=False`` each failure becomes one ``RuntimeWarning`` and the event continues.
``on_error`` never masks the error being reported: a failing ``on_error`` hook is attached to
that error as a note (and warned about when ``hooks_raise=False``).

``hooks_concurrent=False`` holds one re-entrant lock per runner around each single hook
invocation (not the whole call), so a hook may call back into the same Agent/Router.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Callable, Iterable, Iterator

from .base import HOOK_EVENTS, check_callable, check_hook, hook_name
from .errors import InvalidHookError


class HookRunner:
    """Holds the installed hooks and dispatches events to installed + per-call hooks."""

    def __init__(
        self,
        hooks: Iterable[Any] | None = None,
        *,
        on_predict_start: Callable[[Any], Any] | None = None,
        on_predict_end: Callable[[Any], Any] | None = None,
        hooks_raise: bool = True,
        hooks_concurrent: bool = True,
    ):
        self.hooks_raise = bool(hooks_raise)
        self.hooks_concurrent = bool(hooks_concurrent)
        self._lock = threading.RLock()  # serialises hook invocations when not concurrent
        # guards changes to the installed tuple; calls read a snapshot of it without locking
        self._install_lock = threading.Lock()
        self._installed: tuple[Any, ...] = self._collect(hooks, on_predict_start, on_predict_end)

    # -- installation -----------------------------------------------------------------------
    @property
    def installed(self) -> tuple[Any, ...]:
        """The installed hooks, in the order they run."""
        return self._installed

    def add_hook(self, hook: Any) -> None:
        """Install ``hook`` after the ones already installed."""
        check_hook(hook, "add_hook")
        with self._install_lock:
            self._installed = (*self._installed, hook)

    def remove_hook(self, hook: Any) -> None:
        """Uninstall ``hook``; a ``ValueError`` if it is not installed."""
        with self._install_lock:
            installed = list(self._installed)
            for i, candidate in enumerate(installed):
                if candidate is hook:
                    del installed[i]
                    self._installed = tuple(installed)
                    return
        raise ValueError(f"remove_hook: {hook!r} is not installed; installed: {list(self._installed)}")

    @contextlib.contextmanager
    def hooks_installed(self, *hooks: Any) -> Iterator[None]:
        """Install ``hooks`` for the duration of a ``with`` block."""
        for hook in hooks:
            check_hook(hook, "hooks_installed")
        for hook in hooks:
            self.add_hook(hook)
        try:
            yield
        finally:
            for hook in reversed(hooks):
                with contextlib.suppress(ValueError):
                    self.remove_hook(hook)

    def active(
        self,
        hooks: Iterable[Any] | None = None,
        on_predict_start: Callable[[Any], Any] | None = None,
        on_predict_end: Callable[[Any], Any] | None = None,
    ) -> tuple[Any, ...]:
        """Installed hooks followed by this call's hooks (``None`` and ``[]`` add nothing)."""
        per_call = self._collect(hooks, on_predict_start, on_predict_end)
        return (*self._installed, *per_call) if per_call else self._installed

    @staticmethod
    def _collect(hooks: Any, on_start: Any, on_end: Any) -> tuple[Any, ...]:
        if hooks is None:
            collected: list[Any] = []
        elif isinstance(hooks, (list, tuple)):
            collected = [check_hook(h) for h in hooks]
        else:
            raise InvalidHookError(
                f"hooks: expected a list of hook instances, got {type(hooks).__name__}; "
                f"write hooks=[hook]"
            )
        if on_start is not None:
            collected.append(check_callable(on_start, "on_predict_start"))
        if on_end is not None:
            collected.append(check_callable(on_end, "on_predict_end"))
        return tuple(collected)

    # -- dispatch ---------------------------------------------------------------------------
    def _raise_mode(self, hooks_raise: bool | None) -> bool:
        return self.hooks_raise if hooks_raise is None else bool(hooks_raise)

    def _invoke(self, hook: Any, event: str, args: tuple) -> None:
        method = getattr(hook, event)
        if self.hooks_concurrent:
            method(*args)
        else:
            with self._lock:
                method(*args)

    def emit(self, active: Iterable[Any], event: str, *args: Any, hooks_raise: bool | None = None) -> None:
        """Run ``event`` on every hook that implements it; the first failure raises (or warns)."""
        failure = self._run(active, event, args, hooks_raise, stop_at_first=True)
        if failure is not None:
            raise failure

    def emit_each(
        self, active: Iterable[Any], event: str, *args: Any, hooks_raise: bool | None = None
    ) -> BaseException | None:
        """Run ``event`` on every hook even if some fail; return the first failure, if any."""
        return self._run(active, event, args, hooks_raise, stop_at_first=False)

    def _run(self, active: Iterable[Any], event: str, args: tuple, hooks_raise: bool | None,
             stop_at_first: bool) -> BaseException | None:
        raising = self._raise_mode(hooks_raise)
        first: BaseException | None = None
        for hook in active:
            if not hasattr(hook, event):
                continue
            try:
                self._invoke(hook, event, args)
            except Exception as exc:
                if not raising:
                    _warn(hook, event, exc)
                    continue
                exc.add_note(f"raised by hook {hook_name(hook)}.{event}")
                first = first or exc
                if stop_at_first:
                    break
        return first

    def emit_error(self, active: Iterable[Any], ctx: Any, hooks_raise: bool | None = None) -> None:
        """Run ``on_error``; never raises, so the error in ``ctx.error`` is what propagates."""
        raising = self._raise_mode(hooks_raise)
        for hook in active:
            if not hasattr(hook, "on_error"):
                continue
            try:
                self._invoke(hook, "on_error", (ctx,))
            except Exception as exc:
                if not raising:
                    _warn(hook, "on_error", exc)
                if ctx.error is not None:
                    ctx.error.add_note(
                        f"while reporting this error, hook {hook_name(hook)}.on_error raised "
                        f"{type(exc).__name__}: {exc}"
                    )
                    if ctx.error.__context__ is None:  # keep the hook failure reachable
                        ctx.error.__context__ = exc


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


def _warn(hook: Any, event: str, exc: BaseException) -> None:
    warnings.warn(
        f"hook {hook_name(hook)}.{event} raised {type(exc).__name__}: {exc} "
        f"(ignored because hooks_raise=False)",
        RuntimeWarning,
        stacklevel=5,
    )


__all__ = ["HookHost", "HookRunner", "HOOK_EVENTS"]
