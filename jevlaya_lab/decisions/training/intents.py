"""Hand-written natural-language descriptions of the intents of CLINC150, BANKING77 and HWU64.

The datasets name their labels with identifiers (``card_arrival``, ``iot_hue_lightdim``); training
on descriptions and yes/no statements instead of bare names is what lets a checkpoint generalise to
labels it never saw. Each intent carries three training descriptions in different styles (a short
gloss, what the person wants, a paraphrase), two training statements that are true for it, and one
held-out description and statement that training never uses, so a zero-shot evaluation can show the
model options worded in a way it has not read. The texts were written for this project (no
dataset utterance, nor any five-word run of one, is copied); the data lives in
``data/intents.json`` and the utterances stay outside the repository.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

INTENTS_FILE = Path(__file__).with_name("data") / "intents.json"
COUNTS = {"descriptions": 3, "statements": 2}


@dataclass(frozen=True)
class Intent:
    """One labelled intent: ``dataset``/``intent`` as the dataset spells them, ``group`` its domain
    (CLINC150 domain, BANKING77 sub-group, HWU64 scenario), training texts and held-out texts."""

    dataset: str
    intent: str
    group: str
    descriptions: tuple[str, ...]
    statements: tuple[str, ...]
    eval_description: str
    eval_statement: str

    @property
    def key(self) -> str:
        return f"{self.dataset}/{self.intent}"


def _text(key: str, field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"intents.json {key!r}: field {field!r} must be a non-empty string, got {value!r}")
    return value


def _texts(key: str, field: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) != COUNTS[field]:
        raise ValueError(f"intents.json {key!r}: field {field!r} must be a list of exactly "
                         f"{COUNTS[field]} strings, got {value!r}")
    texts = tuple(_text(key, field, v) for v in value)
    if len({t.casefold() for t in texts}) != len(texts):
        raise ValueError(f"intents.json {key!r}: field {field!r} repeats a text; write distinct ones")
    return texts


def parse_intents(raw: object) -> dict[str, Intent]:
    """Validate the decoded JSON object; a ValueError names the key and field at fault."""
    if not isinstance(raw, dict):
        raise ValueError("intents.json must hold one object mapping 'dataset/intent' to an entry")
    intents = {}
    for key, entry in raw.items():
        if not isinstance(entry, dict):
            raise ValueError(f"intents.json {key!r}: entry must be an object, got {entry!r}")
        fields = {f: _text(key, f, entry.get(f)) for f in ("dataset", "intent", "group",
                                                            "eval_description", "eval_statement")}
        if key != f"{fields['dataset']}/{fields['intent']}":
            raise ValueError(f"intents.json {key!r}: key must be 'dataset/intent' of its fields "
                             f"'dataset' and 'intent' ({fields['dataset']}/{fields['intent']})")
        intent = Intent(descriptions=_texts(key, "descriptions", entry.get("descriptions")),
                        statements=_texts(key, "statements", entry.get("statements")), **fields)
        training = {t.casefold() for t in intent.descriptions + intent.statements}
        for field in ("eval_description", "eval_statement"):
            if fields[field].casefold() in training:
                raise ValueError(f"intents.json {key!r}: field {field!r} repeats a training text; "
                                 "held-out texts must be worded differently")
        intents[key] = intent
    return intents


def load_intents(path: Path = INTENTS_FILE) -> dict[str, Intent]:
    """All intents keyed ``"dataset/intent"`` (e.g. ``"banking77/card_arrival"``), in file order."""
    return parse_intents(json.loads(Path(path).read_text("utf-8")))


READER_HOLD_OUT = 0.15
"""The share of intents a statement reader's training leaves out (``training.reader``): its blend and
choice weight are fit on them, so an encoder tuned for the same checkpoint leaves them out too."""


def split_intents(share: float, seed: int, datasets: Sequence[str] | None = None
                  ) -> tuple[dict[str, Intent], dict[str, Intent]]:
    """``(trained, held out)`` intents: a seeded ``share`` of them held out; ``datasets`` keeps only
    those datasets' intents (a leave-one-dataset-out run; default: all)."""
    intents = load_intents()
    keys = sorted(intents)
    held = set(random.Random(seed + 1).sample(keys, round(share * len(keys))))
    if datasets is not None:
        intents = {k: v for k, v in intents.items() if v.dataset in datasets}
    return ({k: v for k, v in intents.items() if k not in held}, {k: v for k, v in intents.items() if k in held})
