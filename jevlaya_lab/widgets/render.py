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
import re
from collections.abc import Mapping
from typing import Any

from jevlaya_lab import display
from jevlaya_lab.decisions.routing import decision_card
from jevlaya_lab.display import MIME, bars_html, escape, jsonable, llm_card, llm_html
from jevlaya_lab.display import card as box

__all__ = ["MIME", "answer_rows", "answer_text", "answers_html", "gate_text", "model_label", "bars_html", "box", "decision_card",
           "decision_html", "escape", "jsonable", "kind_of", "llm_card", "llm_html",
           "mimebundle", "rich"]


# -- normalised views (shared with the widgets) ---------------------------------------------
def model_label(model: Any) -> str:
    """A checkpoint's short name: ``mini-en`` for ``~/.cache/.../checkpoints/mini-en-c8a3b4947be6``
    (the folder name without its content hash); other names unchanged."""
    text = str(model or "")
    if "/" in text or "\\" in text:
        text = re.split(r"[/\\]", text.rstrip("/\\"))[-1]
        text = re.sub(r"-[0-9a-f]{12}$", "", text)
    return text


def answer_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per question of an Agent result: the answer, the value that decided the
    abstention and its threshold, and the probability bars (label, p).

    ``confidence`` is the value ``min_confidence`` compared, ``gated_by`` names it
    (``answer_confidence``, the answer's top probability, or ``confidence`` for answers without
    one, as :func:`jevlaya_lab.decisions.calibration.apply_min_confidence` gates) and
    ``threshold`` is the answer's ``abstention_threshold`` (``None`` when not gated), so a view
    never shows one number while another decided. A score also carries its ``scale``
    (``"0–3"``) and its nearest ``level``.
    """
    answers = result.get("answers") if isinstance(result, Mapping) else None
    if not isinstance(answers, Mapping):
        raise TypeError(f"result={_short(result)}: expected an Agent result dict with an "
                        "'answers' mapping (agent.predict(...) or one item of predict_batch)")
    rows = []
    for qid, a in answers.items():
        kind = a.get("type")
        scale = level = None
        if kind == "noul":
            p_yes = float(a["noul"])
            bars = [{"label": "yes", "p": p_yes}, {"label": "no", "p": 1.0 - p_yes}]
            answer: Any = "yes" if p_yes >= 0.5 else "no"
        elif kind == "score":
            legend = a.get("legend") or {}
            probs = a.get("probabilities", {})
            bars = [{"label": f"{k}: {legend.get(k, '')}".rstrip(": "), "p": float(p)}
                    for k, p in probs.items()]
            answer = a.get("score")
            keys = [int(k) for k in probs] or [0]
            scale = f"{min(keys)}–{max(keys)}"
            if answer is not None:
                nearest = str(min(keys, key=lambda k: abs(k - float(answer))))
                level = f"{nearest}: {legend.get(nearest, '')}".rstrip(": ")
        else:
            bars = [{"label": str(k), "p": float(p)} for k, p in a.get("probabilities", {}).items()]
            answer = a.get("choice")
        gated_by = "answer_confidence" if "answer_confidence" in a else "confidence"
        rows.append({
            "question": str(qid), "type": kind, "answer": jsonable(answer), "bars": bars,
            "scale": scale, "level": level, "gated_by": gated_by,
            "confidence": jsonable(a.get(gated_by)),
            "threshold": jsonable(a.get("abstention_threshold")),
            "abstained": a.get("abstention") == "abstained",
        })
    return rows


def answer_text(row: Mapping[str, Any]) -> str:
    """The answer as a person reads it: a score with its scale (``0.62 on 0–3``)."""
    value = row["answer"]
    if row.get("scale") is not None and isinstance(value, (int, float)):
        return f"{value:.2f} on {row['scale']}"
    return str(value)


def gate_text(row: Mapping[str, Any]) -> str:
    """``answer_confidence 0.39 < 0.6 → abstained``: the value that decided, against its
    threshold (just the value when nothing was gated: no threshold, or 0)."""
    value, limit = row["confidence"], row["threshold"]
    shown = "–" if value is None else f"{value:.2f}"
    if not limit and not row["abstained"]:
        return f"{row['gated_by']} {shown}"
    verdict = "abstained" if row["abstained"] else "passed"
    sign = "<" if row["abstained"] else "≥"
    return f"{row['gated_by']} {shown} {sign} {limit:g} → {verdict}"


# -- HTML --------------------------------------------------------------------------------------
def answers_html(result: Mapping[str, Any]) -> str:
    parts = []
    for row in answer_rows(result):
        level = "" if row["level"] is None else f" ({escape(row['level'])})"
        style = f"color:{display.RED_TEXT};font-weight:bold" if row["abstained"] else ""
        parts.append(
            f"<div style='margin:.3em 0'><b>{escape(row['question'])}</b> "
            f"<i>({escape(str(row['type']))})</i>: {escape(answer_text(row))}{level} "
            f"<small style='{style}'>{escape(gate_text(row))}</small>"
            f"{bars_html(row['bars'], display.RED if row['abstained'] else display.BLUE)}</div>")
    model = result.get("model", "")
    return box(f"<div><small title='{escape(str(model))}'>model "
               f"{escape(model_label(model))}</small></div>{''.join(parts)}")


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
