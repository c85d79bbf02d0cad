"""Rich display helpers below the engines and the views: one card for every notebook display.

Engines (a routing ``Decision``, a Broker ``LLMResult``, a stream) and the widgets both draw
with these functions, so the package has one HTML renderer: a bordered card with inline styles
only (no script, no CDN), every piece of state or model text through :func:`escape` (an XSS
payload shows as text), long text clipped to its start and end around a note of how much is
left out, and a JSON payload under :data:`MIME` (``{"kind": ..., "data": ...}`` with plain JSON
values) for tests and notebook checks. Every table of the package is drawn by
:func:`table_html`. The result types do not live here: they sit with the engines that make them
and find their renderer through :mod:`jevlaya_lab._rendering`, where this module registers the
kinds it draws (``answers``, ``decision``, ``llm``) when it is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from jevlaya_lab._rendering import MIME, register_renderer

__all__ = ["MIME", "Html", "answer_rows", "answer_text", "type_text", "answers_bundle", "answers_html", "bars_html",
           "card", "gate_text", "model_label", "clip", "clipped_html", "decision_html", "escape",
           "jsonable", "llm_card", "llm_html", "stream_bundle", "stream_html", "stream_plain",
           "table_html"]

# Colours follow JupyterLab's theme (--jp-* variables, light and dark) with fallbacks for other
# front ends; text colours keep >= 4.5:1 contrast on the theme's background.
MUTED = "color:var(--jp-content-font-color2,#666)"
BLUE = "var(--jp-brand-color1,#1976d2)"
RED = "var(--jp-error-color1,#c62828)"
RED_TEXT = RED
TEAL = "#2a9d8f"
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


def card(inner: str) -> str:
    """Wrap rendered parts in the bordered card every rich display of the package uses."""
    return ("<div class='jevlaya' style='font-family:var(--jp-ui-font-family,sans-serif);"
            "color:var(--jp-content-font-color1,inherit);border:1px solid "
            "var(--jp-border-color2,rgba(128,128,128,.4));border-radius:4px;padding:.5em;"
            f"max-width:48em'>{inner}</div>")


def clip(text: str, limit: int) -> tuple[str, str, int]:
    """``(head, tail, left out)``: all of ``text`` in ``head`` when it fits in ``limit``."""
    if len(text) <= limit:
        return text, "", 0
    tail = limit // 4
    return text[:limit - tail], text[len(text) - tail:], len(text) - limit


def clipped_html(text: str, limit: int, *, empty: str = "(no text yet)") -> str:
    """``text`` escaped and clipped to ``limit`` characters (start … note … end)."""
    head, tail, cut = clip(text, limit)
    if not head:
        return f"<i style='{MUTED}'>{escape(empty)}</i>"
    if not cut:
        return escape(head)
    return (f"{escape(head)}<i style='{MUTED}'> … {cut} characters left out … </i>"
            f"{escape(tail)}")


class Html(str):
    """Text that is already HTML: :func:`table_html` puts it into its cell unescaped."""


def _cell(tag: str, value: Any, attributes: str) -> str:
    text = value if isinstance(value, Html) else escape(str(value))
    return f"<{tag}{attributes}>{text}</{tag}>"


def table_html(rows: Iterable[Sequence[Any]], *, head: Sequence[Any] | None = None,
               row_heads: bool = False, css_class: str | None = None, style: str | None = None,
               column_styles: Sequence[str | None] | None = None,
               numeric: Sequence[bool] | None = None) -> str:
    """The one HTML table builder: every cell escaped unless it is :class:`Html`.

    ``head``: column titles (then the rows go in ``<tbody>`` under a ``<thead>``); ``row_heads``:
    each row's first cell is a ``<th>`` (a key/value table); ``column_styles``: an inline style
    per column; ``numeric``: columns drawn right-aligned through the ``jv-n`` class.
    """
    def attributes(column: int) -> str:
        css = " class='jv-n'" if numeric is not None and numeric[column] else ""
        if column_styles is not None and column_styles[column]:
            css += f" style='{column_styles[column]}'"
        return css

    body = "".join(
        "<tr>" + "".join(_cell("th" if row_heads and i == 0 else "td", value, attributes(i))
                         for i, value in enumerate(row)) + "</tr>"
        for row in rows)
    opening = "<table" + (f" class='{escape(css_class)}'" if css_class else "") \
        + (f" style='{style}'" if style else "") + ">"
    if head is None:
        return f"{opening}{body}</table>"
    titles = "".join(_cell("th", title, attributes(i)) for i, title in enumerate(head))
    return f"{opening}<thead><tr>{titles}</tr></thead><tbody>{body}</tbody></table>"


_BAR_COLUMNS = ("padding:0 6px 0 0;text-align:left",
                "width:14em;min-width:14em;padding:0 6px 0 0;text-align:left;"
                "background:var(--jp-layout-color2,rgba(128,128,128,.15))",
                "padding:0 6px 0 0;text-align:right;font-variant-numeric:tabular-nums")


def bars_html(bars: Sequence[Mapping[str, Any]], color: str = BLUE) -> str:
    """A table of labelled probability bars (``{"label": ..., "p": 0..1}``)."""
    # the look of AnswersView's bars (widgets.css .jv-bars): label left, a 14em track filled from
    # the left, the number right; every cell says its alignment, because a notebook's rendered
    # HTML right-aligns table cells (which made these bars grow from the right edge)
    rows = []
    for bar in bars:
        p = max(0.0, min(1.0, float(bar["p"])))
        rows.append((bar["label"], Html(f"<span style='{_BAR.format(color=color, pct=p * 100)}'></span>"),
                     f"{p:.2f}"))
    return table_html(rows, css_class="jv-bars", style="border-collapse:collapse;margin:2px 0 4px 0",
                      column_styles=_BAR_COLUMNS)


# -- an Agent result -----------------------------------------------------------------------------
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
    (``"0–3"``) and its nearest ``level``; ``part`` is ``"open"`` for an answer of a checkpoint's
    open part, else None.
    """
    answers = result.get("answers") if isinstance(result, Mapping) else None
    if not isinstance(answers, Mapping):
        raise TypeError(f"result={clip(repr(result), 80)[0]}: expected an Agent result dict with an "
                        "'answers' mapping (agent.predict(...) or one item of predict_batch)")
    rows = []
    for qid, a in answers.items():
        kind = a.get("type")
        scale = level = None
        if kind == "noul":
            p_yes = float(a["noul"])
            words = a.get("labels") if isinstance(a.get("labels"), Mapping) else {}
            yes, no = str(words.get("true", "yes")), str(words.get("false", "no"))  # labels=... words
            bars = [{"label": yes, "p": p_yes}, {"label": no, "p": 1.0 - p_yes}]
            answer: Any = yes if p_yes >= 0.5 else no
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
            "part": a.get("part"),
        })
    return rows


def type_text(row: Mapping[str, Any]) -> str:
    """The question's type as shown, with the part of the checkpoint that answered it when that is
    its open part (``noul · open part``; :mod:`jevlaya_lab.decisions.open_questions`)."""
    return f"{row['type']} · {row['part']} part" if row.get("part") else str(row["type"])


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
        style = f"color:{RED_TEXT};font-weight:bold" if row["abstained"] else ""
        parts.append(
            f"<div style='margin:.3em 0'><b>{escape(row['question'])}</b> "
            f"<i>({escape(type_text(row))})</i>: {escape(answer_text(row))}{level} "
            f"<small style='{style}'>{escape(gate_text(row))}</small>"
            f"{bars_html(row['bars'], RED if row['abstained'] else BLUE)}</div>")
    model = result.get("model", "")
    return card(f"<div><small title='{escape(str(model))}'>model "
               f"{escape(model_label(model))}</small></div>{''.join(parts)}")


def answers_bundle(result: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook display of an Agent result (``AgentResult``): the answers card, the answers'
    JSON under :data:`MIME` and the plain dict as text."""
    data = jsonable({"model": result.get("model"), "rows": answer_rows(result)})
    return {"text/html": answers_html(result), MIME: {"kind": "answers", "data": data},
            "text/plain": repr(dict(result))}


# -- a routing decision --------------------------------------------------------------------------
def decision_html(decision: Mapping[str, Any]) -> str:
    """The card of a routing decision's summary (``decisions.routing_policy.decision_card``)."""
    scripts = ", ".join(f"{s['label']} {float(s['p']):.0%}" for s in decision["scripts"])
    return card(
        f"<div><strong>→ {escape(str(decision['model']))}</strong> <small>by rule "
        f"<code>{escape(str(decision['source']))}</code></small></div>"
        f"<div>{escape(str(decision['reason']))}</div>"
        f"<div><small>language: {escape(str(decision['language']))}"
        + (f" &middot; scripts: {escape(scripts)}" if scripts else "") + "</small></div>"
        f"{bars_html(decision['scripts'], TEAL)}")


# -- a Broker answer -----------------------------------------------------------------------------
def llm_card(result: Any) -> dict[str, Any]:
    """A Broker answer or a finished stream: model, ids, usage and text."""
    return {"llm_name": getattr(result, "llm_name", None),
            "call_id": getattr(result, "call_id", None),
            "trace_id": getattr(result, "trace_id", None),
            "usage": jsonable(getattr(result, "usage", None) or {}),
            "text": str(getattr(result, "text", ""))}


def llm_html(result: Any) -> str:
    data = llm_card(result)
    usage = ", ".join(f"{escape(k)}={escape(str(v))}" for k, v in data["usage"].items())
    call = f" &middot; call {escape(str(data['call_id'])[:8])}" if data["call_id"] else ""
    body = escape(data["text"]) or f"<i style='{MUTED}'>(tool calls only)</i>"
    return card(f"<div><b>{escape(str(data['llm_name']))}</b> <small>{usage}{call}</small></div>"
                f"<pre style='white-space:pre-wrap;word-break:normal;overflow-wrap:break-word;"
                f"margin:.3em 0'>{body}</pre>")


# -- a stream ------------------------------------------------------------------------------------
def _state_line(data: Mapping[str, Any]) -> str:
    if data["state"] == "open":
        return f"open, {data['deltas']} delta(s) read" if data["started"] else "open, not started"
    return f"{data['state']} after {data['deltas']} delta(s)"


def _marks(lane: Mapping[str, Any]) -> str:
    return ", ".join(mark for mark in ("shown", "winner") if lane[mark])


def _lane_line(lane: Mapping[str, Any]) -> str:
    marks = _marks(lane)
    return f"{lane['llm_name']} {lane['state']}" + (f" ({marks})" if marks else "")


def stream_plain(data: Mapping[str, Any], label: str, limit: int) -> str:
    """The plain-text display of a stream snapshot (``llm_name``, ``state``, ``text``,
    ``lanes``...)."""
    head, tail, cut = clip(data["text"], limit)
    text = repr(head) + (f" ... [{cut} characters] ... {tail!r}" if cut else "")
    lines = [f"<{label} {data['llm_name'] or '?'}: {_state_line(data)}>", f"text: {text}"]
    if data["lanes"]:
        lines.append("lanes: " + "; ".join(_lane_line(lane) for lane in data["lanes"]))
    return "\n".join(lines)


def stream_html(data: Mapping[str, Any], label: str, limit: int) -> str:
    lanes = table_html([(lane["llm_name"], lane["state"], _marks(lane)) for lane in data["lanes"]],
                       style="border-collapse:collapse;font-size:85%;margin-top:.3em",
                       column_styles=("padding:0 .6em 0 0", "padding:0 .6em 0 0", None)
                       ) if data["lanes"] else ""
    return card(f"<div><b>{escape(data['llm_name'] or 'no model yet')}</b> "
                f"<small>{escape(label)} &middot; {escape(_state_line(data))} &middot; "
                f"trace {escape(data['trace_id'][:8])}</small></div>"
                f"<div style='white-space:pre-wrap;margin:.3em 0'>"
                f"{clipped_html(data['text'], limit)}</div>{lanes}")


def stream_bundle(snapshot: Any, label: str, *, text_chars: int,
                  html_chars: int) -> dict[str, Any]:
    """A stream's notebook display from ``snapshot()``, a plain-data card (``llm_name``,
    ``state``, ``started``, ``deltas``, ``trace_id``, ``call_id``, ``text``, ``lanes``).

    Drawing never raises: a stream that cannot be described shows a one-line note saying why.
    ``snapshot`` is called here, inside that guard, so a stream read on another thread at the
    same moment shows too. Text longer than ``html_chars`` (plain text: ``text_chars``) shows
    as its start and its end around a note of how much is left out."""
    try:
        data = snapshot()
        return {"text/plain": stream_plain(data, label, text_chars),
                "text/html": stream_html(data, label, html_chars),
                MIME: {"kind": "stream", "data": jsonable(data)}}
    except Exception as exc:  # noqa: BLE001 - a display must never raise
        return {"text/plain": f"<{label}: cannot be displayed ({type(exc).__name__}: {exc})>"}


register_renderer("answers", answers_bundle)
register_renderer("decision", decision_html)
register_renderer("llm", llm_html)
register_renderer("stream", lambda call: stream_bundle(*call[0], **call[1]))
