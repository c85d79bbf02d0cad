"""Unicode scripts: which letters a text is written in, and the language a script implies.

Only letters count (``\\p{L}``), grouped by their Unicode script property; digits, punctuation,
emoji and combining marks are ignored. A non-Latin script names its language directly where one
language dominates it (Hangul → ``ko``, kana → ``ja``, Greek → ``el``, ...), refined by telltale
letters for Cyrillic and Arabic.
"""

from __future__ import annotations

import re
from typing import Any

import regex

from .text import letters_are_ascii, string_leaves

# Scripts told apart; letters of any other script are counted as "Other".
SCRIPTS: tuple[str, ...] = (
    "Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Han", "Hiragana", "Katakana", "Hangul",
    "Devanagari", "Bengali", "Gurmukhi", "Gujarati", "Oriya", "Tamil", "Telugu", "Kannada",
    "Malayalam", "Sinhala", "Thai", "Lao", "Tibetan", "Myanmar", "Khmer", "Georgian", "Armenian",
    "Ethiopic", "Mongolian", "Thaana", "Syriac", "Bopomofo", "Cherokee",
)
LETTER_RUN = regex.compile(r"\p{L}+")
SCRIPT_RUN = regex.compile(
    "(?V1)" + "|".join(f"([\\p{{sc={name}}}&&\\p{{L}}]+)" for name in SCRIPTS)
    # letters of any other script; letters of the Common script (e.g. the kana length mark) count for none
    + r"|([\p{L}--[\p{sc=Common}\p{sc=Inherited}]]+)"
)
LATIN_RUN = regex.compile(r"(?V1)[\p{sc=Latin}&&\p{L}]+")

# Scripts that one language (practically) owns.
SCRIPT_LANGUAGE: dict[str, str] = {
    "Greek": "el", "Hebrew": "he", "Hangul": "ko", "Hiragana": "ja", "Katakana": "ja",
    "Devanagari": "hi", "Bengali": "bn", "Gurmukhi": "pa", "Gujarati": "gu", "Oriya": "or",
    "Tamil": "ta", "Telugu": "te", "Kannada": "kn", "Malayalam": "ml", "Sinhala": "si",
    "Thai": "th", "Lao": "lo", "Tibetan": "bo", "Myanmar": "my", "Khmer": "km",
    "Georgian": "ka", "Armenian": "hy", "Ethiopic": "am", "Mongolian": "mn", "Thaana": "dv",
    "Syriac": "syr", "Bopomofo": "zh", "Cherokee": "chr", "Han": "zh",
}
# Scripts written together by one language count as one family when looking for mixing.
FAMILY: dict[str, str] = {"Han": "CJK", "Hiragana": "CJK", "Katakana": "CJK", "Bopomofo": "CJK",
                    "Hangul": "CJK"}


# Every ASCII byte that is not a letter: deleting them from ASCII text leaves its letters.
_ASCII_NON_LETTERS = bytes(b for b in range(128) if not chr(b).isalpha())


class _ScriptTags(dict[int, Any]):
    """``str.translate`` table: code point -> one tag character per script (``chr(i + 1)`` for
    ``SCRIPTS[i]``, ``_OTHER`` for letters of another script), ``None`` (deleted) for what is not
    a letter or is a letter of the Common or Inherited script (which ``SCRIPT_RUN`` counts for
    none). Each code point is classified by the same regex classes once, when first seen;
    Unicode data does not change, so this memo holds no state of any text."""

    def __missing__(self, code: int) -> str | None:
        char = chr(code)
        tag = None
        if _COUNTED_LETTER.match(char):
            tag = next((chr(i + 1) for i, cls in enumerate(_SCRIPT_CLASSES) if cls.match(char)), _OTHER)
        if len(self) < 1 << 16:  # a bound, whatever characters arrive
            self[code] = tag
        return tag


_COUNTED_LETTER = regex.compile(r"(?V1)[\p{L}--[\p{sc=Common}\p{sc=Inherited}]]")
_SCRIPT_CLASSES = [regex.compile(f"(?V1)[\\p{{sc={name}}}&&\\p{{L}}]") for name in SCRIPTS]
_OTHER = chr(len(SCRIPTS) + 1)
_SCRIPT_TAGS = _ScriptTags()


def count_scripts(text: str, counts: dict[str, int]) -> None:
    """Add the letters of ``text`` per script to ``counts`` (scripts in order of first letter).

    Text whose letters are all ASCII (most states; :func:`~.text.letters_are_ascii`) is counted
    with one C-level byte deletion: its letters are ``[A-Za-z]``, all Latin. Other text is
    tagged letter by letter with one ``str.translate`` (:class:`_ScriptTags`) and each script's
    tag counted. A letter of a script outside ``SCRIPTS`` starts an "Other" run that
    ``SCRIPT_RUN`` extends over the letters after it, whatever their script; text holding one is
    counted by the regex run by run.
    """
    if letters_are_ascii(text):  # the signs around ASCII letters are dropped with the encoding
        latin = len(text.encode("ascii", "ignore").translate(None, _ASCII_NON_LETTERS))
        if latin:
            counts["Latin"] = counts.get("Latin", 0) + latin
        return
    tags = text.translate(_SCRIPT_TAGS)
    if _OTHER not in tags:
        for tag in sorted(set(tags), key=tags.index):  # in order of first letter, as runs are read
            name = SCRIPTS[ord(tag) - 1]
            counts[name] = counts.get(name, 0) + tags.count(tag)
        return
    for run in LETTER_RUN.finditer(text):
        letters_run = run.group()
        if letters_run.isascii():
            counts["Latin"] = counts.get("Latin", 0) + len(letters_run)
            continue
        for piece in SCRIPT_RUN.finditer(letters_run):
            index = piece.lastindex or 0
            name = SCRIPTS[index - 1] if index <= len(SCRIPTS) else "Other"
            counts[name] = counts.get(name, 0) + len(piece.group())


def script_letters(state: Any) -> dict[str, int]:
    """Letters per Unicode script over the string leaves of ``state`` (largest first)."""
    counts: dict[str, int] = {}
    for _, text in string_leaves(state):
        count_scripts(text, counts)
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def script_profile(state: Any) -> dict[str, float]:
    """Share of letters per script, largest first, rounded to 4 decimals (``{}`` if no letters)."""
    counts = script_letters(state)
    total = sum(counts.values())
    return {name: round(n / total, 4) for name, n in counts.items()} if total else {}


# Letters that tell a language of a shared script, checked in this order (the first found decides).
_CYRILLIC_TELLTALES = tuple((lang, frozenset(letters)) for lang, letters in (
    ("uk", "їєґ"), ("be", "ў"), ("kk", "әғқңөұүһ"), ("mk", "ќѓѕ"), ("sr", "ђћ"), ("ru", "ыэё"),
    ("uk", "і"), ("sr", "јљњџ"), ("bg", "ъ")))
_ARABIC_TELLTALES = ((("ur", frozenset("ٹڈڑںے"))), ("fa", frozenset("پچژگی")))
# one scan finds which telltale letters a text holds; the lists above then decide in their order
_CYRILLIC_TELLTALE = re.compile("[" + "".join(sorted(set().union(*(s for _, s in _CYRILLIC_TELLTALES)))) + "]")
_ARABIC_TELLTALE = re.compile("[" + "".join(sorted(set().union(*(s for _, s in _ARABIC_TELLTALES)))) + "]")


def script_language(script: str, text: str, counts: dict[str, int]) -> str | None:
    """The language a non-Latin script implies, refined by telltale letters."""
    if script in {"Han", "Hiragana", "Katakana"}:
        if counts.get("Hiragana", 0) + counts.get("Katakana", 0):
            return "ja"
        return "zh"
    if script == "Cyrillic":
        present = set(_CYRILLIC_TELLTALE.findall(text.lower()))
        for lang, letters in _CYRILLIC_TELLTALES:
            if not letters.isdisjoint(present):
                return lang
        return "ru" if sum(counts.values()) >= 20 else None
    if script == "Arabic":
        present = set(_ARABIC_TELLTALE.findall(text))
        for lang, letters in _ARABIC_TELLTALES:
            if not letters.isdisjoint(present):
                return lang
        return "ar"
    return SCRIPT_LANGUAGE.get(script)


def family(script: str | None) -> str | None:
    """The script family used when looking for mixing (Han, kana and Hangul are one: CJK)."""
    return FAMILY.get(script, script) if script else None


def first_run(text: str, script: str) -> str:
    """The letter runs of ``script`` inside ``text``, joined by spaces."""
    index = SCRIPTS.index(script) + 1 if script in SCRIPTS else len(SCRIPTS) + 1
    pieces = [m.group() for m in SCRIPT_RUN.finditer(text) if (m.lastindex or 0) == index]
    return " ".join(pieces)
