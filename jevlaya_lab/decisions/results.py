"""``AgentResult``: what ``Agent.predict`` returns, kept apart from how a notebook draws it.

It is a plain ``dict`` to code (``==``, JSON, pickling as for any dict); a notebook displays it
as the answers card with the answers' JSON under ``application/vnd.jevlaya+json``, drawn by the
``"answers"`` renderer of :mod:`jevlaya_lab.display` (looked up through
:mod:`jevlaya_lab._rendering`, so the engines never import the renderer).
"""

from __future__ import annotations

from typing import Any

from jevlaya_lab._rendering import render

__all__ = ["AgentResult"]


class AgentResult(dict[str, Any]):
    """One state's answers: ``{"model", "answers", "usage"}``, displayed as the answers card."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = render("answers", self)
        return bundle
