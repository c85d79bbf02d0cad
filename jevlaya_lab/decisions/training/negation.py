"""Negated training statements: a reader that never saw a statement with its negation answers "The
writer does not ask anything." as it answers "The writer asks something." (measured on the
user-question benchmark's dev half: ten statements negated as a whole ranked upside down, AUC 0.204),
so a share of the reader's training pairs carry the statement negated and the truth turned round
(:func:`negated_pairs`).

:func:`negate` writes one negation of an English statement, drawn from the forms it takes:

- the verb negated, when the statement is "The <subject> <verb> ..." with a verb in the present
  ("asks" -> "does not ask" / "doesn't ask", "is" -> "is not" / "isn't", "has" -> "does not have"),
  with "some-" words after it made "any-" ("something" -> "anything") and a verb coordinated right
  after the first ("admires or praises" -> "does not admire or praise");
- a sentence around the statement ("It is not true that ...", "It is not the case that ...", "It is
  false that ..."), which every statement takes, and the only form for one that already holds a
  negation or whose verb is not in the present.

What is not written (an issue is silent on it, so stated here): no "nobody" / "none of" forms and
no other language; a statement in another language is negated by the sentence forms only in English
words, so :func:`negated_pairs` is for English training statements.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

__all__ = ["SENTENCES", "inside", "negate", "negated_pairs", "verb_negation"]

SENTENCES = ("It is not true that {}.", "It is not the case that {}.", "It is false that {}.")
"""The sentences around a statement (its :func:`inside`) that negate it whatever its grammar."""

_NEGATIONS = re.compile(r"\b(not|no|never|nothing|nobody|none|neither|nor|cannot)\b|n't\b", re.IGNORECASE)
_SOME = {"something": "anything", "someone": "anyone", "somebody": "anybody", "somewhere": "anywhere",
         "some": "any"}
_PREPOSITIONS = {"with", "to", "of", "about", "for", "on", "at", "in", "from"}
_BE = {"is": "isn't", "are": "aren't", "was": "wasn't", "were": "weren't"}
_HAS_AUX = {"just", "already", "been", "got", "never", "recently", "finally"}
_NOT_VERBS = {"this", "does", "plus", "thus", "always"}
"""Words of four letters or more ending in "s" that are not a verb in the third person present
("does" is one, but its negation "does not do" would say something else)."""


def inside(statement: str) -> str:
    """``statement`` as the inside of a longer sentence: no final full stop, its first letter made lower
    case unless its first word is an acronym ("SMS") or "I"."""
    text = statement.strip().rstrip(".")
    first = text.split()[0]
    keep = first == "I" or first.startswith("I'") or (len(first) > 1 and first.isupper())
    return text if keep else text[0].lower() + text[1:]


def _lemma(verb: str) -> str:
    """The bare form of a verb in the third person present ("asks" -> "ask", "denies" -> "deny")."""
    if verb == "goes":
        return "go"
    if verb.endswith("ies") and len(verb) > 4:
        return verb[:-3] + "y"
    if verb.endswith(("sses", "shes", "ches", "xes", "zzes")):
        return verb[:-2]
    return verb[:-1]


def _present(word: str) -> bool:
    """A word that reads as a verb in the third person present ("asks", "wishes"), not "is" / "has"."""
    return (word.isalpha() and word.islower() and len(word) > 3 and word.endswith("s")
            and not word.endswith("ss") and word not in _NOT_VERBS)


def verb_negation(statement: str, contracted: bool = False) -> str | None:
    """``statement`` with its verb negated, or None when its grammar is not "The <subject> <verb> ..."
    with a verb in the present, or it already holds a negation."""
    if _NEGATIONS.search(statement):
        return None
    words = statement.strip().split()
    if len(words) < 3 or words[0] != "The":
        return None
    at = 3 if words[1].endswith("'s") else 2  # "The writer asks ...", "The customer's card is ..."
    if not words[at - 1].isalpha() or at >= len(words):
        return None
    verb, rest = words[at], words[at + 1:]
    if verb in _BE:
        negated = [_BE[verb]] if contracted else [verb, "not"]
    elif verb == "has":
        after = rest[0].rstrip(".,") if rest else ""
        if after in _HAS_AUX or after.endswith(("ed", "en")):  # "has just realised", "has changed"
            negated = ["hasn't"] if contracted else ["has", "not"]
        else:
            negated = ["doesn't", "have"] if contracted else ["does", "not", "have"]
    elif _present(verb):
        negated = [*(["doesn't"] if contracted else ["does", "not"]), _lemma(verb)]
        if len(rest) > 1 and rest[0] in ("or", "and") and _present(rest[1]):
            rest = [rest[0], _lemma(rest[1]), *rest[2:]]
        elif len(rest) > 2 and rest[0] in _PREPOSITIONS and rest[1] in ("or", "and") and _present(rest[2]):
            rest = [rest[0], rest[1], _lemma(rest[2]), *rest[3:]]
    else:
        return None
    rest = [_any(w) for w in rest]
    return " ".join([*words[:at], *negated, *rest])


def _any(word: str) -> str:
    """A "some-" word, with what follows it kept ("something." -> "anything.")."""
    core = word.rstrip(".,;:!?")
    return _SOME[core] + word[len(core):] if core in _SOME else word


def negate(statement: str, rng: random.Random) -> str:
    """One negation of ``statement``: its verb negated (half of those contracted) for three draws in
    five when its grammar allows (:func:`verb_negation`), else a sentence around it (:data:`SENTENCES`)."""
    if rng.random() < 0.6:
        by_verb = verb_negation(statement, contracted=rng.random() < 0.5)
        if by_verb is not None:
            return by_verb
    return rng.choice(SENTENCES).format(inside(statement))


def negated_pairs(pairs: Sequence[tuple[str, str, bool]], share: float,
                  rng: random.Random) -> list[tuple[str, str, bool]]:
    """``pairs`` of ``(statement, text, truth)`` with a ``share`` of them (drawn with ``rng``) asking
    :func:`negate` of the statement, their truth turned round; the others as they were."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share={share!r}: give the share of pairs to negate, from 0 to 1")
    return [(negate(s, rng), t, not truth) if rng.random() < share else (s, t, truth) for s, t, truth in pairs]
