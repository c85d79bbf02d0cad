"""Training and evaluation examples built from real utterances (CLINC150, BANKING77, HWU64).

Every utterance becomes one :class:`~.synthetic.Example`, as users would ask:
- a **choice** among 2-20 intents, the gold one plus negatives of which about half come from the
  gold's own group (hard: ``card_arrival`` against ``card_delivery_estimate``), each option its
  label with one of the intent's training descriptions (sometimes the bare label);
- or a **noul** statement: one of the gold intent's training statements (true), or a statement
  of another intent, usually of the same group (false), in equal measure.
States are the plain utterance or a dict with one text field, as the presets read them. The
held-out descriptions and statements (``eval_*`` in :mod:`.intents`) are never used here; the
zero-shot evaluation (:func:`zero_shot_choice`, :func:`zero_shot_noul`) uses only them.
"""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from collections.abc import Sequence

from jevlaya_lab.decisions.training.datasets import Utterance
from jevlaya_lab.decisions.training.intents import Intent
from jevlaya_lab.decisions.training.synthetic import Example

__all__ = ["examples_from_utterances", "intent_label", "zero_shot_choice", "zero_shot_noul"]

INSTRUCTIONS = (
    "What does the user want?", "Which intent fits the message?", "What is this request about?",
    "Pick the intent of the {field}.", "What is the customer asking for in the {field}?",
    "Classify the {field}.", "Which of these describes the {field} best?",
)
FIELDS = ("message", "text", "request", "utterance", "query")


def intent_label(intent: Intent) -> str:
    """The option label users would write: the dataset's identifier (``card_arrival``)."""
    return intent.intent


def _state(text: str) -> tuple[object, str]:
    """The plain text (2 in 5) or a dict with one text field, fixed per utterance so that runs over
    the same utterances (other seeds, leave-one-out) pool each state once."""
    h = zlib.crc32(text.encode("utf-8"))
    field = FIELDS[h % len(FIELDS)]
    return (text if (h >> 8) % 5 < 2 else {field: text}), field


def examples_from_utterances(utterances: Sequence[Utterance], intents: dict[str, Intent], *, seed: int,
                             noul_share: float = 0.4, hard_share: float = 0.5,
                             bare_share: float = 0.15) -> list[Example]:
    """One example per utterance (choice or noul), seeded; intents outside ``intents`` are skipped."""
    rng = random.Random(seed)
    keys = sorted({u.intent for u in utterances if u.intent in intents})
    by_group: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key in keys:
        by_group[(intents[key].dataset, intents[key].group)].append(key)
    out = []
    for u in utterances:
        gold = intents.get(u.intent)
        if gold is None:
            continue
        state, field = _state(u.text)
        near = [k for k in by_group[(gold.dataset, gold.group)] if k != u.intent]
        if rng.random() < noul_share:
            truth = rng.random() < 0.5
            if truth:
                statement = rng.choice(gold.statements)
            else:
                other = rng.choice(near) if near and rng.random() < 0.7 else rng.choice([k for k in keys if k != u.intent])
                statement = rng.choice(intents[other].statements)
            out.append(Example(state, {"type": "noul", "instructions": statement}, truth, f"{gold.dataset}.noul"))
            continue
        k = rng.randint(2, min(20, len(keys)))
        hard = [x for x in near if rng.random() < hard_share][: k - 1]
        rest = [x for x in keys if x != u.intent and x not in hard]
        chosen = [u.intent, *hard, *rng.sample(rest, k - 1 - len(hard))]
        rng.shuffle(chosen)
        bare = rng.random() < bare_share
        criteria = {intent_label(intents[x]): ("" if bare else rng.choice(intents[x].descriptions)) for x in chosen}
        question = {"type": "choice", "instructions": rng.choice(INSTRUCTIONS).format(field=field),
                    "criteria": criteria}
        out.append(Example(state, question, intent_label(gold), f"{gold.dataset}.choice"))
    return out


def zero_shot_choice(intents: dict[str, Intent], dataset: str) -> dict[str, str]:
    """The full label set of ``dataset`` with its held-out descriptions (criteria of one question)."""
    return {intent_label(i): i.eval_description for k, i in sorted(intents.items()) if i.dataset == dataset}


def zero_shot_noul(utterances: Sequence[Utterance], intents: dict[str, Intent], *,
                   seed: int) -> list[tuple[str, str, bool]]:
    """``(text, held-out statement, truth)`` per utterance: its own intent's or a near one's, half each."""
    rng = random.Random(seed)
    by_group: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, intent in intents.items():
        by_group[(intent.dataset, intent.group)].append(key)
    out = []
    for u in utterances:
        gold = intents[u.intent]
        truth = rng.random() < 0.5
        if truth:
            out.append((u.text, gold.eval_statement, True))
            continue
        near = [k for k in by_group[(gold.dataset, gold.group)] if k != u.intent] or \
            [k for k, i in intents.items() if i.dataset == gold.dataset and k != u.intent]
        out.append((u.text, intents[rng.choice(near)].eval_statement, False))
    return out
