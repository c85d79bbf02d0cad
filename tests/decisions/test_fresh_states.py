"""The fresh hand-written evaluation states (``tests/data/fresh/``): well-formed, labelled
with the presets' own label sets, split about one third ``dev`` per stratum, in the right scripts,
and independent of everything training reads (the phrase banks and the public datasets).

The ``test`` split is locked: only ``bench/quality.py`` reports it. This module reads it only to
check its form and its independence, and the last test makes sure no training code names the files.
"""

from __future__ import annotations

import csv
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.training import bank, bank_multi, written
from jevlaya_lab.decisions.training.datasets import default_data_dir

ROOT = Path(__file__).resolve().parents[2]
FRESH = ROOT / "tests" / "data" / "fresh"
TRAINING_CODE = ROOT / "jevlaya_lab" / "decisions" / "training"
# read-only public data ($JEVLAYA_DATA_DIR or shared/datasets beside the checkout); the tests that
# read it are marked public_datasets (tests/conftest.py: skipped when absent, failed under CI=true)
DATASETS = default_data_dir() or ROOT.parent / "shared" / "datasets"

LANGUAGES = ("es", "fr", "de", "pt", "it", "ru", "uk", "ar", "hi", "zh", "ja", "ko", "tr")
CJK_LANGS = {"zh", "ja", "ko"}
BOOL = {"true", "false"}


def _levels(levels: list[str]) -> set[str]:
    return {str(i) for i in range(len(levels))}


# file -> (columns, stratum column, {column: allowed values}, minimum rows, minimum rows per label)
SPECS: dict[str, tuple[list[str], str, dict[str, set[str]], int, int]] = {
    "en_triage.tsv": (["split", "intent", "sentiment", "priority", "message"], "intent",
                      {"intent": set(presets.TRIAGE_INTENTS), "sentiment": set(presets.SENTIMENTS),
                       "priority": _levels(presets.PRIORITY_LEVELS)}, 130, 14),
    "en_email.tsv": (["split", "category", "needs_reply", "email"], "category",
                     {"category": set(presets.EMAIL_CATEGORIES), "needs_reply": BOOL}, 60, 6),
    "en_moderation.tsv": (["split", "category", "toxicity", "text"], "category",
                          {"category": set(presets.MODERATION_CATEGORIES),
                           "toxicity": _levels(presets.TOXICITY_LEVELS)}, 50, 6),
    "en_guard.tsv": (["split", "attack", "user_input"], "attack",
                     {"attack": set(presets.GUARD_ATTACKS)}, 40, 6),
    "en_router.tsv": (["split", "route", "complexity", "needs_tools", "request"], "route",
                      {"route": set(presets.ROUTES), "complexity": _levels(presets.COMPLEXITY_LEVELS),
                       "needs_tools": BOOL}, 50, 6),
    "multi_triage.tsv": (["split", "lang", "intent", "sentiment", "priority", "message"], "intent",
                         {"lang": set(LANGUAGES), "intent": set(presets.TRIAGE_INTENTS),
                          "sentiment": set(presets.SENTIMENTS),
                          "priority": _levels(presets.PRIORITY_LEVELS)}, 286, 0),
}
ENGLISH = [name for name in SPECS if name.startswith("en_")]


@lru_cache(maxsize=None)
def _read(name: str) -> tuple[str, list[str], tuple[dict[str, str], ...]]:
    """(comment line, header, rows as dicts); fails on any malformed line."""
    lines = (FRESH / name).read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "", f"{name}: must end with a newline"
    lines = lines[:-1]
    comment, header, body = lines[0], lines[1].split("\t"), lines[2:]
    rows = []
    for number, line in enumerate(body, start=3):
        cells = line.split("\t")
        assert len(cells) == len(header), f"{name}:{number}: {len(cells)} cells, header has {len(header)}"
        assert all(c == c.strip() and c for c in cells), f"{name}:{number}: empty or padded cell"
        assert "\r" not in line, f"{name}:{number}: carriage return inside a row"
        rows.append(dict(zip(header, cells, strict=True)))
    return comment, header, tuple(rows)


def _rows(name: str) -> tuple[dict[str, str], ...]:
    return _read(name)[2]


def _text(name: str, row: dict[str, str]) -> str:
    return row[SPECS[name][0][-1]]


def _lang(name: str, row: dict[str, str]) -> str:
    return row.get("lang", "en")


@pytest.mark.parametrize("name", list(SPECS))
def test_file_parses_with_comment_header_and_valid_labels(name: str) -> None:
    columns, _, allowed, minimum, _ = SPECS[name]
    comment, header, rows = _read(name)
    assert comment.startswith("# ") and "split" in comment and "locked" in comment, comment
    assert header == columns
    assert len(rows) >= minimum, f"{name}: {len(rows)} rows, need at least {minimum}"
    for row in rows:
        assert row["split"] in {"dev", "test"}, row
        for column, values in allowed.items():
            assert row[column] in values, f"{name}: {column}={row[column]!r} not in {sorted(values)}"


@pytest.mark.parametrize("name", list(SPECS))
def test_every_label_value_is_covered(name: str) -> None:
    _, stratum, allowed, _, per_label = SPECS[name]
    counts = Counter(row[stratum] for row in _rows(name))
    short = {label: counts[label] for label in allowed[stratum] if counts[label] < max(per_label, 1)}
    assert not short, f"{name}: too few rows for {short} (need {per_label} each)"
    for column, values in allowed.items():  # the secondary labels vary too
        seen = {row[column] for row in _rows(name)}
        assert len(seen) >= min(2, len(values)), f"{name}: {column} takes only {seen}"


def test_english_total_and_derived_labels_are_balanced() -> None:
    assert sum(len(_rows(name)) for name in ENGLISH) >= 330
    triage = _rows("en_triage.tsv")
    urgent = sum(int(row["priority"]) >= 2 for row in triage)  # is_urgent is derived: priority >= 2
    assert 0.15 <= urgent / len(triage) <= 0.5, urgent
    emails = _rows("en_email.tsv")
    for row in emails:  # bulk mail and spam never expect a personal reply (the comment line's rule)
        if row["category"] in {"spam", "newsletter"}:
            assert row["needs_reply"] == "false", row
    assert {row["needs_reply"] for row in emails} == BOOL
    assert {row["needs_tools"] for row in _rows("en_router.tsv")} == BOOL
    assert sum(row["category"] == "ok" for row in _rows("en_moderation.tsv")) >= 10  # is_allowed: yes side
    assert sum(row["attack"] == "none" for row in _rows("en_guard.tsv")) >= 8  # is_safe: yes side


def test_multilingual_languages_and_intents() -> None:
    rows = _rows("multi_triage.tsv")
    per_lang = Counter(row["lang"] for row in rows)
    assert set(per_lang) == set(LANGUAGES)
    assert min(per_lang.values()) >= 22, per_lang
    cells = Counter((row["lang"], row["intent"]) for row in rows)
    thin = {cell: n for cell in ((lang, intent) for lang in LANGUAGES for intent in presets.TRIAGE_INTENTS)
            if (n := cells[cell]) < 2}
    assert not thin, f"each language needs every intent at least twice: {thin}"


def _strata(name: str) -> Iterator[tuple[Any, list[dict[str, str]]]]:
    stratum = SPECS[name][1]
    groups: dict[Any, list[dict[str, str]]] = {}
    for row in _rows(name):
        key = (row["lang"], row[stratum]) if "lang" in row else row[stratum]
        groups.setdefault(key, []).append(row)
        if "lang" in row:
            groups.setdefault(row["lang"], []).append(row)
    yield from groups.items()


@pytest.mark.parametrize("name", list(SPECS))
def test_about_one_third_dev_per_stratum(name: str) -> None:
    rows = _rows(name)
    share = sum(row["split"] == "dev" for row in rows) / len(rows)
    assert 0.28 <= share <= 0.40, f"{name}: dev share {share:.2f}"
    for key, group in _strata(name):
        n, dev = len(group), sum(row["split"] == "dev" for row in group)
        assert abs(dev - n / 3) <= max(1.0, 0.1 * n), f"{name}: stratum {key}: {dev} dev of {n}"
        assert 0 < dev < n, f"{name}: stratum {key} needs both dev and test rows ({dev} dev of {n})"


def _normal(text: str) -> str:
    """Lowercased, apostrophes dropped, other punctuation/symbols (and placeholders) as spaces."""
    text = re.sub(r"\{[a-z_]+\}", " \x00 ", text.lower())
    text = re.sub(r"['’‘`]", "", text)
    return "".join(c if c == "\x00" or unicodedata.category(c)[0] in "LNM" else " " for c in text)


def _word_runs(text: str, n: int = 5) -> set[str]:
    words = _normal(text).split()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1) if "\x00" not in words[i:i + n]}


def _char_runs(text: str, n: int = 8) -> set[str]:
    runs: set[str] = set()
    for part in "".join(_normal(text).split()).split("\x00"):
        runs.update(part[i:i + n] for i in range(len(part) - n + 1))
    return runs


def _strings(value: Any, seen: set[int] | None = None) -> Iterator[str]:
    """Every string inside a module value: containers, named tuples and plain objects, recursively."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, seen)
            yield from _strings(item, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item, seen)
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value) \
            and not hasattr(value, "__spec__"):
        yield from _strings(vars(value), seen)


@lru_cache(maxsize=1)
def _bank_strings() -> tuple[str, ...]:
    found: list[str] = []
    for module in (bank, bank_multi):
        for attribute, value in vars(module).items():
            if not attribute.startswith("__"):
                found.extend(_strings(value))
    return tuple(found)


@lru_cache(maxsize=1)
def _dataset_strings() -> tuple[str, ...]:
    """All utterances of the public datasets (empty when the read-only folder is absent)."""
    found: list[str] = []
    for path in sorted(DATASETS.rglob("*")) if DATASETS.is_dir() else []:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as handle:
                found.extend(row["text"] for row in csv.DictReader(handle) if row.get("text"))
        elif path.suffix == ".json":
            found.extend(text for text in _strings(json.loads(path.read_text(encoding="utf-8")))
                         if " " in text.strip())  # utterances, not label ids
    return tuple(found)


def test_training_sources_were_collected() -> None:
    strings = _bank_strings()
    assert len(strings) > 1000 and any("{order}" in s for s in strings)
    assert any("\u0456" in s for s in strings) and any("\u3042" <= c <= "\u30ff" for s in strings for c in s)
    if DATASETS.is_dir():
        assert len(_dataset_strings()) > 30000


def _overlaps(name: str, sources: tuple[str, ...]) -> list[tuple[str, str]]:
    words = set().union(*(_word_runs(s) for s in sources))
    chars = set().union(*(_char_runs(s) for s in sources if any(ord(c) > 0x2e7f for c in s)))
    latin = " ".join("".join(_normal(s).split()) for s in sources if s.isascii())
    found = []
    for row in _rows(name):
        text = _text(name, row)
        hit = next(iter(_word_runs(text) & words), None)
        if hit is None and _lang(name, row) in CJK_LANGS:
            runs = _char_runs(text)
            hit = next(iter(runs & chars), None) or next(
                (run for run in runs if run.isascii() and run in latin), None)
        if hit is not None:
            found.append((hit, text))
    return found


@pytest.mark.parametrize("name", list(SPECS))
def test_no_shared_runs_with_the_phrase_banks(name: str) -> None:
    found = _overlaps(name, _bank_strings())
    assert not found, f"{name}: shares a 5-word (CJK: 8-character) run with the training banks: {found[:5]}"


@pytest.mark.public_datasets
@pytest.mark.parametrize("name", list(SPECS))
def test_no_shared_runs_with_the_public_datasets(name: str) -> None:
    found = _overlaps(name, _dataset_strings())
    assert not found, f"{name}: shares a 5-word (CJK: 8-character) run with the datasets: {found[:5]}"


@lru_cache(maxsize=1)
def _written_strings() -> tuple[str, ...]:
    """The hand-written training states (``training/data/written``), written apart from these."""
    return tuple(state.text for state in written.load_written())


@pytest.mark.parametrize("name", list(SPECS))
def test_no_shared_runs_with_the_written_training_states(name: str) -> None:
    """The failure names the shared run and the *training* text holding it, never the evaluation
    state: whoever rewords a training text must not read the evaluation states to do it."""
    assert len(_written_strings()) > 1000
    found = _overlaps(name, _written_strings())
    culprits = [(run, next((w for w in _written_strings()
                            if run in _word_runs(w) or run in _char_runs(w) or run in "".join(_normal(w).split())),
                           "?"))
                for run, _ in found]
    assert not found, (f"{name}: {len(found)} evaluation states share a 5-word (CJK: 8-character) run with "
                       f"these written training states; reword them: {culprits[:5]}")


def test_no_duplicate_texts_across_all_files() -> None:
    seen: dict[str, str] = {}
    for name in SPECS:
        for row in _rows(name):
            key = " ".join(_normal(_text(name, row)).split())
            assert key not in seen, f"{name}: duplicate of a row in {seen.get(key)}: {_text(name, row)!r}"
            seen[key] = name


def test_text_lengths_vary() -> None:
    words = [len(_text(name, row).split()) for name in ENGLISH for row in _rows(name)]
    assert min(words) <= 4 and max(words) >= 70, (min(words), max(words))


# the Unicode script names (first word of unicodedata.name) a language's letters should come from
SCRIPTS = {
    "ru": {"CYRILLIC"}, "uk": {"CYRILLIC"}, "ar": {"ARABIC"}, "hi": {"DEVANAGARI"}, "zh": {"CJK"},
    "ja": {"CJK", "HIRAGANA", "KATAKANA"}, "ko": {"HANGUL"},
    "es": {"LATIN"}, "fr": {"LATIN"}, "de": {"LATIN"}, "pt": {"LATIN"}, "it": {"LATIN"}, "tr": {"LATIN"},
}


def _script(char: str) -> str:
    return unicodedata.name(char, "UNKNOWN").split()[0]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_multilingual_rows_are_in_the_language_script(lang: str) -> None:
    rows = [row["message"] for row in _rows("multi_triage.tsv") if row["lang"] == lang]
    for text in rows:
        letters = [c for c in text if unicodedata.category(c).startswith("L")]
        native = sum(_script(c) in SCRIPTS[lang] for c in letters)
        assert letters and native / len(letters) >= 0.5, f"{lang}: mostly foreign script: {text!r}"
        kana = any(_script(c) in {"HIRAGANA", "KATAKANA"} for c in text)
        if lang == "ja":
            assert kana, f"ja without kana reads as Chinese: {text!r}"
        if lang == "zh":
            assert not kana, f"zh with kana: {text!r}"
        if lang == "ru":
            assert not set(text.lower()) & set("іїєґ"), f"ru with Ukrainian letters: {text!r}"
        if lang == "uk":
            assert not set(text.lower()) & set("ыэъё"), f"uk with Russian-only letters: {text!r}"
    if lang == "uk":
        marked = sum(bool(set(text.lower()) & set("іїєґ")) for text in rows)
        assert marked >= 0.8 * len(rows), f"only {marked}/{len(rows)} uk rows use і/ї/є/ґ"


def test_training_code_never_names_the_fresh_files() -> None:
    names = ["fresh/", *SPECS]
    for path in sorted(TRAINING_CODE.rglob("*")):
        if path.is_file() and path.suffix in {".py", ".json", ".txt", ".md", ".cfg", ".toml"}:
            text = path.read_text(encoding="utf-8")
            named = [name for name in names if name in text]
            assert not named, f"{path.relative_to(ROOT)} names {named}: the locked test must not reach training"
