"""``HookOptions``: the hook settings of an Agent, a Router or one of their calls, as one value.

Five keywords set the hooks of a call (``hooks``, ``on_predict_start``, ``on_predict_end``,
``hooks_raise``, ``hooks_timeout``) and a sixth, ``hooks_concurrent``, only the installed hooks.
They are spelled out once, here: a predict method takes ``hook_options=HookOptions(...)`` or the
same names as keywords (:class:`HookKeywords`, what Laya's callers write), and
:meth:`HookOptions.of_call` turns either into one checked value that travels down the call.
Giving one setting both ways is a ``TypeError``: silently preferring one would hide a mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from .context import PredictContext

HookEvent = Literal["on_route", "on_load", "on_evict", "on_predict_start", "on_predict_end", "on_error"]
"""The name of a hook event; every event's one argument is a :class:`~.context.PredictContext`."""

EventHandler = Callable[["PredictContext"], Any]
"""A plain function for ``on_predict_start=`` / ``on_predict_end=`` (it may return an awaitable)."""


class HookKeywords(TypedDict, total=False):
    """The per-call hook keywords a predict method accepts besides ``hook_options``."""

    hooks: Sequence[Any] | None
    on_predict_start: EventHandler | None
    on_predict_end: EventHandler | None
    hooks_raise: bool | None
    hooks_timeout: float | None


class HookSettings(HookKeywords, total=False):
    """The hook keywords of an Agent's or Router's installed hooks: the per-call ones and
    ``hooks_concurrent``."""

    hooks_concurrent: bool | None


@dataclass(frozen=True)
class HookOptions:
    """Which hooks run and how their failures and run time are handled.

    ``hooks``: hook instances, after the installed ones (per call) or as the installed ones;
    ``on_predict_start`` / ``on_predict_end``: plain functions, run after ``hooks``;
    ``hooks_raise``: a failing hook raises (``True``) or warns (``False``); ``None`` per call
    keeps the Agent's or Router's setting; ``hooks_timeout``: seconds each hook invocation may
    take (``None``: no limit, or per call the installed setting); ``hooks_concurrent``: installed
    hooks only: ``False`` runs one hook invocation at a time.
    """

    hooks: Iterable[Any] | None = None
    on_predict_start: EventHandler | None = None
    on_predict_end: EventHandler | None = None
    hooks_raise: bool | None = None
    hooks_timeout: float | None = None
    hooks_concurrent: bool | None = None

    @classmethod
    def of_call(cls, options: HookOptions | None, keywords: Mapping[str, Any], where: str) -> HookOptions:
        """The options of one call from ``hook_options=`` and/or the separate keywords."""
        if not keywords and (options is None or (type(options) is HookOptions and options.hooks_concurrent is None)):
            return _NONE if options is None else options  # the common call: nothing to merge or check
        unknown = sorted(set(keywords) - _KEYWORDS)
        if unknown:
            raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}; the hook "
                            f"keywords are {', '.join(HookKeywords.__annotations__)}")
        if options is None:
            return cls(**keywords)
        if not isinstance(options, HookOptions):
            raise TypeError(f"{where}: hook_options must be a HookOptions, got {type(options).__name__}")
        if options.hooks_concurrent is not None:
            raise TypeError(f"{where}: hooks_concurrent applies to the installed hooks only; pass it to "
                            "the Agent or Router constructor")
        twice = sorted(name for name, value in keywords.items()
                       if value is not None and getattr(options, name) is not None)
        if twice:
            raise TypeError(f"{where}: {', '.join(twice)} given both in hook_options and as keywords; "
                            "pass each setting once")
        return replace(options, **{k: v for k, v in keywords.items() if v is not None})

    def followed_by(self, *hooks: Any) -> HookOptions:
        """These options with ``hooks`` running after every hook they name (the two plain
        functions included), e.g. an observer that must see what the caller's start hooks did."""
        from .base import CallableHook

        chain = list(self.hooks or [])
        chain += [CallableHook(event, func) for event, func in (("on_predict_start", self.on_predict_start),
                                                                 ("on_predict_end", self.on_predict_end))
                  if func is not None]
        return replace(self, hooks=[*chain, *hooks], on_predict_start=None, on_predict_end=None)

    def as_keywords(self) -> dict[str, Any]:
        """The settings that differ from the defaults, as keywords."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


_NONE = HookOptions()
_KEYWORDS = frozenset(HookKeywords.__annotations__)
