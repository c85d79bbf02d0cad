"""The result types of typed decisions, kept apart from how a notebook draws them.

``AgentResult`` (what ``Agent.predict`` returns) and ``Decision`` (what ``Router.route``
returns) are plain ``dict`` subclasses to code (``==``, JSON, pickling as for any dict). A
notebook displays them with the ``"answers"`` and ``"decision"`` renderers of
:mod:`jevlaya_lab.display`, looked up through :mod:`jevlaya_lab._rendering`, so no engine
imports the renderer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jevlaya_lab._rendering import render
from jevlaya_lab.decisions import detect as detection

__all__ = ["AgentResult", "Decision", "decision_card"]


class AgentResult(dict[str, Any]):
    """One state's answers: ``{"model", "answers", "usage"}``, displayed as the answers card."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = render("answers", self)
        return bundle


class Decision(dict[str, Any]):
    """A routing decision: a plain dict (JSON-ready) with attribute access to its main keys.

    Keys: ``model`` (canonical checkpoint name), ``source`` (which rule decided: ``model``,
    ``task``, ``workflow``, ``lang``, ``lang_guess``, ``detection`` or ``hook``), ``reason`` (a
    sentence for people), ``detection`` (the detector's findings, ``None`` when an earlier rule
    decided), ``workflow`` (the workflow whose question ids match, or ``None``) and ``repo``
    (where the checkpoint comes from, as in Laya); ``explain`` with ``explain=True``.
    """

    @property
    def repo(self) -> str | None:
        return self.get("repo")

    @property
    def model(self) -> str:
        return str(self["model"])

    @property
    def source(self) -> str:
        return str(self["source"])

    @property
    def reason(self) -> str:
        return str(self["reason"])

    @property
    def detection(self) -> dict[str, Any] | None:
        return self.get("detection")

    @property
    def workflow(self) -> str | None:
        return self.get("workflow")

    def _repr_html_(self) -> str:
        """Notebook view: the package's card (the ``"decision"`` renderer of
        :mod:`jevlaya_lab.display`) with the checkpoint, the rule that chose it, the reason, the
        language and the script mix."""
        html: str = render("decision", decision_card(self))
        return html


def decision_card(decision: Mapping[str, Any]) -> dict[str, Any]:
    """What a decision's card shows: model, rule, reason, script shares and language guess."""
    if not isinstance(decision, Mapping) or "model" not in decision:
        shown = repr(decision)
        raise TypeError(f"decision={shown if len(shown) <= 80 else shown[:77] + '...'}: "
                        "expected a routing decision (router.route(...)) with a 'model' key")
    found = decision.get("detection") or (decision.get("explain") or {}).get("detection") or {}
    profile = found.get("script_profile") or {}
    language = found.get("language")
    if language:
        language = f"{detection.language_name(language)} ({language})"
    return {
        "model": str(decision["model"]), "source": str(decision.get("source", "")),
        "reason": str(decision.get("reason", "")), "workflow": decision.get("workflow"),
        "script": found.get("script"),
        "scripts": [{"label": str(k), "p": float(v)} for k, v in
                    sorted(profile.items(), key=lambda kv: -kv[1])],
        "language": language or "undecided",
        "evidence": found.get("evidence"),
    }
