"""Which language Latin-script text is written in, offline: common words and telltale letters.

Latin text is scored against the common-word lists of 27 languages plus letters that only some
languages use (``ñ``, ``ß``, ``ł``, ``ř``, ``ő``, ...); the lists and the language names are data,
in ``languages.json`` beside this module. Fewer than ``MIN_WORDS`` words, or no clear winner, is
*undecided*; undecided text can still be surely *not English* (two other languages tie well
ahead of English, or several words carry letters English never uses and no English word is seen).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import regex

MIN_WORDS = 3  # fewer Latin words than this is too little evidence to name a language

_DATA = json.loads((Path(__file__).with_name("languages.json")).read_text(encoding="utf-8"))
STOPWORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words.split()) for lang, words in _DATA["stopwords"].items()
}
# Letters that only a few Latin-script languages use; each occurrence is weak evidence.
HINT_LETTERS: dict[str, str] = _DATA["hint_letters"]
_NAMES: dict[str, str] = _DATA["names"]
_HINT_WEIGHT = 0.25
_HINT_CAP = 2.0  # hint letters alone never outweigh a couple of stop words
_INVERTED = {"es": "¿¡"}  # punctuation unique to one language

WORD = regex.compile(r"\p{L}+")
_ASCII_WORD = re.compile(r"[a-z]+")  # WORD on lowered ASCII text, with the faster stdlib engine
_NON_ASCII = regex.compile(r"[^\x00-\x7f]")
_ORDER = {lang: i for i, lang in enumerate(STOPWORDS)}

# word -> the languages it is a common word of; letter -> the languages that use it
_WORD_LANGUAGES: dict[str, tuple[str, ...]] = {}
for _lang, _words in STOPWORDS.items():
    for _word in _words:
        _WORD_LANGUAGES[_word] = (*_WORD_LANGUAGES.get(_word, ()), _lang)
_HINT_INDEX: dict[str, tuple[str, ...]] = {}
for _lang, _letters in HINT_LETTERS.items():
    for _letter in _letters:
        _HINT_INDEX[_letter] = (*_HINT_INDEX.get(_letter, ()), _lang)


def language_name(code: str | None) -> str:
    """English name of a language code detection reports (the code itself otherwise)."""
    return _NAMES.get(code or "", code or "unknown")


def _latin_scores(text: str) -> tuple[dict[str, float], int, int]:
    """Evidence per language that has any (the rest score 0), the word count and how many words
    carry non-ASCII letters. ASCII text skips the diacritic and hint-letter passes (it has none)."""
    lowered = text.lower()
    ascii_only = lowered.isascii()
    words = _ASCII_WORD.findall(lowered) if ascii_only else WORD.findall(lowered)
    scores: dict[str, float] = {}
    get = _WORD_LANGUAGES.get
    for word in words:
        languages = get(word)
        if languages:
            weight = 0.5 if len(word) == 1 else 1.0  # "a", "i", "y", "o" are words in many languages
            for lang in languages:
                scores[lang] = scores.get(lang, 0.0) + weight
    if ascii_only:
        return scores, len(words), 0
    foreign = sum(1 for word in words if not word.isascii())
    if foreign:
        scores["en"] = scores.get("en", 0.0) - 0.5 * foreign  # English words almost never carry diacritics
    special = Counter(_NON_ASCII.findall(lowered))
    if special:
        hits: dict[str, int] = {}
        for ch, n in special.items():
            for lang in _HINT_INDEX.get(ch, ()):
                hits[lang] = hits.get(lang, 0) + n
        for lang, n in hits.items():
            scores[lang] = scores.get(lang, 0.0) + min(_HINT_CAP, n * _HINT_WEIGHT)
        for lang, marks in _INVERTED.items():
            if any(special[ch] for ch in marks):
                scores[lang] = scores.get(lang, 0.0) + 1.0
    return scores, len(words), foreign


def _top_two(scores: dict[str, float]) -> list[tuple[str, float]]:
    """The two best languages when every language without evidence scores 0, ties in the order
    of ``languages.json`` (what sorting all of them would give, from the few that score)."""
    candidates = list(scores.items())
    missing = 2
    for lang in _ORDER:  # the first two languages without evidence: the best of the zeros
        if lang not in scores:
            candidates.append((lang, 0.0))
            missing -= 1
            if not missing:
                break
    candidates.sort(key=_RANK)
    return candidates[:2]


def _RANK(item: tuple[str, float]) -> tuple[float, int]:
    return -item[1], _ORDER[item[0]]


def guess_language(text: str) -> tuple[str | None, str]:
    """Guess the language of Latin-script ``text``: ``(code, why)``, code ``None`` if undecided.

    A language is named only with at least ``MIN_WORDS`` words, at least two points of
    evidence and a lead of at least one point over the runner-up (stop words count one point,
    one-letter stop words half, language-specific letters a quarter each, capped).
    """
    code, why, _ = guess(text)
    return code, why


def guess(text: str) -> tuple[str | None, str, bool]:
    """``(code, why, not_english)``; ``not_english`` may hold when the language is undecided:
    two other languages tie well ahead of English ("no puedo iniciar sesión": Spanish or
    Catalan), or several words carry letters English never uses and no English word is seen."""
    scores, n_words, foreign_words = _latin_scores(text)
    if n_words < MIN_WORDS:
        return None, f"only {n_words} word(s), too few to tell the language", False
    (best, top), (runner, second) = _top_two(scores)
    if top >= 2.0 and top - second >= 1.0:
        why = f"{language_name(best)} common words ({top:g} points, next {language_name(runner)} {second:g})"
        return best, why, best != "en"
    english = scores.get("en", 0.0)
    other = max((score for lang, score in scores.items() if lang != "en"), default=0.0)
    other = max(other, 0.0) if len(scores) - ("en" in scores) < len(_ORDER) - 1 else other
    not_english = (other >= 1.5 and other - english >= 1.5) or (foreign_words >= 2 and english <= 0)
    if top < 2.0:
        why = f"no language has enough common words among {n_words} words"
    else:
        why = f"{language_name(best)} and {language_name(runner)} are about as likely"
    return None, why + ("; not English" if not_english else ""), not_english
