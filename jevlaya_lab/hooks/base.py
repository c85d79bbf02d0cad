"""The hook protocol: the event names, a no-op base class and the checks on what is a hook.

A hook is an *instance* that implements at least one event of :data:`HOOK_EVENTS` as a
method. Plain functions are accepted only through ``on_predict_start=`` / ``on_predict_end=``,
where they are wrapped in :class:`CallableHook`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from .errors import InvalidHookError

HOOK_EVENTS: tuple[str, ...] = (
    "on_route",
    "on_load",
    "on_evict",
    "on_predict_start",
    "on_predict_end",
    "on_error",
)


class BaseHook:
    """Implements every event as a no-op; subclass it and override the events you need.

    Signatures: ``on_route(ctx)``, ``on_predict_start(ctx)``, ``on_predict_end(ctx)``,
    ``on_error(ctx)`` take the :class:`~jevlaya_lab.hooks.PredictContext`;
    ``on_load(name, agent)`` and ``on_evict(name, agent)`` take the checkpoint name and its Agent.
    """

    def on_route(self, ctx: Any) -> None:
        pass

    def on_load(self, name: str, agent: Any) -> None:
        pass

    def on_evict(self, name: str, agent: Any) -> None:
        pass

    def on_predict_start(self, ctx: Any) -> None:
        pass

    def on_predict_end(self, ctx: Any) -> None:
        pass

    def on_error(self, ctx: Any) -> None:
        pass


class CallableHook:
    """Adapts a plain function to one event (``on_predict_start=fn`` / ``on_predict_end=fn``)."""

    def __init__(self, event: str, func: Callable[[Any], Any]):
        self.event = event
        self.func = func
        setattr(self, event, func)

    def __repr__(self) -> str:
        return f"<{self.event}={getattr(self.func, '__qualname__', self.func)!r}>"


def hook_name(hook: Any) -> str:
    """A short name for messages: the function name for wrapped callables, else the class."""
    if isinstance(hook, CallableHook):
        return getattr(hook.func, "__qualname__", repr(hook.func))
    return type(hook).__qualname__


def check_hook(hook: Any, where: str = "hooks") -> Any:
    """Return ``hook`` if it is a valid hook instance, else raise an ``InvalidHookError`` (a
    ``TypeError``) saying why."""
    if isinstance(hook, type):
        raise InvalidHookError(
            f"{where}: got the class {hook.__qualname__}, not an instance; "
            f"pass {hook.__qualname__}() instead"
        )
    if inspect.isroutine(hook) or isinstance(hook, functools.partial):
        name = getattr(hook, "__qualname__", repr(hook))
        raise InvalidHookError(
            f"{where}: got the bare function {name}; pass it as on_predict_start={name} or "
            f"on_predict_end={name}, or put it in a class as a method named after an event "
            f"({', '.join(HOOK_EVENTS)})"
        )
    implemented = [event for event in HOOK_EVENTS if hasattr(hook, event)]
    if not implemented:
        raise InvalidHookError(
            f"{where}: {type(hook).__qualname__} implements no hook event; define at least one "
            f"method named {', '.join(HOOK_EVENTS)} (or subclass BaseHook)"
        )
    for event in implemented:
        if not callable(getattr(hook, event)):
            raise InvalidHookError(
                f"{where}: {type(hook).__qualname__}.{event} is "
                f"{type(getattr(hook, event)).__name__}, not callable; make it a method"
            )
    return hook


def check_callable(func: Any, event: str) -> CallableHook:
    """Wrap ``func`` for ``on_predict_start=`` / ``on_predict_end=`` after checking it."""
    if isinstance(func, type) or not callable(func):
        raise InvalidHookError(
            f"{event}=: expected a function taking the PredictContext, got {func!r}; "
            f"hook objects go in hooks=[...]"
        )
    return CallableHook(event, func)
