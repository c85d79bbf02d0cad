"""Seeded synthetic training data: preset questions plus generic choice/score/noul tasks.

An :class:`Example` is one (state, question) pair with its gold answer. The generator composes
states from the phrase banks in :mod:`.bank`, varies the instruction wording, shuffles option
orders, samples option counts from 2 to 20 for generic choices (presets keep their labels but get
shuffled, sometimes described and sometimes bare) and keeps noul statements true and false in
equal measure. Same seed, same data.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.training import bank

__all__ = ["Example", "generate", "gold_index", "preset_rows", "wrap_state"]


@dataclass(frozen=True)
class Example:
    """One training row: ask ``question`` about ``state``; ``gold`` is a label, a level or a bool."""

    state: Any
    question: dict[str, Any]
    gold: Any
    task: str  # e.g. "triage.intent" or "generic.topic", for per-task reports


def gold_index(example: Example) -> int:
    """Index of the gold option in the question's caller order (noul: false=0, true=1)."""
    q = example.question
    if q["type"] == "noul":
        return int(bool(example.gold))
    if q["type"] == "score":
        return int(example.gold)
    labels = list(q["criteria"]) if isinstance(q["criteria"], dict) else list(q["criteria"])
    return labels.index(example.gold)


def generate(n: int, *, seed: int = 0, generic_share: float = 0.4,
             multilingual_share: float = 0.0, match_share: float = 0.0) -> list[Example]:
    """``n`` examples: ``generic_share`` of them generic tasks, the rest spread over the presets.

    ``multilingual_share`` of the triage states are written in one of the 13 languages of
    :mod:`.bank_multi` (questions stay English, as users ask them). ``match_share`` of the draws
    (a preset draw yields several rows, so a smaller share of the rows) are "generic.match" rows
    whose state restates the gold option's description (see :func:`_match`). Both at 0 keep the
    data of earlier versions, row for row.
    """
    if n < 0:
        raise ValueError(f"n={n!r}: the number of examples must be >= 0")
    for name, share in (("generic_share", generic_share), ("multilingual_share", multilingual_share),
                        ("match_share", match_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name}={share!r}: must be within [0, 1]")
    rng = random.Random(seed)
    out: list[Example] = []
    nouls: dict[tuple[str, bool], int] = {}  # (task, truth) -> rows kept
    while len(out) < n:
        if match_share and rng.random() < match_share:
            out.append(_match(rng))
            continue
        maker = _GENERIC if rng.random() < generic_share else rng.choice(_PRESET_MAKERS)
        if maker is _triage and multilingual_share and rng.random() < multilingual_share:
            maker = _triage_foreign
        for example in maker(rng):
            if example.question["type"] == "noul":
                key, other = (example.task, bool(example.gold)), (example.task, not example.gold)
                if nouls.get(key, 0) > nouls.get(other, 0):  # true and false in equal measure per task
                    continue
                nouls[key] = nouls.get(key, 0) + 1
            out.append(example)
    return out[:n]


# ---------------------------------------------------------------- helpers

def _fill(rng: random.Random, text: str) -> str:
    return text.format(order=f"#{rng.randint(10000, 99999)}", product=rng.choice(bank.PRODUCTS),
                       feature=rng.choice(bank.FEATURES), amount=f"${rng.randint(5, 900)}",
                       name=rng.choice(bank.NAMES))


def _join(rng: random.Random, parts: list[str]) -> str:
    text = " ".join(p.strip() for p in parts if p and p.strip())
    if rng.random() < 0.15:
        text = text.lower()
    return text


def wrap_state(rng: random.Random, field: str, text: str) -> Any:
    """Present the text as the preset's state dict (usually), with noise fields, or a bare string."""
    roll = rng.random()
    if roll < 0.55:
        return {field: text}
    if roll < 0.8:
        extra = rng.choice([{"customer_id": rng.randint(1, 9999)}, {"channel": rng.choice(["web", "app", "mail"])},
                            {"from": f"{rng.choice(bank.NAMES).lower()}@example.com"}])
        return {**extra, field: text} if rng.random() < 0.5 else {field: text, **extra}
    return text


def _vary_choice(rng: random.Random, question: dict[str, Any], gold: Any,
                 keep_all: bool = True) -> dict[str, Any]:
    """Shuffle the labels, sometimes drop descriptions or (optionally) some wrong options."""
    criteria: dict[str, str] = dict(question["criteria"])
    labels = list(criteria)
    if not keep_all and len(labels) > 2 and rng.random() < 0.3:
        others = [lab for lab in labels if lab != gold]
        labels = [gold, *rng.sample(others, rng.randint(1, len(others)))]
    rng.shuffle(labels)
    q = dict(question)
    q["criteria"] = labels if rng.random() < 0.2 else {lab: criteria[lab] for lab in labels}
    return q


def preset_rows(rng: random.Random, preset: str, state: Any,
                 golds: dict[str, Any]) -> Iterator[Example]:
    for qid, question in presets.PRESETS[preset]().items():
        if qid not in golds:
            continue
        if question["type"] == "choice":
            question = _vary_choice(rng, question, golds[qid], keep_all=rng.random() < 0.6)
        yield Example(state, question, golds[qid], f"{preset}.{qid}")


# ---------------------------------------------------------------- presets

def _triage(rng: random.Random) -> list[Example]:
    intent = rng.choice(list(bank.TRIAGE_REQUESTS))
    sentiment = rng.choice(list(bank.SENTIMENT_PHRASES))
    if intent == "feedback":
        sentiment = rng.choice(["positive", "positive", "neutral"])
        level = rng.choice([0, 0, 1])
    else:
        level = rng.randrange(4)
    request = _fill(rng, rng.choice(bank.TRIAGE_REQUESTS[intent]))
    greeting = rng.choice(["", "Hi,", "Hello team,", f"Dear support, this is {rng.choice(bank.NAMES)}.", "Hey"])
    parts = [greeting, request[0].upper() + request[1:] + rng.choice([".", "!", "", "?"])]
    mood = rng.choice(bank.SENTIMENT_PHRASES[sentiment])
    urgency = rng.choice(bank.URGENCY_PHRASES[level])
    tail = [mood, urgency]
    rng.shuffle(tail)
    text = _join(rng, parts + tail)
    golds = {"intent": intent, "sentiment": sentiment, "is_urgent": level >= 2, "priority": level}
    return list(preset_rows(rng, "triage", wrap_state(rng, "message", text), golds))


def _email(rng: random.Random) -> list[Example]:
    category = "spam" if rng.random() < 0.25 else rng.choice(list(bank.EMAILS))
    body = _fill(rng, rng.choice(bank.EMAILS[category]))
    sender = rng.choice(bank.NAMES)
    subject = rng.choice(["", f"Subject: {body.split()[0]} {body.split()[1]}", "Subject: (no subject)"])
    sign = rng.choice(["", f"Best, {sender}", f"-- {sender}", "Sent from my phone"])
    text = _join(rng, [subject, rng.choice(["", "Hello,", "Hi there,", "Dear Sir or Madam,"]), body, sign])
    golds = {"category": category, "needs_reply": bank.EMAIL_NEEDS_REPLY[category],
             "is_spam": category == "spam"}
    return list(preset_rows(rng, "email", wrap_state(rng, "email", text), golds))


def _guard(rng: random.Random) -> list[Example]:
    attack = "none" if rng.random() < 0.35 else rng.choice(list(bank.GUARD_INPUTS))
    text = rng.choice(bank.GUARD_INPUTS[attack])
    if rng.random() < 0.3:  # hide the attack behind an innocent lead-in
        text = _join(rng, [rng.choice(bank.GUARD_INPUTS["none"]), rng.choice(["Also:", "And then", "P.S."]),
                           text]) if attack != "none" else text
    golds = {"attack": attack, "is_safe": attack == "none"}
    return list(preset_rows(rng, "guard", wrap_state(rng, "user_input", text), golds))


def _moderation(rng: random.Random) -> list[Example]:
    category = "ok" if rng.random() < 0.35 else rng.choice(list(bank.MODERATION_TEXTS))
    text = _fill(rng, rng.choice(bank.MODERATION_TEXTS[category]))
    if rng.random() < 0.3:
        text = _join(rng, [_fill(rng, rng.choice(bank.MODERATION_TEXTS["ok"])), text]) \
            if category != "ok" else text
    golds = {"category": category, "toxicity": rng.choice(bank.MODERATION_TOXICITY[category]),
             "is_allowed": category == "ok"}
    return list(preset_rows(rng, "moderation", wrap_state(rng, "text", text), golds))


def _router(rng: random.Random) -> list[Example]:
    route = rng.choice(list(bank.ROUTER_REQUESTS))
    text = rng.choice(bank.ROUTER_REQUESTS[route])
    complexity = rng.choice(bank.ROUTER_COMPLEXITY[route])
    if complexity == 2 and route != "chat":
        text = _join(rng, [text, rng.choice(["Explain every step in detail.", "Cover all edge cases.",
                                             "Make it thorough and long.", "Do it for the whole project."])])
    elif complexity == 0:
        text = _join(rng, [text, rng.choice(["", "Just the answer.", "Quick one."])])
    golds = {"route": route, "complexity": complexity, "needs_tools": bank.ROUTER_NEEDS_TOOLS[route]}
    return list(preset_rows(rng, "router", wrap_state(rng, "request", text), golds))


def _triage_foreign(rng: random.Random) -> list[Example]:
    """A triage state in one of :data:`.bank_multi.LANGUAGES`, built like :func:`_triage`."""
    from jevlaya_lab.decisions.training import bank_multi

    lang = rng.choice(bank_multi.LANGUAGES)
    requests = bank_multi.TRIAGE_REQUESTS_ML[lang]
    intent = rng.choice(list(requests))
    if intent == "feedback":
        sentiment, level = rng.choice(["positive", "positive", "neutral"]), rng.choice([0, 0, 1])
    else:
        sentiment, level = rng.choice(list(bank_multi.SENTIMENT_PHRASES_ML[lang])), rng.randrange(4)
    request = rng.choice(requests[intent]).format(order=f"#{rng.randint(10000, 99999)}",
                                                  amount=rng.choice([f"{rng.randint(5, 900)} €",
                                                                     f"${rng.randint(5, 900)}"]))
    tail = [rng.choice(bank_multi.SENTIMENT_PHRASES_ML[lang][sentiment]),
            rng.choice(bank_multi.URGENCY_PHRASES_ML[lang][level])]
    rng.shuffle(tail)
    text = _join(rng, [rng.choice(bank_multi.GREETINGS_ML[lang]), request, *tail])
    golds = {"intent": intent, "sentiment": sentiment, "is_urgent": level >= 2, "priority": level}
    # reported apart from the English triage rows ("triage_ml.intent", ...)
    return [Example(ex.state, ex.question, ex.gold, ex.task.replace("triage.", "triage_ml.", 1))
            for ex in preset_rows(rng, "triage", wrap_state(rng, "message", text), golds)]


_PRESET_MAKERS: list[Callable[[random.Random], list[Example]]] = [
    _triage, _triage, _email, _guard, _moderation, _router]

# ---------------------------------------------------------------- generic tasks

_TOPIC_PROMPTS = ["What is the text about?", "Which topic fits the text best?", "Pick the subject of this post.",
                  "Classify the topic.", "Which category does the message belong to?", "Main theme?"]
_TOPIC_STATEMENTS = ["The text is about {t}.", "This message discusses {t}.", "The topic is {t}.",
                     "The writer talks about {t}."]
_EMOTION_STATEMENTS = ["The writer is {e}.", "The author sounds {e}.", "The message expresses that the writer feels {e}."]
_SCORE_PROMPTS = ["How urgent is the message?", "Rate the urgency.", "How quickly must someone act on this?"]
_SCORE_LEVEL_SETS = [
    ["not urgent", "somewhat urgent", "urgent", "extremely urgent"],
    ["can wait", "soon", "today", "right now"],
    ["low", "medium", "high", "critical"],
]


def _topic_text(rng: random.Random, topic: str) -> str:
    sentences = bank.TOPICS[topic][1]
    return _join(rng, rng.sample(sentences, rng.randint(1, 2)))


def _generic(rng: random.Random) -> list[Example]:
    kind = rng.choice(["topic", "topic", "topic_noul", "emotion", "emotion_noul", "urgency"])
    if kind in {"topic", "topic_noul"}:
        topic = rng.choice(list(bank.TOPICS))
        text = _topic_text(rng, topic)
        if kind == "topic":
            k = rng.randint(2, min(20, len(bank.TOPICS)))
            labels = [topic, *rng.sample([t for t in bank.TOPICS if t != topic], k - 1)]
            rng.shuffle(labels)
            style = rng.random()
            if style < 0.4:
                criteria: Any = labels
            elif style < 0.8:
                criteria = {t: bank.TOPICS[t][0] for t in labels}
            else:  # letter labels whose descriptions carry the meaning
                letters = [chr(ord("A") + i) for i in range(k)]
                criteria = {letters[i]: f"{t} ({bank.TOPICS[t][0]})" for i, t in enumerate(labels)}
                topic = letters[labels.index(topic)]
            q = {"type": "choice", "instructions": rng.choice(_TOPIC_PROMPTS), "criteria": criteria}
            return [Example(text, q, topic, "generic.topic")]
        truth = rng.random() < 0.5
        named = topic if truth else rng.choice([t for t in bank.TOPICS if t != topic])
        q = {"type": "noul", "instructions": rng.choice(_TOPIC_STATEMENTS).format(t=named)}
        return [Example(text, q, truth, "generic.topic_noul")]
    if kind in {"emotion", "emotion_noul"}:
        emotion = rng.choice(list(bank.EMOTIONS))
        text = _join(rng, [_topic_text(rng, rng.choice(list(bank.TOPICS))), rng.choice(bank.EMOTIONS[emotion])])
        if kind == "emotion":
            k = rng.randint(2, len(bank.EMOTIONS))
            labels = [emotion, *rng.sample([e for e in bank.EMOTIONS if e != emotion], k - 1)]
            rng.shuffle(labels)
            q = {"type": "choice", "instructions": rng.choice(["How does the writer feel?", "Emotion of the author?"]),
                 "criteria": labels}
            return [Example(text, q, emotion, "generic.emotion")]
        truth = rng.random() < 0.5
        named = emotion if truth else rng.choice([e for e in bank.EMOTIONS if e != emotion])
        q = {"type": "noul", "instructions": rng.choice(_EMOTION_STATEMENTS).format(e=named)}
        return [Example(text, q, truth, "generic.emotion_noul")]
    level = rng.randrange(4)
    urgency = rng.choice([p for p in bank.URGENCY_PHRASES[level] if p] or [""])
    text = _join(rng, [_topic_text(rng, rng.choice(list(bank.TOPICS))), urgency])
    q = {"type": "score", "instructions": rng.choice(_SCORE_PROMPTS), "criteria": list(rng.choice(_SCORE_LEVEL_SETS))}
    return [Example(text, q, level, "generic.urgency")]


_GENERIC = _generic

_MATCH_FRAMES = ["{d}", "{d}.", "In short: {d}.", "My case: {d}", "Basically {d}.", "{d} - that's it.",
                 "Hello, {d}. Thanks", "Summary of the message: {d}."]


def _match(rng: random.Random) -> Example:
    """A choice whose state restates the gold option's description, sometimes with words dropped.

    Measured on this CPU: without these rows the option markers learn nothing for the first
    ~1300 steps (every row type stays at chance), because the softmax over markers cancels any
    state evidence that reaches all markers alike; only attention that depends on the option
    helps, and it has no signal to grow from. A state that shares words with exactly one option
    gives that signal at once: with half of the rows like this, held-out rows of every type left
    chance within 300 steps (choice 0.21 -> 0.40, noul 0.49 -> 0.55 by step 400).
    """
    if rng.random() < 0.6:
        preset = rng.choice([p for p in presets.PRESETS if p != "triage"] + ["triage", "triage"])
        choices = [q for q in presets.PRESETS[preset]().values()
                   if q["type"] == "choice" and isinstance(q["criteria"], dict)]
        question = dict(rng.choice(choices))
        gold = rng.choice(list(question["criteria"]))
        described = dict(question["criteria"])
    else:
        k = rng.randint(2, min(12, len(bank.TOPICS)))
        labels = rng.sample(list(bank.TOPICS), k)
        described = {t: bank.TOPICS[t][0] for t in labels}
        gold = rng.choice(labels)
        question = {"type": "choice", "instructions": rng.choice(_TOPIC_PROMPTS), "criteria": described}
    question = _vary_choice(rng, question, gold, keep_all=rng.random() < 0.5)
    words = described[gold].split()
    if len(words) > 4 and rng.random() < 0.5:  # drop some words so it is a match, not a copy
        words = [w for w in words if rng.random() < 0.7] or words
    text = rng.choice(_MATCH_FRAMES).format(d=" ".join(words))
    # always the "message" field, as the shipped heads were trained (the preset's own field would
    # match its instructions better; change it together with the next retraining)
    return Example(wrap_state(rng, "message", text), question, gold, "generic.match")
