"""Hand-written labelled states for the presets, as training rows (``data/written/*.json``).

The phrase banks of :mod:`.synthetic` compose states from templates ("<request>. <mood>. <urgency
phrase>"), so a model trained only on them learns that urgency is a phrase at the end. These files
hold whole messages written one by one for training: urgency carried by consequences
(an outage, payroll due tomorrow, a locked account before a deadline), indirect requests, threads,
typos, many industries and voices; the multilingual file is written natively in 13 languages.
They were written without reading the hand-written evaluation states (``tests/data/fresh``) or
the public datasets, and ``tests/decisions/test_fresh_states.py`` checks they share no 5-word run
with the evaluation states.

A file is named ``<group>_<preset>[_<batch>].json`` (group ``en`` or ``multi``; preset one of
:data:`jevlaya_lab.decisions.presets.PRESETS`) and holds a list of objects: the preset's state
field (``message``, ``email``, ``user_input``, ``text`` or ``request``), ``lang`` for ``multi``,
and the preset's gold labels (choices by label, scores by level index, yes/no as booleans; derived
yes/no answers such as ``is_urgent`` = priority >= 2 follow :data:`DERIVED`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.training import bank
from jevlaya_lab.decisions.training.synthetic import Example, preset_rows, wrap_state

__all__ = ["DERIVED", "GROUPS", "WrittenState", "is_alias_text", "load_written", "written_examples"]

DATA = Path(__file__).with_name("data") / "written"
GROUPS = ("en", "multi")

# per preset, the gold answer of each question from one record
DERIVED: dict[str, dict[str, Callable[[dict[str, Any]], Any]]] = {
    "triage": {"intent": lambda r: r["intent"], "sentiment": lambda r: r["sentiment"],
               "is_urgent": lambda r: r["priority"] >= 2, "priority": lambda r: r["priority"]},
    "email": {"category": lambda r: r["category"], "needs_reply": lambda r: r["needs_reply"],
              "is_spam": lambda r: r["category"] == "spam"},
    "guard": {"attack": lambda r: r["attack"], "is_safe": lambda r: r["attack"] == "none"},
    "moderation": {"category": lambda r: r["category"], "toxicity": lambda r: r["toxicity"],
                   "is_allowed": lambda r: r["category"] == "ok"},
    "router": {"route": lambda r: r["route"], "complexity": lambda r: r["complexity"],
               "needs_tools": lambda r: r["needs_tools"]},
}


class WrittenState(NamedTuple):
    """One hand-written record: its group (``en``/``multi``), preset, text, gold answers and writer
    batch (the file name's ``_<batch>`` suffix, ``a`` without one): each batch was written by a
    different writer, so holding one out whole measures how the training carries to another
    writer's wording."""

    group: str
    preset: str
    text: str
    golds: dict[str, Any]
    batch: str = "a"


def _check(where: str, group: str, preset: str, batch: str, questions: dict[str, Any], record: Any) -> WrittenState:
    """One record as a :class:`WrittenState`; a ``ValueError`` names the file, the row and the field."""
    field = presets.STATE_FIELDS[preset]
    if not isinstance(record, dict) or not isinstance(record.get(field), str) or not record[field].strip():
        raise ValueError(f"{where}: needs a non-empty string {field!r}")
    golds = {}
    for qid, derive in DERIVED[preset].items():
        try:
            gold = derive(record)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: missing or mistyped label for {qid!r} ({exc})") from None
        q = questions[qid]
        ok = (isinstance(gold, bool) if q["type"] == "noul" else
              (not isinstance(gold, bool) and isinstance(gold, int) and 0 <= gold < len(q["criteria"]))
              if q["type"] == "score" else gold in q["criteria"])
        if not ok:
            raise ValueError(f"{where}: {qid} = {gold!r} is not a valid answer of presets.{preset}")
        golds[qid] = gold
    return WrittenState(group, preset, record[field], golds, batch)


@lru_cache(maxsize=4)
def load_written(groups: tuple[str, ...] = GROUPS, directory: str | None = None) -> tuple[WrittenState, ...]:
    """Every record of the files of ``groups``, in file order (sorted file names)."""
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"written groups {sorted(unknown)} are unknown; use a subset of {', '.join(GROUPS)}")
    out: list[WrittenState] = []
    for path in sorted(Path(directory or DATA).glob("*.json")):
        group, _, rest = path.stem.partition("_")
        preset, _, batch = rest.partition("_")
        if group not in GROUPS or preset not in presets.PRESETS:
            raise ValueError(f"{path}: name it <group>_<preset>[_<batch>].json with group in {GROUPS} "
                             f"and preset in {sorted(presets.PRESETS)}")
        if group in groups:
            records = json.loads(path.read_text(encoding="utf-8"))
            questions = presets.PRESETS[preset]()  # once per file, not per record
            out.extend(_check(f"{path.name}[{i}]", group, preset, batch or "a", questions, r)
                       for i, r in enumerate(records))
    return tuple(out)


def written_examples(states: Sequence[WrittenState], *, copies: int, seed: int,
                     alias_share: float = 0.0) -> list[Example]:
    """``copies`` rows per (state, question): each copy wraps the state and varies the options anew.

    ``alias_share`` of the choice rows name some of their options (each with even odds, at least
    one) by another name a user might give it (:data:`bank.LABEL_ALIASES`: "tech support" for
    ``technical_issue``), drawn from a separate seeded stream, so at 0 the rows are exactly those
    of earlier versions. Users mix their own labels with familiar ones (the README asks
    ``["billing", "technical"]``): the correction then acts on the familiar option only (the gate
    is per option), and unless training shows such mixed rows it learns nothing about how far to
    move a familiar option against an unfamiliar one. The trainer keeps alias texts out of the
    anchors (:func:`is_alias_text`), so in these rows they stand for a user's unseen label.
    Multilingual triage rows are reported as ``triage_ml.*``, like the synthetic ones."""
    if not 0.0 <= alias_share <= 1.0:
        raise ValueError(f"alias_share={alias_share!r}: must be within [0, 1]")
    rng, renamer = random.Random(seed), random.Random(seed + 7919)
    out = []
    for _ in range(copies):
        for s in states:
            field = presets.STATE_FIELDS[s.preset]
            for ex in preset_rows(rng, s.preset, wrap_state(rng, field, s.text), s.golds):
                task = ex.task.replace("triage.", "triage_ml.", 1) if s.group == "multi" else ex.task
                question, gold = ex.question, ex.gold
                if question["type"] == "choice" and alias_share and renamer.random() < alias_share:
                    question, gold = _aliased(renamer, s.preset, question, gold)
                out.append(Example(ex.state, question, gold, "written." + task))
    return out


def _aliased(rng: random.Random, preset: str, question: dict[str, Any], gold: Any) -> tuple[dict[str, Any], Any]:
    """The question with some options renamed to one of their aliases, and the gold renamed alike."""
    criteria = question["criteria"]
    renamed_labels = [label for label in criteria if rng.random() < 0.5] or [rng.choice(list(criteria))]
    names = {label: rng.choice(bank.LABEL_ALIASES[preset][label]) if label in renamed_labels else label
             for label in criteria}
    renamed = ([names[label] for label in criteria] if isinstance(criteria, list)
               else {names[label]: text for label, text in criteria.items()})
    return {**question, "criteria": renamed}, names[gold]


_ALIAS_NAMES = frozenset(name for labels in bank.LABEL_ALIASES.values() for names in labels.values()
                         for name in names)


def is_alias_text(text: str) -> bool:
    """Whether an option text (``"label: description"`` or a bare label, as the prior pools it)
    names its option by an alias of :data:`bank.LABEL_ALIASES`."""
    return text.partition(": ")[0] in _ALIAS_NAMES
