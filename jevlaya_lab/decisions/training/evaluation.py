"""Evaluate a decision Agent against gold answers: the hand-written sets and the synthetic split.

Hand-written sets are TSV files named ``<prefix><group>_<preset>.tsv`` (a ``#`` comment line, a
header, then one state per line). The header names gold columns after the preset's question ids plus
the state text as the last column, and optionally a ``split`` (dev/test) and a ``lang`` column; ``is_urgent``/``is_spam``/``is_safe``/``is_allowed`` are derived
from the other golds as each file's comment says, so they cannot disagree with them.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.training import metrics
from jevlaya_lab.decisions.training.synthetic import Example, gold_index

__all__ = ["GoldState", "evaluate_examples", "evaluate_gold_states", "load_gold_states"]

_DERIVED = {
    "triage": {"is_urgent": lambda g: g["priority"] >= 2},
    "email": {"is_spam": lambda g: g["category"] == "spam"},
    "guard": {"is_safe": lambda g: g["attack"] == "none"},
    "moderation": {"is_allowed": lambda g: g["category"] == "ok"},
    "router": {},
}


@dataclass(frozen=True)
class GoldState:
    """One hand-written state with its preset and gold answers (labels, levels or bools)."""

    preset: str
    state: dict[str, str]
    gold: dict[str, Any]
    split: str = ""
    lang: str = ""


def _parse(value: str, qtype: str) -> Any:
    if qtype == "score":
        return int(value)
    if qtype == "noul":
        if value not in {"true", "false"}:
            raise ValueError(f"noul gold {value!r} must be 'true' or 'false'")
        return value == "true"
    return value


def load_gold_states(directory: str | Path, group: str = "en", *, prefix: str = "eval_",
                     split: str | None = None) -> list[GoldState]:
    """All ``<prefix><group>_*.tsv`` states under ``directory`` (only ``split`` rows when given),
    checked against the presets."""
    out: list[GoldState] = []
    files = sorted(Path(directory).glob(f"{prefix}{group}_*.tsv"))
    if not files:
        raise FileNotFoundError(f"no {prefix}{group}_*.tsv files in {directory}")
    meta = ("split", "lang")
    for path in files:
        preset = path.stem[len(prefix) + len(group) + 1:]
        questions = presets.PRESETS[preset]()
        field = presets.STATE_FIELDS[preset]
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        for lineno, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise ValueError(f"{path}:{lineno}: {len(row)} columns, header has {len(header)}")
            info = {col: v for col, v in zip(header[:-1], row[:-1]) if col in meta}
            if split is not None and info.get("split") != split:
                continue
            gold = {col: _parse(v, questions[col]["type"]) for col, v in zip(header[:-1], row[:-1])
                    if col not in meta}
            for qid, derive in _DERIVED[preset].items():
                gold[qid] = derive(gold)
            for qid, value in gold.items():
                if questions[qid]["type"] == "choice" and value not in questions[qid]["criteria"]:
                    raise ValueError(f"{path}:{lineno}: {qid}={value!r} is not a label of the {preset} preset")
            out.append(GoldState(preset, {field: row[-1]}, gold, info.get("split", ""), info.get("lang", "")))
    return out


def _probs(answer: dict[str, Any]) -> list[float]:
    """Option probabilities in caller order from an Agent answer."""
    if answer["type"] == "noul":
        return [1.0 - answer["noul"], answer["noul"]]
    return list(answer["probabilities"].values())


def _gold_position(question: dict[str, Any], gold: Any) -> int:
    if question["type"] == "noul":
        return int(bool(gold))
    if question["type"] == "score":
        return int(gold)
    return list(question["criteria"]).index(gold)


def _report(rows: dict[str, tuple[str, list, list]], *, ece_reference: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"questions": per question, "types": pooled per question type}``; with ``ece_reference``,
    each question also gets ``ece_if_calibrated`` (:func:`metrics.calibrated_ece`)."""
    pooled: dict[str, tuple[str, list, list]] = {}
    for qtype, probs, golds in rows.values():
        _, all_probs, all_golds = pooled.setdefault(qtype, (qtype, [], []))
        all_probs.extend(probs)
        all_golds.extend(golds)
    return {
        "questions": {key: {"type": qtype, **metrics.summarize(qtype, probs, golds),
                            **({"ece_if_calibrated": round(metrics.calibrated_ece(probs), 4)} if ece_reference else {})}
                      for key, (qtype, probs, golds) in sorted(rows.items())},
        "types": {qtype: metrics.summarize(qtype, probs, golds) for qtype, (_, probs, golds) in pooled.items()},
    }


def evaluate_gold_states(agent: Any, states: Sequence[GoldState], *, batch_size: int = 16) -> dict[str, dict[str, dict[str, Any]]]:
    """Per ``<preset>.<question>`` and per type: n, accuracy, ece (+ mae for scores) of ``agent`` on
    ``states``; per question also the ECE a perfectly calibrated model would show on as few states."""
    rows: dict[str, tuple[str, list, list]] = {}
    for preset in dict.fromkeys(s.preset for s in states):
        group = [s for s in states if s.preset == preset]
        questions = presets.PRESETS[preset]()
        results = agent.predict_batch([s.state for s in group], questions, batch_size=batch_size)
        for s, result in zip(group, results):
            for qid, gold in s.gold.items():
                qtype, probs, golds = rows.setdefault(f"{preset}.{qid}", (questions[qid]["type"], [], []))
                probs.append(_probs(result["answers"][qid]))
                golds.append(_gold_position(questions[qid], gold))
    return _report(rows, ece_reference=True)


def evaluate_examples(agent: Any, examples: Iterable[Example]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per synthetic task: the same metrics on generated (state, question) pairs."""
    groups: dict[str, list[Example]] = {}
    for ex in examples:  # examples sharing a question definition go through one predict_batch
        # no sort_keys: criteria in another order are another question (gold indices follow the order)
        groups.setdefault(json.dumps(ex.question, ensure_ascii=False), []).append(ex)
    rows: dict[str, tuple[str, list, list]] = {}
    for group in groups.values():
        question = group[0].question
        results = agent.predict_batch([ex.state for ex in group], {"q": question})
        for ex, result in zip(group, results):
            qtype, probs, golds = rows.setdefault(ex.task, (question["type"], [], []))
            probs.append(_probs(result["answers"]["q"]))
            golds.append(gold_index(ex))
    return _report(rows)


def sample(examples: Sequence[Example], n: int, seed: int = 0) -> list[Example]:
    """A seeded subset, for quick reports."""
    return random.Random(seed).sample(list(examples), min(n, len(examples)))
