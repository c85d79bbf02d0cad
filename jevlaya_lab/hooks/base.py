"""The hook protocol: the event names, a no-op base class, and registration.

A hook is an *instance* that implements at least one event of :data:`HOOK_EVENTS` as a
method. Plain functions are accepted only through ``on_predict_start=`` / ``on_predict_end=``,
where they are wrapped in :class:`CallableHook`.

Everything about a hook is decided once, when it is registered (:func:`register_hook`): which
events it implements (a :class:`BaseHook` method left as the no-op does not count), whether
``on_load`` / ``on_evict`` take the context (Laya's form, ``on_load(ctx)``) or the
``(name, agent)`` pair (read from the method's signature: two required positional parameters
mean the pair), and that a :class:`BaseHook` subclass has no misspelt ``on_*`` method. An
``async def`` event (or one returning an awaitable) is run to completion, in sync calls too.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .errors import InvalidHookError

if TYPE_CHECKING:
    from .context import PredictContext

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

    Every event takes the :class:`~jevlaya_lab.hooks.PredictContext`. ``on_load`` / ``on_evict``
    may instead be written as ``on_load(self, name, agent)`` (the two-argument form); their context
    has ``model`` (the checkpoint name), ``agent`` (the Agent built or evicted) and ``router``.
    Any method may be ``async def``. A method named ``on_*`` that is not an event is refused
    when the hook is registered, so a typo such as ``on_predict_strat`` cannot go unnoticed.
    """

    def on_route(self, ctx: PredictContext) -> None:
        """A request was routed: ``ctx.decision`` may be replaced (a decision, a dict with
        ``model`` or a checkpoint name)."""

    def on_load(self, ctx: PredictContext) -> None:
        """A checkpoint was built: ``ctx.model`` is its name, ``ctx.agent`` the Agent."""

    def on_evict(self, ctx: PredictContext) -> None:
        """A checkpoint left the Router: ``ctx.model`` is its name, ``ctx.agent`` the Agent."""

    def on_predict_start(self, ctx: PredictContext) -> None:
        """A call starts: states, questions and budgets may be rewritten, or ``ctx.skip()``."""

    def on_predict_end(self, ctx: PredictContext) -> None:
        """A call ended (always, also after an error): results, usage, elapsed_ms, error."""

    def on_error(self, ctx: PredictContext) -> None:
        """A call failed: ``ctx.error`` is the exception that will propagate."""


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


@dataclass(frozen=True)
class RegisteredHook:
    """A validated hook with one ready call per event it implements (see :func:`register_hook`)."""

    hook: Any
    calls: dict[str, Callable[[Any], Any]]
    """``event -> call(ctx)``; the call adapts ``(name, agent)`` methods of on_load/on_evict."""

    @property
    def name(self) -> str:
        return hook_name(self.hook)


def _takes_name_and_agent(method: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) >= 2


def _name_and_agent(method: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    return lambda ctx: method(ctx.model, ctx.agent)


def register_hook(hook: Any, where: str = "hooks") -> RegisteredHook:
    """Validate ``hook`` and decide how each of its events is called; raise ``InvalidHookError``
    (a ``TypeError``) saying what is wrong."""
    if isinstance(hook, RegisteredHook):
        return hook
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
    cls = type(hook).__qualname__
    if isinstance(hook, BaseHook):
        # only names written in BaseHook subclasses: a mixed-in base (a widget) may have on_* of its own
        unknown = sorted({n for klass in type(hook).__mro__
                          if issubclass(klass, BaseHook) and klass is not BaseHook
                          for n in vars(klass) if n.startswith("on_") and n not in HOOK_EVENTS})
        if unknown:
            raise InvalidHookError(
                f"{where}: {cls} defines {', '.join(unknown)}, which is not a hook event and would "
                f"never be called; rename it to one of {', '.join(HOOK_EVENTS)}"
            )
    implemented = [event for event in HOOK_EVENTS if hasattr(hook, event)]
    if not implemented:
        raise InvalidHookError(
            f"{where}: {cls} implements no hook event; define at least one "
            f"method named {', '.join(HOOK_EVENTS)} (or subclass BaseHook)"
        )
    calls: dict[str, Callable[[Any], Any]] = {}
    for event in implemented:
        method = getattr(hook, event)
        if not callable(method):
            raise InvalidHookError(
                f"{where}: {cls}.{event} is {type(method).__name__}, not callable; make it a "
                f"method (valid events: {', '.join(HOOK_EVENTS)})"
            )
        if getattr(type(hook), event, None) is getattr(BaseHook, event) and event not in vars(hook):
            continue  # BaseHook's no-op: nothing to call
        if event in ("on_load", "on_evict") and _takes_name_and_agent(method):
            method = _name_and_agent(method)
        calls[event] = method
    return RegisteredHook(hook, calls)


def check_hook(hook: Any, where: str = "hooks") -> Any:
    """Return ``hook`` if it is a valid hook instance, else raise a ``TypeError`` saying why."""
    register_hook(hook, where)
    return hook


def check_callable(func: Any, event: str) -> CallableHook:
    """Wrap ``func`` for ``on_predict_start=`` / ``on_predict_end=`` after checking it."""
    if isinstance(func, type) or not callable(func):
        raise InvalidHookError(
            f"{event}=: expected a function taking the PredictContext, got {func!r}; "
            f"hook objects go in hooks=[...]"
        )
    return CallableHook(event, func)
