"""Which language Latin-script text is written in, offline: common words and telltale letters.

Latin text is scored against the common-word lists of 27 languages plus letters that only some
languages use (``ñ``, ``ß``, ``ł``, ``ř``, ``ő``, ...); the lists and the language names are data,
in ``languages.json`` beside this module. Fewer than ``MIN_WORDS`` words, or no clear winner, is
*undecided*; undecided text can still be surely *not English* (two other languages tie well
ahead of English, or several words carry letters English never uses and no English word is seen).
"""

from __future__ import annotations

import heapq
import json
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
_NON_ASCII = regex.compile(r"[^\x00-\x7f]")

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
    """Evidence per language, the word count and how many words carry non-ASCII letters."""
    lowered = text.lower()
    words = WORD.findall(lowered)
    scores = dict.fromkeys(STOPWORDS, 0.0)
    foreign = 0
    for word in words:
        weight = 0.5 if len(word) == 1 else 1.0  # "a", "i", "y", "o" are words in many languages
        for lang in _WORD_LANGUAGES.get(word, ()):
            scores[lang] += weight
        if not word.isascii():
            foreign += 1
            scores["en"] -= 0.5  # English words almost never carry diacritics
    special = Counter(_NON_ASCII.findall(lowered))
    if special:
        hits: dict[str, int] = {}
        for ch, n in special.items():
            for lang in _HINT_INDEX.get(ch, ()):
                hits[lang] = hits.get(lang, 0) + n
        for lang, n in hits.items():
            scores[lang] += min(_HINT_CAP, n * _HINT_WEIGHT)
        for lang, marks in _INVERTED.items():
            if any(special[ch] for ch in marks):
                scores[lang] += 1.0
    return scores, len(words), foreign


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
    (best, top), (runner, second) = heapq.nlargest(2, scores.items(), key=lambda item: item[1])
    if top >= 2.0 and top - second >= 1.0:
        why = f"{language_name(best)} common words ({top:g} points, next {language_name(runner)} {second:g})"
        return best, why, best != "en"
    english = scores["en"]
    other = max(score for lang, score in scores.items() if lang != "en")
    not_english = (other >= 1.5 and other - english >= 1.5) or (foreign_words >= 2 and english <= 0)
    if top < 2.0:
        why = f"no language has enough common words among {n_words} words"
    else:
        why = f"{language_name(best)} and {language_name(runner)} are about as likely"
    return None, why + ("; not English" if not_english else ""), not_english
