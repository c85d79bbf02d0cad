"""``RoutingView``: which checkpoint the Router picks for a state, why, and what would change it.

Type or paste a state into the box (the ``state_text`` trait; text that parses as a JSON object
is routed as that object) and the card shows the chosen checkpoint, the rule that decided, the
reason sentence, the script-profile bars and the language guess, plus ``alternatives``: what an
explicit ``lang=...`` or ``model=...`` would route to. Pass ``states=`` (a list or a pandas
Series/column) for batch mode: one row per state in ``batch`` and routes per checkpoint in
``counts``, drawn as bars and a table with a header row (the input box is hidden until a single
state is given). Routing never loads a model, so the view is instant even for big checkpoints.
Bad input (e.g. an unknown ``lang``) is shown in ``error`` instead of raising in the callback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import anywidget
import traitlets

from jevlaya_lab.widgets.answers import state_preview
from jevlaya_lab.widgets.assets import css, esm
from jevlaya_lab.widgets.render import decision_card, jsonable

ALTERNATIVE_LANGS = ("en", "de", "ru", "ja")


def parse_state(text: str) -> Any:
    """The state a pasted text stands for: a JSON object when it is one, else the text."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(value, dict):
            return value
    return text


class RoutingView(anywidget.AnyWidget):
    """``RoutingView(router, state="...")`` or ``RoutingView(router, states=df["text"])``."""

    _esm = esm("routing_view")
    _css = css()
    state_text = traitlets.Unicode("").tag(sync=True)
    decision = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)
    alternatives = traitlets.List().tag(sync=True)
    batch = traitlets.List().tag(sync=True)
    counts = traitlets.Dict().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, router: Any, state: Any = None, *, states: Iterable[Any] | None = None,
                 **kwargs: Any) -> None:
        if not callable(getattr(router, "route", None)):
            raise TypeError(f"router={type(router).__name__}: expected a jevlaya_lab Router "
                            "(Router(...) or Router.laya())")
        super().__init__(**kwargs)
        self.router = router
        if states is not None:
            self.route_many(states)
        if state is not None:
            self.state_text = state if isinstance(state, str) else json.dumps(
                jsonable(state), ensure_ascii=False)

    @traitlets.observe("state_text")
    def _on_text(self, change: dict[str, Any]) -> None:
        self.route(parse_state(change["new"]))

    def route(self, state: Any) -> dict[str, Any] | None:
        """Route one state and show it; returns the card (``None`` for an empty state)."""
        if isinstance(state, str) and not state.strip():
            self.decision, self.alternatives, self.error = None, [], ""
            return None
        try:
            decision = self.router.route(state, explain=True)
            alternatives = [self._alternative(state, f"lang={lang!r}", lang=lang)
                            for lang in ALTERNATIVE_LANGS]
            alternatives += [self._alternative(state, f"model={name!r}", model=name)
                             for name in self.router.registered if name != decision["model"]]
        except (TypeError, ValueError, KeyError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return None
        card = jsonable({**decision_card(decision),
                         "steps": (decision.get("explain") or {}).get("steps", [])})
        self.decision, self.alternatives, self.error = card, alternatives, ""
        return card

    def _alternative(self, state: Any, given: str, **how: Any) -> dict[str, Any]:
        d = self.router.route(state, **how)
        return {"given": given, "model": d["model"], "source": d["source"], "reason": d["reason"]}

    def route_many(self, states: Iterable[Any]) -> list[dict[str, Any]]:
        """Batch mode: route every state (a list, tuple or pandas Series)."""
        items = list(states.tolist() if hasattr(states, "tolist") else states)
        decisions = self.router.route_batch([{"state": s} for s in items])
        rows = [{"i": i, "state": state_preview(s, 120), "model": d["model"],
                 "source": d["source"], "reason": d["reason"]}
                for i, (s, d) in enumerate(zip(items, decisions))]
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["model"]] = counts.get(row["model"], 0) + 1
        self.batch, self.counts = rows, counts
        return rows

    def __repr__(self) -> str:
        d = self.decision
        shown = f"→ {d['model']} by {d['source']}: {d['reason']}" if d else "no state"
        batch = f"; batch {self.counts}" if self.batch else ""
        return f"RoutingView({shown}{batch})"
