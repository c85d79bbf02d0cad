"""Judging one piece of text (script and language), and finding a foreign segment in a state.

Each string leaf, and each sentence or line inside it, is judged on its own. A segment written
in another script family than the state, or a Latin segment whose language is decided and is not
the state's language, is the state's ``mixed_segment``: one Spanish field in an English ticket
is such a segment. At most ``MAX_SEGMENTS`` sentences are judged one by one.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import regex

from .languages import (
    ASCII_WORDS,
    ascii_word_points,
    ascii_words,
    explain_reading,
    language_name,
    may_lead_english,
    may_read_otherwise,
    read_latin,
    reads_as_ascii,
)
from .scripts import count_scripts, family, first_run, script_language

MAX_SEGMENTS = 32  # sentences judged one by one when looking for a foreign segment
# Sentence or line boundaries used to find a foreign sentence inside one long string.
_SEGMENT_SPLIT = regex.compile(r"(?<=[.!?。！？])\s+|\n+")
# What every boundary of _SEGMENT_SPLIT holds: a sentence end and a space (the stdlib's \s
# takes every space the regex module's does, and a few more), or a line break.
_MAY_SPLIT = re.compile("[.!?。！？]\\s|\n")
_NON_LATIN_LETTERS = regex.compile(r"(?V1)[\p{L}--\p{sc=Latin}]+")


def judge(text: str, counts: dict[str, int] | None = None, *, why: bool = True) -> dict[str, Any]:
    """Script and language of one piece of text (``counts``: its script counts, if known).

    ``why`` is the phrase saying how the language was decided; ``why=False`` leaves it ``None``
    (a sentence judged while looking for a foreign one: nobody reads it). A Latin verdict also
    carries ``evidence``, the language scores :func:`find_mixed` bounds its search with.
    """
    if counts is None:
        counts = {}
        count_scripts(text, counts)
    letters = sum(counts.values())
    if not letters:
        return {"script": None, "language": None, "letters": 0, "why": "no letters", "not_english": False,
                "evidence": None}
    script = max(counts, key=counts.__getitem__) if len(counts) > 1 else next(iter(counts))
    if script == "Han" and counts.get("Hangul", 0):
        script = "Hangul"  # Korean written with some Hanja
    if script == "Latin":
        latin = text if counts["Latin"] == letters else _NON_LATIN_LETTERS.sub(" ", text)
        language, not_english, reading = read_latin(latin)
        return {"script": script, "language": language, "letters": letters,
                "why": explain_reading(reading, not_english) if why else None,
                "not_english": not_english, "evidence": reading[-1]}
    language = script_language(script, text, counts)
    return {"script": script, "language": language, "letters": letters,
            "why": f"{script} script" + (f" → {language_name(language)}" if language else "") if why else None,
            "not_english": True, "evidence": None}


def find_mixed(per_leaf: list[tuple[str, str, dict[str, int]]], overall: dict[str, Any],
               whole: str) -> dict[str, Any] | None:
    """The first segment unlike the state as a whole (``overall`` is the :func:`judge` of the
    state's ``whole`` text).

    Text read as ASCII (:func:`~.languages.reads_as_ascii`) in a Latin state can only be foreign
    by its language, and its common words alone decide that (:func:`~.languages.may_read_otherwise`): a
    whole state read as ASCII whose words cannot read otherwise, or in an English or undecided
    state give no language a lead over English (:func:`~.languages.may_lead_english`), has no
    foreign part (most English states), and such a segment whose words cannot is not judged.
    """
    language = overall["language"]
    latin_state = overall["script"] == "Latin"
    if latin_state and reads_as_ascii(whole) and (not _whole_may_differ(overall) or (
            language in ("en", None) and not may_lead_english(ascii_words(whole)))):
        return None
    state_family = family(overall["script"])
    single = len(per_leaf) == 1
    for path, text, counts in _segments_of(per_leaf, skip_whole=single):
        if latin_state and reads_as_ascii(text):
            words = ascii_words(text)
            if not may_read_otherwise(len(words), ascii_word_points(words), language, part=True):
                continue
        judged = judge(text, counts, why=False)
        if _is_foreign(judged, language, state_family):
            return _segment(path, text, judged)
    return None


def find_mixed_ascii(text: str, words: list[bytes], language: str | None,
                     evidence: tuple[Any, ...]) -> dict[str, Any] | None:
    """:func:`find_mixed` for a state that is one ASCII string (most states) with these
    ``words`` that reads as ``language`` with ``evidence`` (its
    :func:`~.languages.ascii_evidence`), finding its sentences with bytes methods instead of
    the sentence regex. In an English or undecided state, a sentence is foreign only with a
    language one point ahead of English (:func:`~.languages.may_lead_english`).

    ``text.translate`` marks sentence ends and spaces, ``replace`` turns the first space after
    a sentence end into a line break, and ``split`` cuts at line breaks: the non-blank pieces are
    the sentences :data:`_SEGMENT_SPLIT` finds, in the same order and number, with the same
    words (they differ only in the spaces and signs around them). Only a sentence whose words may
    read otherwise is then cut out by the regex and judged.
    """
    if not may_read_otherwise(evidence[1], evidence[3], language):
        return None
    marked = text.encode("ascii").translate(_ASCII_SENTENCES).replace(b". ", b".\n")
    pieces = [piece for piece in marked.split(b"\n") if piece.strip()]
    if len(pieces) < 2 or language in ("en", None) and not may_lead_english(words):
        return None
    parts: list[str] | None = None
    for i, piece in enumerate(pieces[:MAX_SEGMENTS]):
        piece_words = piece.translate(ASCII_WORDS).split()
        if not may_read_otherwise(len(piece_words), ascii_word_points(piece_words), language, part=True):
            continue
        if parts is None:
            parts = [p for p in _SEGMENT_SPLIT.split(text) if p.strip()]
        judged = judge(parts[i], why=False)
        if _is_foreign(judged, language, "Latin"):
            return _segment(f"$#{i}", parts[i], judged)
    return None


# ASCII bytes for find_mixed_ascii: letters lowered, sentence ends (.!?) as ".", the spaces a
# sentence end may be followed by (\t \v \f \r and space) as " ", line breaks kept; the other
# characters str.strip() removes (\x1c-\x1f), which do not end a sentence, as "\v"; everything
# else as "#", a sign that is neither a letter nor a space.
_ASCII_SENTENCES = bytes(
    b | 0x20 if chr(b).isalpha() else ord(".") if chr(b) in ".!?" else b if b == 0x0A
    else 0x20 if chr(b) in "\t\v\f\r " else 0x0B if 0x1C <= b <= 0x1F else ord("#")
    for b in range(128)
) + b"#" * 128


def _whole_may_differ(overall: dict[str, Any]) -> bool:
    """Whether a part of an ASCII Latin state may be foreign (:func:`may_read_otherwise`)."""
    evidence = overall["evidence"]
    return may_read_otherwise(evidence[1], evidence[3], overall["language"])


def _is_foreign(judged: dict[str, Any], language: str | None, state_family: str | None) -> bool:
    """Whether a judged segment is unlike a state of ``language`` written in ``state_family``."""
    if judged["letters"] < 4:
        return False
    if family(judged["script"]) != state_family:
        return True
    return judged["script"] == "Latin" and (
        judged["language"] is not None and judged["language"] != language
        # in a state of undecided language only a non-English part is news
        and (language is not None or judged["language"] != "en")
        # a part that is surely not English, though its language is unknown
        or judged["language"] is None and judged["not_english"] and language == "en"
    )


def _segment(path: str, text: str, judged: dict[str, Any]) -> dict[str, Any]:
    """A state's ``mixed_segment``."""
    return {"path": path, "script": judged["script"], "language": judged["language"],
            "not_english": judged["not_english"], "text": text[:60]}


def _segments_of(per_leaf: list[tuple[str, str, dict[str, int]]], *,
                 skip_whole: bool) -> Iterator[tuple[str, str, dict[str, int] | None]]:
    """Each leaf, each run of a foreign script family in it, and each sentence or line of it,
    with its script counts when known (``None``: to count)."""
    judged_segments = 0
    for path, text, counts in per_leaf:
        if not counts:
            continue
        if not skip_whole:
            yield path, text, counts
        main = family(max(counts, key=counts.__getitem__))
        for script, n in counts.items():
            if n >= 4 and family(script) != main:  # "Hello Иван Петров" inside one sentence
                yield path, first_run(text, script), None
        if not _MAY_SPLIT.search(text):  # no sentence end or line break: one part, no regex split
            continue
        parts = [p for p in _SEGMENT_SPLIT.split(text) if p.strip()]
        if len(parts) > 1:
            for i, part in enumerate(parts):
                if judged_segments >= MAX_SEGMENTS:
                    return
                judged_segments += 1
                yield f"{path}#{i}", part, None
