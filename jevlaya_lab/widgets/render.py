"""Rich reprs without a widget: self-contained HTML plus ``application/vnd.jevlaya+json``.

``mimebundle(obj)`` renders a routing ``Decision``, an Agent result (``{"answers": ...}``), a
list of those, a Broker answer (``LLMResult``) or a finished stream. The HTML has inline styles
only (no script, no CDN) and every piece of state or model text goes through
``html.escape``, so an XSS payload in a state or an answer shows as text. The JSON payload is
``{"kind": ..., "data": ...}`` with plain JSON values, for tests and notebook checks.

The card, escaping, clipping and the JSON payload come from :mod:`jevlaya_lab.display`, which
the engines use for their own notebook displays too (one renderer for the whole package); the
names ``MIME``, ``escape``, ``box``, ``jsonable``, ``bars_html``, ``llm_card`` and ``llm_html``
stay importable from here. ``rich(obj)`` wraps any of these objects so a notebook cell displays
it. This module imports neither ipywidgets nor anywidget (it is cheap to import).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jevlaya_lab import display
from jevlaya_lab.decisions.routing_policy import decision_card
from jevlaya_lab.display import (
    MIME,
    answer_rows,
    answer_text,
    answers_html,
    bars_html,
    escape,
    gate_text,
    jsonable,
    llm_card,
    llm_html,
    model_label,
)
from jevlaya_lab.display import card as box

__all__ = ["MIME", "answer_rows", "answer_text", "answers_html", "gate_text", "model_label", "bars_html", "box",
           "decision_card", "decision_html", "escape", "jsonable", "kind_of", "llm_card", "llm_html",
           "mimebundle", "rich"]


def decision_html(decision: Mapping[str, Any]) -> str:
    return display.decision_html(decision_card(decision))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- bundles -----------------------------------------------------------------------------------
def kind_of(obj: Any) -> str:
    if isinstance(obj, Mapping) and "answers" in obj:
        return "answers"
    if isinstance(obj, Mapping) and "model" in obj and "reason" in obj:
        return "decision"
    if isinstance(obj, (list, tuple)) and obj and all(kind_of(o) == kind_of(obj[0]) for o in obj):
        return f"{kind_of(obj[0])}_list"
    if hasattr(obj, "llm_name") and hasattr(obj, "text"):
        return "llm_result"
    raise TypeError(f"obj={_short(obj)}: no renderer; pass a routing Decision, an Agent result, "
                    "a list of either, a Broker answer or a finished stream")


def mimebundle(obj: Any) -> dict[str, Any]:
    """``{"text/html", "application/vnd.jevlaya+json", "text/plain"}`` for ``obj``."""
    kind = kind_of(obj)
    base = kind.removesuffix("_list")
    html_of = {"answers": answers_html, "decision": decision_html, "llm_result": llm_html}[base]
    data_of = {"answers": lambda o: {"model": o.get("model"), "rows": answer_rows(o)},
               "decision": decision_card, "llm_result": llm_card}[base]
    items = list(obj) if kind.endswith("_list") else [obj]
    data = [jsonable(data_of(o)) for o in items]
    payload = {"kind": kind, "data": data if kind.endswith("_list") else data[0]}
    return {"text/html": "".join(html_of(o) for o in items), MIME: payload,
            "text/plain": json.dumps(payload["data"], ensure_ascii=False)[:2000]}


class rich:  # noqa: N801 - reads as a function in notebooks: rich(decision)
    """Wrap an object so Jupyter displays it with :func:`mimebundle`."""

    def __init__(self, obj: Any) -> None:
        kind_of(obj)  # fail now, not at display time
        self.obj = obj

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return mimebundle(self.obj)

    def data(self) -> Any:
        """The JSON payload's ``data`` (what notebook checks read)."""
        return mimebundle(self.obj)[MIME]["data"]
