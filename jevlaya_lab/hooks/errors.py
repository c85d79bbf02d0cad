"""Exceptions of the hook machinery; see :mod:`jevlaya_lab.errors` for the tree.

A hook's own failure is never wrapped: it propagates as raised, with a note naming the hook and
the event (see :mod:`jevlaya_lab.hooks.dispatch`).
"""

from __future__ import annotations

from jevlaya_lab.errors import JevlayaError

__all__ = ["InvalidHookError"]


class InvalidHookError(JevlayaError, TypeError):
    """Something given as a hook is not one (a class, a bare function, no event methods, ...)."""
