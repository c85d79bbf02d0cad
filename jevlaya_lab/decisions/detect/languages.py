"""Which language Latin-script text is written in, offline: common words and telltale letters.

Latin text is scored against the common-word lists of 27 languages plus letters that only some
languages use (``ñ``, ``ß``, ``ł``, ``ř``, ``ő``, ...); the lists and the language names are data,
in ``languages.json`` beside this module. Fewer than ``MIN_WORDS`` words, or no clear winner, is
*undecided*; undecided text can still be surely *not English* (two other languages tie well
ahead of English, or several words carry letters English never uses and no English word is seen).

Scores are counted in quarter points, one number per language, packed into one Python integer
per word (32 bits per language); the score of a text is the sum of its words' integers, added in
C, unpacked once into an ``array`` (see :func:`_latin_scores`). A common word scores one point
for each language that has it (one-letter words half a point), a telltale letter a quarter
point (at most ``_HINT_CAP`` per language), ``¿``/``¡`` one point for Spanish; each word with a
non-ASCII letter takes half a point from English.
"""

from __future__ import annotations

import json
import sys
from array import array
from pathlib import Path
from typing import Any

import regex

from .text import letters_are_ascii

MIN_WORDS = 3  # fewer Latin words than this is too little evidence to name a language

_DATA = json.loads((Path(__file__).with_name("languages.json")).read_text(encoding="utf-8"))
STOPWORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words.split()) for lang, words in _DATA["stopwords"].items()
}
# Letters that only a few Latin-script languages use; each occurrence is weak evidence.
HINT_LETTERS: dict[str, str] = _DATA["hint_letters"]
_NAMES: dict[str, str] = _DATA["names"]
_HINT_QUARTERS = 1  # a telltale letter: a quarter point
_HINT_CAP = 8  # quarter points: hint letters alone never outweigh a couple of stop words
_INVERTED = {"es": "¿¡"}  # punctuation unique to one language

WORD = regex.compile(r"\p{L}+")
_NON_ASCII = regex.compile(r"[^\x00-\x7f]")

LANGUAGES: tuple[str, ...] = tuple(STOPWORDS)
"""The languages scored, in the order of ``languages.json``; a tie goes to the one listed first."""
_EN = LANGUAGES.index("en")
_POSITION = {lang: i for i, lang in enumerate(LANGUAGES)}
_BITS = 32  # per language in a packed score; a field stays under 2**29 for texts under 2**27 words
_SCORE_BYTES = _BITS // 8 * len(LANGUAGES)
assert array("i").itemsize * 8 == _BITS

# word -> its quarter points for every language it is a common word of, packed (one-letter
# words, "a", "i", "y", "o", are words in many languages and count half). ASCII words are also
# kept as bytes, for the bytes fast path of _latin_scores.
_WORD_POINTS: dict[str, int] = {}
for _lang, _words in STOPWORDS.items():
    for _word in _words:
        _WORD_POINTS[_word] = _WORD_POINTS.get(_word, 0) + ((2 if len(_word) == 1 else 4) << _BITS * _POSITION[_lang])
_ASCII_WORD_POINTS = {word.encode("ascii"): points for word, points in _WORD_POINTS.items() if word.isascii()}
# ASCII letters lowered, every other byte a space: ``text.encode().translate(ASCII_WORDS).split()``
# are the words ``[a-z]+`` of the lowered text, found in C.
ASCII_WORDS = bytes(b | 0x20 if b < 128 and chr(b).isalpha() else 0x20 for b in range(256))
# letter -> the positions of the languages that use it
_HINT_INDEX: dict[str, tuple[int, ...]] = {}
for _lang, _letters in HINT_LETTERS.items():
    for _letter in _letters:
        _HINT_INDEX[_letter] = (*_HINT_INDEX.get(_letter, ()), _POSITION[_lang])
_INVERTED_AT = {_POSITION[lang]: marks for lang, marks in _INVERTED.items()}

Evidence = tuple[Any, ...]
"""``(points, words, foreign words, word points)``: quarter points per language (an ``array``
indexed like :data:`LANGUAGES`), the word count, how many words carry non-ASCII letters, and the
packed quarter points of the common words alone (:func:`_latin_scores`)."""

# Masks over packed word points, for :func:`may_read_otherwise`: a 32-bit field holds at least 8
# (two points) when one of its bits 3-31 is set, and at least 6 (1.5 points) when, besides, both
# bits 1 and 2 are set.
_AT_LEAST_8 = (1 << _BITS) - 8
_BUT_EN_AT_LEAST_8 = sum(_AT_LEAST_8 << _BITS * i for i in range(len(LANGUAGES)) if i != _EN)
_BUT_EN_BIT_1 = sum(2 << _BITS * i for i in range(len(LANGUAGES)) if i != _EN)
_BUT_AT_LEAST_8 = {lang: sum(_AT_LEAST_8 << _BITS * i for i in range(len(LANGUAGES)) if i != own)
                   for lang, own in _POSITION.items()}
_FIELD = (1 << _BITS) - 1
# the packed points of each ASCII common word that is not an English one (see may_lead_english)
_NOT_ENGLISH_POINTS = {word: points for word, points in _ASCII_WORD_POINTS.items()
                       if word.decode("ascii") not in STOPWORDS["en"]}
_BUT_EN_AT_LEAST_4 = sum(((1 << _BITS) - 4) << _BITS * i for i in range(len(LANGUAGES)) if i != _EN)
_LEAD_BIT = 1 << 30
_EVERY_FIELD = sum(1 << _BITS * i for i in range(len(LANGUAGES)))  # times n: n in every field
_LEAD_BUT = {own: _LEAD_BIT * (_EVERY_FIELD - (1 << _BITS * own)) for own in range(len(LANGUAGES))}


def language_name(code: str | None) -> str:
    """English name of a language code detection reports (the code itself otherwise)."""
    return _NAMES.get(code or "", code or "unknown")


def _latin_scores(text: str) -> Evidence:
    """The :data:`Evidence` of Latin-script ``text``.

    Text whose letters are all ASCII (most states) is split into words by one
    ``bytes.translate`` and ``split`` and scored by one ``sum`` of packed integers, all in C; it
    has no diacritics or telltale letters to look for (``¿`` / ``¡``, signs that count for
    Spanish, send text to the general path). Other text is lowered and split by a regex first.
    """
    if reads_as_ascii(text):
        return ascii_evidence(ascii_words(text))
    return _unicode_scores(text)


def reads_as_ascii(text: str) -> bool:
    """Whether ``text`` is read as ASCII text: its letters are all ASCII and it has no ``¿`` /
    ``¡`` (which count for Spanish), so its common words are all its evidence."""
    return letters_are_ascii(text) and "¿" not in text and "¡" not in text


def _unicode_scores(text: str) -> Evidence:
    """:func:`_latin_scores` of any text, by the general path (regex words, hint letters)."""
    lowered = text.lower()
    words = WORD.findall(lowered)
    packed = sum(filter(None, map(_WORD_POINTS.get, words)))
    points = array("i", packed.to_bytes(_SCORE_BYTES, sys.byteorder))
    if lowered.isascii():
        return points, len(words), 0, packed
    foreign = len(words) - sum(map(str.isascii, words))
    points[_EN] -= 2 * foreign  # English words almost never carry diacritics
    special = _NON_ASCII.findall(lowered)
    hits: dict[int, int] = {}
    for ch in set(special).intersection(_HINT_INDEX):  # the telltale letters present
        n = special.count(ch)
        for lang in _HINT_INDEX[ch]:
            hits[lang] = hits.get(lang, 0) + n
    for lang, n in hits.items():
        points[lang] += min(_HINT_CAP, n * _HINT_QUARTERS)
    for lang, marks in _INVERTED_AT.items():
        if any(mark in lowered for mark in marks):
            points[lang] += 4
    return points, len(words), foreign, packed


def ascii_words(text: str) -> list[bytes]:
    """The words of ``text`` whose letters are all ASCII (:func:`~.text.letters_are_ascii`),
    lowered, as bytes (one ``encode``, ``translate`` and ``split``, in C; a sign becomes ``?``)."""
    return text.encode("ascii", "replace").translate(ASCII_WORDS).split()


def ascii_word_points(words: list[bytes]) -> int:
    """The packed quarter points of :func:`ascii_words` (one ``sum`` of integers, in C)."""
    return sum(filter(None, map(_ASCII_WORD_POINTS.get, words)))


def ascii_evidence(words: list[bytes]) -> Evidence:
    """The :data:`Evidence` of ASCII text from its :func:`ascii_words`."""
    packed = ascii_word_points(words)
    return _unpacked(packed, len(words)), len(words), 0, packed


_NO_POINTS = array("i", bytes(_SCORE_BYTES))  # read only: see _unpacked


def _unpacked(packed: int, n_words: int) -> array[int]:
    """Quarter points per language from packed ones (all zeros for fewer than ``MIN_WORDS``
    words, which name no language whatever they score, so nothing is unpacked)."""
    if n_words < MIN_WORDS:
        return _NO_POINTS
    return array("i", packed.to_bytes(_SCORE_BYTES, sys.byteorder))


def _top_two(points: array[int]) -> tuple[int, int, int, int]:
    """``(best, its points, runner-up, its points)``: positions in :data:`LANGUAGES`, ties to
    the one listed first in ``languages.json`` (one sort of 27 numbers and ``index``, in C)."""
    ordered = sorted(points)
    top, second = ordered[-1], ordered[-2]
    best = points.index(top)
    runner = points.index(second, best + 1) if second == top else points.index(second)
    return best, top, runner, second


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
    code, not_english, reading = read_latin(text)
    return code, explain_reading(reading, not_english), not_english


def read_latin(text: str) -> tuple[str | None, bool, tuple[Any, ...]]:
    """``(code, not_english, reading)`` of Latin-script ``text``, as :func:`guess` decides them;
    ``reading`` is what :func:`explain_reading` turns into the *why* phrase, so a caller that
    never shows the phrase (a sentence judged while looking for a foreign one) skips formatting
    it. ``reading[-1]`` is the text's evidence (:func:`_latin_scores`)."""
    return read_evidence(_latin_scores(text))


def read_evidence(evidence: Evidence) -> tuple[str | None, bool, tuple[Any, ...]]:
    """:func:`read_latin` from the text's :data:`Evidence`."""
    points, n_words, foreign_words, _ = evidence
    if n_words < MIN_WORDS:
        return None, False, ("few", n_words, evidence)
    best, top, runner, second = _top_two(points)
    if top >= 8 and top - second >= 4:  # two points, one ahead of the runner-up
        return LANGUAGES[best], best != _EN, ("decided", best, top, runner, second, evidence)
    english = points[_EN]
    other = _best_other(points)
    not_english = (other >= 6 and other - english >= 6) or (foreign_words >= 2 and english <= 0)
    if top < 8:
        return None, not_english, ("thin", n_words, evidence)
    return None, not_english, ("tie", best, runner, evidence)


def explain_reading(reading: tuple[Any, ...], not_english: bool) -> str:
    """The *why* phrase of a :func:`read_latin` reading."""
    kind = reading[0]
    if kind == "few":
        return f"only {reading[1]} word(s), too few to tell the language"
    if kind == "decided":
        _, best, top, runner, second, _ = reading
        return (f"{_NAME_AT[best]} common words ({_points_text(top)} points, "
                f"next {_NAME_AT[runner]} {_points_text(second)})")
    if kind == "thin":
        why = f"no language has enough common words among {reading[1]} words"
    else:
        why = (f"{language_name(LANGUAGES[reading[1]])} and {language_name(LANGUAGES[reading[2]])} "
               "are about as likely")
    return why + ("; not English" if not_english else "")


_NAME_AT = tuple(language_name(code) for code in LANGUAGES)
_POINTS_TEXT = tuple(f"{quarters / 4:g}" for quarters in range(1024))  # "9.5" for 38 quarter points


def _points_text(quarters: int) -> str:
    """Quarter points as the *why* phrase writes points (``f"{points:g}"``), from a table."""
    return _POINTS_TEXT[quarters] if 0 <= quarters < 1024 else f"{quarters / 4:g}"


def may_read_otherwise(n_words: int, packed: int, language: str | None, *, part: bool = False) -> bool:
    """Whether ASCII text of ``n_words`` words whose common words score ``packed``
    (:func:`ascii_word_points`) could read as another language than ``language`` (``None``:
    undecided, where only a language other than English is news), or as surely not English when
    ``language`` is English.

    ASCII text has no telltale letters or foreign words, so its common words are all its
    evidence: it names a language only with three words and two points for it, and is surely not
    English only with 1.5 points for another language; when no field of its packed word points
    reaches that, it reads as ``language`` or as nothing, which one bitwise test shows. That
    holds for every part of the text as well (a part has no more points for any language than
    the whole), so a ``False`` for a whole ASCII state means none of its fields or sentences can
    be foreign. ``part=True`` asks about the text alone (a sentence judged on its own), and adds
    a second test: to read as another language, or as surely not English, the text needs a
    language one point ahead of ``language`` (of English when undecided). ``False`` is a proof,
    ``True`` only a maybe.
    """
    if n_words < MIN_WORDS:
        return False
    if language == "en":
        reaches = packed & _BUT_EN_AT_LEAST_8 or packed & (packed >> 1) & _BUT_EN_BIT_1
    elif language is None:
        reaches = packed & _BUT_EN_AT_LEAST_8
    else:
        reaches = packed & _BUT_AT_LEAST_8[language]
    if not reaches or not part:
        return bool(reaches)
    own = _POSITION[language or "en"]
    # Every field f of packed becomes 2**30 + f - mine - 4: no field goes below 0 or reaches
    # 2**31 (fields stay below 2**29; detection reads at most 4,000 characters), so no field
    # borrows from or carries into the next, and bit 30 of a field is set exactly when
    # f >= mine + 4.
    mine = (packed >> _BITS * own) & _FIELD
    return bool((packed + (_LEAD_BIT - mine - 4) * _EVERY_FIELD) & _LEAD_BUT[own])


def may_lead_english(words: list[bytes]) -> bool:
    """Whether some part of ASCII text with these :func:`ascii_words` (a sentence, a field)
    could have a language one point ahead of English, as a part needs to read as another
    language than English, or as surely not English.

    A word scores the same for every language that has it (one point, half for one letter), so
    a word English has too never puts another language ahead of English; only the points of
    words English lacks can, and a part has no more of them than the whole text. When no
    language has one point of them, no part can lead. ``False`` is a proof, ``True`` a maybe.
    """
    return bool(sum(filter(None, map(_NOT_ENGLISH_POINTS.get, words))) & _BUT_EN_AT_LEAST_4)


def _best_other(points: array[int]) -> int:
    """The most points of a language other than English."""
    return max(max(points[:_EN], default=0), max(points[_EN + 1:], default=0))
