"""The user-question benchmark's data: questions written as users write them, and their gold rows.

``tests/data/user_questions/questions.json`` holds yes/no statements and choice questions written
for this benchmark the way users word questions about their own inboxes (not the presets' wording,
not a training label, statement or alias). Each question is in one *half*: ``dev`` may guide any
design or tuning decision; ``locked`` is only read by the final ``bench/quality.py --user-questions
--locked`` run, and ``tests/decisions/test_user_questions.py`` checks that no locked wording appears
in the training data, the aliases, the presets or the dev half.

Gold comes from two places:

- hand-written states (``en_states.json``, ``multi_states.json`` in es fr de pt it): each state
  lists the tags that hold for it (a yes/no statement names its tag, and holds where the tag is
  listed, or where it is not for a statement with ``"negates": true``, such as "the writer doesn't
  ask us anything" on the tag ``question``: :func:`holds`) and a gold option key per state-based choice
  question (``null``: no option clearly fits, the state is not scored);
- dataset utterances (CLINC150, BANKING77, HWU64 test splits, read at run time from the data
  folder, never stored here): a statement holds for the intent ids it lists and not for the other
  intents of its datasets; a choice option holds for its intent ids. Rows are a seeded draw, so every
  run and every model sees the same utterances.

This module only reads and draws; scoring lives in ``bench/quality.py``. Few-shot benchmarks may
draw their labelled examples from :func:`gold_rows` too.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "user_questions"
HALVES = ("dev", "locked")
LANGS = ("es", "fr", "de", "pt", "it")
# rows drawn per yes/no dataset statement (each class) and per choice option
DATASET_PER_CLASS = 80
DATASET_PER_OPTION = 40


@dataclass(frozen=True)
class UserQuestion:
    """One benchmark question as written in ``questions.json``."""

    id: str
    half: str
    kind: str  # "yesno" or "choice"
    source: str  # "states" or "datasets"
    raw: dict[str, Any]

    @property
    def option_keys(self) -> list[str]:
        return list(self.raw["options"]) if self.kind == "choice" else []

    def agent_question(self, lang: str = "en") -> dict[str, Any]:
        """The question as a user passes it to ``Agent.predict``: a noul with the statement as its
        instructions, or a choice whose criteria are the option names (with their descriptions
        where the user wrote one). ``lang`` picks a translation written for ``multi_states.json``."""
        if self.kind == "yesno":
            text = self.raw["statement"] if lang == "en" else self.raw["translations"][lang]
            return {"type": "noul", "instructions": text}
        if lang != "en":
            instructions, names = self.raw["translations"][lang]
            return {"type": "choice", "instructions": instructions,
                    "criteria": [names[k] for k in self.option_keys]}
        options = self.raw["options"]
        described = self.source == "states" and all(v[1] for v in options.values())
        if described:
            return {"type": "choice", "instructions": self.raw["instructions"],
                    "criteria": {v[0]: v[1] for v in options.values()}}
        return {"type": "choice", "instructions": self.raw["instructions"],
                "criteria": [v[0] for v in options.values()]}

    def languages(self) -> list[str]:
        return list(self.raw.get("translations", {}))


def _read(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def load_questions(halves: tuple[str, ...] = ("dev",)) -> list[UserQuestion]:
    """The questions of ``halves`` (default: only ``dev``; pass ``("locked",)`` for the final read)."""
    for half in halves:
        if half not in HALVES:
            raise ValueError(f"halves contains {half!r}; use 'dev' and/or 'locked'")
    raw = _read("questions.json")
    out = [UserQuestion(q["id"], q["half"], kind, q["source"], q)
           for kind in ("yesno", "choice") for q in raw[kind]]
    return [q for q in out if q.half in halves]


def negating_ids(halves: tuple[str, ...] = ("dev",)) -> set[str]:
    """The ids of the statements of ``halves`` marked ``"negates"`` (negated as a whole)."""
    return {q.id for q in load_questions(halves) if q.raw.get("negates")}


def load_states(group: str) -> list[dict[str, Any]]:
    """``en`` or ``multi`` hand-written states with their tags and choice golds."""
    return list(_read(f"{group}_states.json")["states"])


def holds(statement: dict[str, Any], state: dict[str, Any]) -> bool:
    """Whether a state-based yes/no ``statement`` (its entry in ``questions.json``) holds for
    hand-written ``state``: its tag is listed, or not listed for a statement that ``"negates"`` it."""
    return (statement["tag"] in state.get("tags", [])) != bool(statement.get("negates"))


def _dataset_test(datasets: list[str], data_dir: str | None, cache: dict) -> list[tuple[str, str]]:
    from jevlaya_lab.decisions.training.datasets import load_dataset

    rows = []
    for name in datasets:
        if name not in cache:
            cache[name] = [(u.text, u.intent) for u in load_dataset(name, data_dir)["test"]]
        rows.extend(cache[name])
    return rows


def gold_rows(question: UserQuestion, group: str = "en", *, data_dir: str | None = None,
              seed: int = 0, cache: dict | None = None) -> list[tuple[str, str, Any]]:
    """``(lang, state text, gold)`` rows of ``question``: gold is a bool for a yes/no statement, the
    option's index in :attr:`UserQuestion.option_keys` for a choice. ``group`` ``multi`` gives the
    multilingual states (state-based questions with translations only; dataset questions have
    no multilingual rows). Dataset rows are a draw seeded by ``seed`` and the question id."""
    cache = {} if cache is None else cache
    if question.source == "states":
        states = load_states(group)
        if group == "multi":
            langs = set(question.languages())
            states = [s for s in states if s["lang"] in langs]
        out = []
        for s in states:
            lang = s.get("lang", "en")
            if question.kind == "yesno":
                out.append((lang, s["text"], holds(question.raw, s)))
            elif s.get(question.raw["field"]) is not None:
                out.append((lang, s["text"], question.option_keys.index(s[question.raw["field"]])))
        return out
    if group != "en":
        return []
    rng = random.Random(f"{seed}:{question.id}")
    if question.kind == "yesno":
        rows = _dataset_test(question.raw["datasets"], data_dir, cache)
        held = set(question.raw["intents"])
        pos = [t for t, i in rows if i in held]
        neg = [t for t, i in rows if i not in held]
        pos = rng.sample(pos, min(DATASET_PER_CLASS, len(pos)))
        neg = rng.sample(neg, min(DATASET_PER_CLASS, len(neg)))
        return [("en", t, True) for t in pos] + [("en", t, False) for t in neg]
    out = []
    options = question.raw["options"]
    datasets = sorted({i.split("/")[0] for v in options.values() for i in v[1]})
    rows = _dataset_test(datasets, data_dir, cache)
    for index, key in enumerate(question.option_keys):
        ids = set(options[key][1])
        texts = [t for t, i in rows if i in ids]
        out.extend(("en", t, index) for t in rng.sample(texts, min(DATASET_PER_OPTION, len(texts))))
    return out
