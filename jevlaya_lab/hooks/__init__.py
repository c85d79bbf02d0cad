"""Hooks: observe and steer every predict call of an Agent or Router.

``PredictContext`` travels through one call; ``BaseHook`` lists the events as no-ops;
``HookOptions`` holds the hook settings of an Agent, a Router or one call; ``HookRunner`` holds
installed hooks and ``CallHooks.lifecycle`` runs the one predict lifecycle (its order and failure
rules are in :mod:`jevlaya_lab.hooks.dispatch`). Ready-made hooks live in the modules beside this one (``recorder``,
``cache``, ``redaction``, ``audit``); ``errors`` holds ``InvalidHookError``.
"""

from jevlaya_lab._lazy import lazy_attributes

from .base import HOOK_EVENTS, BaseHook, CallableHook, RegisteredHook, check_hook, register_hook
from .context import PredictContext, aggregate_usage
from .dispatch import CallHooks, HookHost, HookRunner, check_timeout
from .errors import InvalidHookError
from .options import HookEvent, HookKeywords, HookOptions

_READY_MADE = {
    "EventRecorder": "jevlaya_lab.hooks.recorder",
    "PredictionCache": "jevlaya_lab.hooks.cache",
    "RedactionHook": "jevlaya_lab.hooks.redaction",
    "AuditHook": "jevlaya_lab.hooks.audit",
}


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _READY_MADE)

__all__ = [
    "HOOK_EVENTS",
    "AuditHook",
    "BaseHook",
    "CallableHook",
    "CallHooks",
    "EventRecorder",
    "HookEvent",
    "HookHost",
    "HookKeywords",
    "HookOptions",
    "HookRunner",
    "InvalidHookError",
    "PredictContext",
    "PredictionCache",
    "RedactionHook",
    "RegisteredHook",
    "aggregate_usage",
    "check_hook",
    "check_timeout",
    "register_hook",
]
