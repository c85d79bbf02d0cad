"""Hooks: observe and steer every predict call of an Agent or Router.

``PredictContext`` travels through one call; ``BaseHook`` lists the events as no-ops;
``HookRunner`` holds installed hooks and applies the ordering and failure rules of the
lifecycle page. Ready-made hooks live in the modules beside this one (``recorder``,
``cache``, ``redaction``, ``audit``).
"""

from .base import HOOK_EVENTS, BaseHook, CallableHook, check_hook
from .context import PredictContext, aggregate_usage
from .dispatch import HookRunner

__all__ = [
    "HOOK_EVENTS",
    "BaseHook",
    "CallableHook",
    "HookRunner",
    "PredictContext",
    "aggregate_usage",
    "check_hook",
]
