"""Compact tables for what would otherwise print as a long dump: a list of Agent results
(``predict_batch``: one row per state) and a Broker pool snapshot (one row per model), each with
a one-line text form. Drawn with :mod:`jevlaya_lab.display`'s card and helpers; registered as
the ``"results"`` and ``"snapshot"`` renderers of :mod:`jevlaya_lab._rendering` when imported
(``jevlaya_lab/__init__.py`` imports it beside ``display``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jevlaya_lab._rendering import register_renderer
from jevlaya_lab.display import MIME, MUTED, RED_TEXT, answer_rows, answer_text, card, escape, jsonable, model_label

__all__ = ["results_bundle", "results_html", "results_summary", "snapshot_bundle", "snapshot_html",
           "snapshot_summary"]

TABLE_ROWS = 50  # rows a table shows before saying how many it left out
_TD = "padding:.1em .6em;text-align:left;border-bottom:1px solid var(--jp-border-color2,rgba(128,128,128,.3))"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], total: int) -> str:
    """An HTML table of already escaped cells, with a note when rows were left out."""
    th = "".join(f"<th style='{_TD}'>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='{_TD}'>{c}</td>" for c in row) + "</tr>" for row in rows)
    more = (f"<div style='{MUTED}'>… {total - len(rows)} more row(s) not shown</div>"
            if total > len(rows) else "")
    return (f"<table style='border-collapse:collapse;font-size:90%'><thead><tr>{th}</tr></thead>"
            f"<tbody>{body}</tbody></table>{more}")


def _answer_cell(row: Mapping[str, Any]) -> str:
    value = escape(answer_text(row))
    conf = "" if row["confidence"] is None else f" <small style='{MUTED}'>{row['confidence']:.2f}</small>"
    if row["abstained"]:
        return f"<span style='color:{RED_TEXT}'>{value} (abstained)</span>{conf}"
    return value + conf


def results_summary(results: Sequence[Mapping[str, Any]]) -> str:
    """``3 results from mini-en: intent refund ×2, shipping ×1; 1 abstained``: a list in one line."""
    models = sorted({model_label(r.get("model")) for r in results if isinstance(r, Mapping)})
    counts: dict[str, dict[str, int]] = {}
    abstained = 0
    for result in results:
        if not isinstance(result, Mapping) or not isinstance(result.get("answers"), Mapping):
            continue
        for row in answer_rows(result):
            values = counts.setdefault(row["question"], {})
            values[answer_text(row)] = values.get(answer_text(row), 0) + 1
            abstained += bool(row["abstained"])
    parts = []
    for question, values in list(counts.items())[:4]:
        top = sorted(values.items(), key=lambda kv: -kv[1])[:3]
        parts.append(f"{question} " + ", ".join(f"{v} ×{n}" for v, n in top)
                     + (", …" if len(values) > 3 else ""))
    head = f"{len(results)} result(s) from {', '.join(models) or '?'}"
    return head + (": " + "; ".join(parts) if parts else "") + (f"; {abstained} abstained" if abstained else "")


def results_html(results: Sequence[Mapping[str, Any]]) -> str:
    """One row per state: its checkpoint and each question's answer (abstentions in red)."""
    shown = [r for r in results[:TABLE_ROWS]]
    questions: list[str] = []
    for result in shown:
        for question in (result.get("answers") or {}) if isinstance(result, Mapping) else ():
            if question not in questions:
                questions.append(str(question))
    rows = []
    for i, result in enumerate(shown):
        answers = {row["question"]: row for row in answer_rows(result)} if isinstance(
            result, Mapping) and isinstance(result.get("answers"), Mapping) else {}
        rows.append([str(i), escape(model_label(result.get("model") if isinstance(result, Mapping) else ""))]
                    + [_answer_cell(answers[q]) if q in answers else "" for q in questions])
    return card(f"<div><small style='{MUTED}'>{escape(results_summary(results))}</small></div>"
                + _table(["#", "model", *questions], rows, len(results)))


def snapshot_summary(models: Mapping[str, Mapping[str, Any]], usable: Sequence[str],
                     journal: Mapping[str, Any]) -> str:
    """``1 of 10 models usable (local/smollm2); journal: 3 written, 0 waiting, 0 failed``."""
    names = ", ".join(list(usable)[:4]) + (", …" if len(usable) > 4 else "")
    health = f"{len(usable)} of {len(models)} models usable" + (f" ({names})" if usable else " (degraded)")
    counters = ", ".join(f"{journal[k]} {k}" for k in ("written", "waiting", "failed") if k in journal)
    return health + (f"; journal: {counters}" if counters else "")


def snapshot_html(models: Mapping[str, Mapping[str, Any]], usable: Sequence[str],
                  journal: Mapping[str, Any]) -> str:
    """One row per model: phase, in the pool, key, slots in use, cooldown, failures in a row."""
    rows = []
    for name, row in list(models.items())[:TABLE_ROWS]:
        phase = escape(str(row.get("phase")))
        if name in usable:
            phase = f"<b>{phase}</b>"
        elif row.get("phase") != "available":
            phase = f"<span style='{MUTED}'>{phase}</span>"
        until = row.get("cooldown_until")
        rows.append([escape(name), phase, "yes" if row.get("in_pool") else "no",
                     escape(str(row.get("key"))), f"{row.get('in_flight', 0)}/{row.get('parallel', '')}",
                     escape(str(until)[11:19]) if until else "", str(row.get("consecutive_failures", 0))])
    return card(f"<div><small style='{MUTED}'>{escape(snapshot_summary(models, usable, journal))}</small></div>"
                + _table(["model", "phase", "in pool", "key", "in flight", "cooling until", "failures"],
                         rows, len(models)))


def results_bundle(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A list of Agent results' notebook display: the table, one line of text, the rows' JSON."""
    rows = [jsonable({"model": r.get("model"), "rows": answer_rows(r)}) for r in results
            if isinstance(r, Mapping) and isinstance(r.get("answers"), Mapping)]
    return {"text/html": results_html(results), "text/plain": f"<{results_summary(results)}>",
            MIME: {"kind": "results", "data": rows}}


def snapshot_bundle(models: Mapping[str, Mapping[str, Any]], usable: Sequence[str],
                    journal: Mapping[str, Any]) -> dict[str, Any]:
    """A pool snapshot's notebook display: one table row per model and a one-line summary."""
    return {"text/html": snapshot_html(models, usable, journal),
            "text/plain": f"<PoolSnapshot: {snapshot_summary(models, usable, journal)}>",
            MIME: {"kind": "snapshot", "data": jsonable(
                {"models": dict(models), "usable": list(usable), "journal": dict(journal)})}}



register_renderer("results", results_bundle)
register_renderer("snapshot", lambda snap: snapshot_bundle(snap, snap.usable, snap.journal))
