"""Rich reprs without a widget: self-contained HTML plus ``application/vnd.jevlaya+json``.

``mimebundle(obj)`` renders a routing ``Decision``, an Agent result (``{"answers": ...}``), a
list of those, a Broker answer (``LLMResult``) or a finished stream. The HTML has inline styles
only (no script, no CDN) and every piece of state or model text goes through
``html.escape``, so an XSS payload in a state or an answer shows as text. The JSON payload is
``{"kind": ..., "data": ...}`` with plain JSON values, for tests and notebook checks.

Engine owners hook it in with one line, e.g. on ``Decision``::

    def _repr_mimebundle_(self, include=None, exclude=None):
        from jevlaya_lab.widgets.render import mimebundle; return mimebundle(self)

Until then ``rich(obj)`` wraps any of these objects so a notebook cell displays it.
This module imports neither ipywidgets nor anywidget (it is cheap to import).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

MIME = "application/vnd.jevlaya+json"
_BAR = ("display:inline-block;height:0.8em;background:{color};width:{pct:.1f}%;"
        "vertical-align:middle")


def jsonable(value: Any) -> Any:
    """``value`` with only JSON types (NaN → None, tuples → lists, unknown → str)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy / torch scalars
        return jsonable(value.item())
    return str(value)


# -- normalised views (shared with the widgets) ---------------------------------------------
def answer_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per question of an Agent result: the answer, its confidence, abstention and
    the probability bars (label, p), whatever the question type."""
    answers = result.get("answers") if isinstance(result, Mapping) else None
    if not isinstance(answers, Mapping):
        raise TypeError(f"result={_short(result)}: expected an Agent result dict with an "
                        "'answers' mapping (agent.predict(...) or one item of predict_batch)")
    rows = []
    for qid, a in answers.items():
        kind = a.get("type")
        if kind == "noul":
            p_yes = float(a["noul"])
            bars = [{"label": "yes", "p": p_yes}, {"label": "no", "p": 1.0 - p_yes}]
            answer: Any = "yes" if p_yes >= 0.5 else "no"
        elif kind == "score":
            legend = a.get("legend") or {}
            bars = [{"label": f"{k}: {legend.get(k, '')}".rstrip(": "), "p": float(p)}
                    for k, p in a.get("probabilities", {}).items()]
            answer = a.get("score")
        else:
            bars = [{"label": str(k), "p": float(p)} for k, p in a.get("probabilities", {}).items()]
            answer = a.get("choice")
        rows.append({
            "question": str(qid), "type": kind, "answer": jsonable(answer), "bars": bars,
            "confidence": jsonable(a.get("answer_confidence", a.get("confidence"))),
            "abstained": a.get("abstention") == "abstained",
        })
    return rows


def decision_card(decision: Mapping[str, Any]) -> dict[str, Any]:
    """What the routing card shows: model, rule, reason, script bars and language guess."""
    if not isinstance(decision, Mapping) or "model" not in decision:
        raise TypeError(f"decision={_short(decision)}: expected a routing decision "
                        "(router.route(...)) with a 'model' key")
    found = decision.get("detection") or (decision.get("explain") or {}).get("detection") or {}
    profile = found.get("script_profile") or {}
    language = found.get("language")
    if language:
        from jevlaya_lab.decisions.detect import language_name

        language = f"{language_name(language)} ({language})"
    return {
        "model": str(decision["model"]), "source": str(decision.get("source", "")),
        "reason": str(decision.get("reason", "")), "workflow": decision.get("workflow"),
        "script": found.get("script"),
        "scripts": [{"label": str(k), "p": float(v)} for k, v in
                    sorted(profile.items(), key=lambda kv: -kv[1])],
        "language": language or "undecided",
        "evidence": found.get("evidence"),
    }


def llm_card(result: Any) -> dict[str, Any]:
    """A Broker answer or a finished stream: model, ids, usage and text."""
    return {"llm_name": getattr(result, "llm_name", None), "call_id": getattr(result, "call_id",
            None), "trace_id": getattr(result, "trace_id", None),
            "usage": jsonable(getattr(result, "usage", None) or {}),
            "text": str(getattr(result, "text", ""))}


# -- HTML --------------------------------------------------------------------------------------
def bars_html(bars: Sequence[Mapping[str, Any]], color: str = "#4c78a8") -> str:
    cells = []
    for bar in bars:
        p = max(0.0, min(1.0, float(bar["p"])))
        cells.append(
            f"<tr><td style='padding:0 .5em 0 0'>{escape(str(bar['label']))}</td>"
            f"<td style='width:12em'><span style='{_BAR.format(color=color, pct=p * 100)}'>"
            f"</span></td><td style='text-align:right'>{p:.2f}</td></tr>")
    return f"<table style='border-collapse:collapse;font-size:90%'>{''.join(cells)}</table>"


def answers_html(result: Mapping[str, Any]) -> str:
    parts = []
    for row in answer_rows(result):
        conf = row["confidence"]
        flag = " <b style='color:#b00'>abstained</b>" if row["abstained"] else ""
        parts.append(
            f"<div style='margin:.3em 0'><b>{escape(row['question'])}</b> "
            f"<i>({escape(str(row['type']))})</i>: {escape(str(row['answer']))} "
            f"<small>confidence {conf if conf is None else f'{conf:.2f}'}</small>{flag}"
            f"{bars_html(row['bars'], '#b22' if row['abstained'] else '#4c78a8')}</div>")
    model = escape(str(result.get("model", "")))
    return box(f"<div><small>model {model}</small></div>{''.join(parts)}")


def decision_html(decision: Mapping[str, Any]) -> str:
    card = decision_card(decision)
    return box(
        f"<div><b>→ {escape(card['model'])}</b> <small>by rule "
        f"<code>{escape(card['source'])}</code></small></div>"
        f"<div>{escape(card['reason'])}</div>"
        f"<div><small>language: {escape(card['language'])}</small></div>"
        f"{bars_html(card['scripts'], '#72b7b2')}")


def llm_html(result: Any) -> str:
    card = llm_card(result)
    usage = ", ".join(f"{escape(k)}={escape(str(v))}" for k, v in card["usage"].items())
    return box(f"<div><b>{escape(str(card['llm_name']))}</b> <small>{usage}</small></div>"
                f"<pre style='white-space:pre-wrap;margin:.3em 0'>{escape(card['text'])}</pre>")


def box(inner: str) -> str:
    """Wrap rendered parts in the bordered card every rich display of the package uses."""
    return ("<div class='jevlaya' style='font-family:sans-serif;border:1px solid #ddd;"
            f"border-radius:4px;padding:.5em;max-width:48em'>{inner}</div>")


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
