"""The multilingual phrase banks: complete, well-formed, in the right scripts, and disjoint from the
hand-written multilingual evaluation set (which only this test reads, never the bank's author)."""

from __future__ import annotations

import csv
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from jevlaya_lab.decisions.training import bank, bank_multi
from jevlaya_lab.decisions.training.bank_multi import (
    GREETINGS_ML,
    LANGUAGES,
    SENTIMENT_PHRASES_ML,
    TRIAGE_REQUESTS_ML,
    URGENCY_PHRASES_ML,
)

EVAL_FILE = Path(__file__).resolve().parents[1] / "data" / "eval_multi_triage.tsv"
# the Unicode script names (first word of unicodedata.name) a language's letters should come from
SCRIPTS = {
    "ru": {"CYRILLIC"}, "uk": {"CYRILLIC"}, "ar": {"ARABIC"}, "hi": {"DEVANAGARI"}, "zh": {"CJK"},
    "ja": {"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"}, "ko": {"HANGUL"},
    "es": {"LATIN"}, "fr": {"LATIN"}, "de": {"LATIN"}, "pt": {"LATIN"}, "it": {"LATIN"}, "tr": {"LATIN"},
}
# letters a native writer of each Latin-script language uses and English does not
SIGNATURE_LETTERS = {"es": "ñáéíóú¿", "fr": "éèêàçùœ", "de": "äöüß", "pt": "ãõçâêôá", "it": "àèìòù",
                     "tr": "ışğçöüİ"}
UKRAINIAN_ONLY = set("іїєґ")
RUSSIAN_ONLY = set("ыэъё")
SLOT = "\x00"  # stands in for a placeholder; never part of an n-gram


def _all_phrases(lang: str) -> Iterator[str]:
    for phrases in TRIAGE_REQUESTS_ML[lang].values():
        yield from phrases
    for phrases in SENTIMENT_PHRASES_ML[lang].values():
        yield from phrases
    for phrases in URGENCY_PHRASES_ML[lang]:
        yield from phrases
    yield from GREETINGS_ML[lang]


def _request_letters(lang: str) -> list[str]:
    text = "".join(p for phrases in TRIAGE_REQUESTS_ML[lang].values() for p in phrases)
    return [ch for ch in text.replace("{order}", "").replace("{amount}", "") if unicodedata.category(ch).startswith("L")]


def _script(ch: str) -> str:
    return unicodedata.name(ch, "UNKNOWN").split()[0]


def test_languages_tuple_and_every_bank_covers_exactly_those_languages() -> None:
    """Rule: LANGUAGES lists the 13 ISO codes and each of the four banks is keyed by exactly them."""
    assert LANGUAGES == ("es", "fr", "de", "pt", "it", "ru", "uk", "ar", "hi", "zh", "ja", "ko", "tr")
    for name in ("TRIAGE_REQUESTS_ML", "SENTIMENT_PHRASES_ML", "URGENCY_PHRASES_ML", "GREETINGS_ML"):
        assert tuple(getattr(bank_multi, name)) == LANGUAGES, name


@pytest.mark.parametrize("lang", LANGUAGES)
def test_intents_equal_english_bank_with_six_distinct_requests_each(lang: str) -> None:
    """Rule: the 8 intents are exactly bank.TRIAGE_REQUESTS keys, >= 6 non-empty requests per intent."""
    requests = TRIAGE_REQUESTS_ML[lang]
    assert list(requests) == list(bank.TRIAGE_REQUESTS)
    for intent, phrases in requests.items():
        assert len(set(phrases)) >= 6, (lang, intent, len(phrases))
        assert all(p.strip() for p in phrases), (lang, intent, "empty request")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_sentiment_has_five_phrases_per_polarity_and_only_neutral_may_be_empty_once(lang: str) -> None:
    """Rule: negative/neutral/positive with >= 5 phrases each; "" at most once and only in neutral."""
    sentiment = SENTIMENT_PHRASES_ML[lang]
    assert list(sentiment) == ["negative", "neutral", "positive"]
    assert list(sentiment) == list(bank.SENTIMENT_PHRASES)
    for polarity, phrases in sentiment.items():
        non_empty = [p for p in phrases if p]
        assert len(non_empty) >= 5, (lang, polarity)
        assert phrases.count("") <= (1 if polarity == "neutral" else 0), (lang, polarity)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_urgency_has_four_levels_of_four_phrases_and_empty_only_in_calm_levels(lang: str) -> None:
    """Rule: 4 priority levels with >= 4 real phrases each; "" at most once, and only at levels 0 and 1."""
    levels = URGENCY_PHRASES_ML[lang]
    assert len(levels) == 4 == len(bank.URGENCY_PHRASES)
    for level, phrases in enumerate(levels):
        assert len([p for p in phrases if p]) >= 4, (lang, level)
        assert phrases.count("") <= (1 if level < 2 else 0), (lang, level)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_greetings_have_four_openings_with_at_most_one_empty(lang: str) -> None:
    """Rule: >= 4 greetings per language, "" allowed once."""
    greetings = GREETINGS_ML[lang]
    assert len([g for g in greetings if g]) >= 4, lang
    assert greetings.count("") <= 1, lang


@pytest.mark.parametrize("lang", LANGUAGES)
def test_only_order_and_amount_placeholders_format_cleanly(lang: str) -> None:
    """Rule: placeholders are {order} and {amount} only; every phrase formats without error."""
    for phrase in _all_phrases(lang):
        filled = phrase.format(order="#12345", amount="$49.90")
        assert "{" not in filled and "}" not in filled, (lang, phrase)
    requests = [p for phrases in TRIAGE_REQUESTS_ML[lang].values() for p in phrases]
    assert any("{order}" in p for p in requests), (lang, "no request uses {order}")
    assert any("{amount}" in p for p in requests), (lang, "no request uses {amount}")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_no_duplicate_phrase_within_a_language(lang: str) -> None:
    """Rule: no phrase appears twice in a language, across all four banks (the allowed "" aside)."""
    counts = Counter(p.strip().casefold() for p in _all_phrases(lang) if p)
    assert [p for p, n in counts.items() if n > 1] == [], lang


@pytest.mark.parametrize("lang", LANGUAGES)
def test_request_text_is_mostly_in_the_languages_script(lang: str) -> None:
    """Rule: at least 60 % of the letters of a language's intent phrases are in its expected script,
    and every request has at least one letter of that script."""
    letters = _request_letters(lang)
    share = sum(_script(ch) in SCRIPTS[lang] for ch in letters) / len(letters)
    assert share >= 0.6, (lang, round(share, 2))
    for phrases in TRIAGE_REQUESTS_ML[lang].values():
        for phrase in phrases:
            assert any(_script(ch) in SCRIPTS[lang] for ch in phrase), (lang, phrase)


@pytest.mark.parametrize("lang", sorted(SIGNATURE_LETTERS))
def test_latin_languages_use_their_own_letters(lang: str) -> None:
    """Rule: native scripts - Latin-script banks use the accented letters of their language
    (a bank written without any would be English-keyboard text only)."""
    used = {ch for p in _all_phrases(lang) for ch in p.lower()} & set(SIGNATURE_LETTERS[lang].lower())
    assert len(used) >= 3, (lang, sorted(used))


def test_turkish_uses_dotless_i_s_cedilla_and_soft_g() -> None:
    """Rule: Turkish with its letters."""
    text = "".join(_all_phrases("tr"))
    assert {"ı", "ş", "ğ"} <= set(text)


def test_ukrainian_is_ukrainian_and_russian_is_russian() -> None:
    """Rule: Ukrainian contains some of і/ї/є/ґ and none of ы/э/ъ/ё; Russian contains none of і/ї/є/ґ."""
    ukrainian = set("".join(_all_phrases("uk")).lower())
    russian = set("".join(_all_phrases("ru")).lower())
    assert len(ukrainian & UKRAINIAN_ONLY) >= 3, sorted(ukrainian & UKRAINIAN_ONLY)
    assert ukrainian & RUSSIAN_ONLY == set()
    assert russian & UKRAINIAN_ONLY == set()
    assert russian & RUSSIAN_ONLY, "Russian bank uses none of ы/э/ъ/ё"


def test_japanese_requests_use_kana_and_chinese_uses_no_kana_or_traditional_forms() -> None:
    """Rule: Japanese with kana/kanji (every request has kana); Chinese is Simplified (no kana, none of
    the common Traditional-only characters)."""
    for phrases in TRIAGE_REQUESTS_ML["ja"].values():
        for phrase in phrases:
            assert any(_script(ch) in {"HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"} for ch in phrase), phrase
    chinese = "".join(_all_phrases("zh"))
    assert not any(_script(ch) in {"HIRAGANA", "KATAKANA"} for ch in chinese)
    assert set(chinese) & set("們這個來時會說對過還為與從問題號單帳戶費錢發貨運態請謝嗎") == set()


# ------------------------------------------------------------------ leakage against the evaluation set


def _keep(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LMN"


def _segments(text: str) -> list[str]:
    """Lower-cased NFKC text cut at placeholder slots, so no n-gram spans a placeholder."""
    return unicodedata.normalize("NFKC", text).casefold().split(SLOT)


def _word_grams(text: str, n: int = 5) -> set[tuple[str, ...]]:
    grams: set[tuple[str, ...]] = set()
    for segment in _segments(text):
        words = "".join(ch if _keep(ch) else " " for ch in segment).split()
        grams.update(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return grams


def _char_grams(text: str, n: int = 8) -> set[str]:
    grams: set[str] = set()
    for segment in _segments(text):
        chars = "".join(ch for ch in segment if _keep(ch))
        grams.update(chars[i:i + n] for i in range(len(chars) - n + 1))
    return grams


def _eval_messages() -> list[str]:
    lines = [line for line in EVAL_FILE.read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]
    rows = list(csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]  # header first
    return [row[-1] for row in rows]  # the state text is the last column


def test_no_bank_phrase_shares_five_words_or_eight_cjk_characters_with_the_evaluation_set() -> None:
    """Rule: leakage - no bank phrase shares a run of 5 consecutive words (zh/ja: 8 consecutive
    characters) with any evaluation message. Failures name the bank phrase only, so the evaluation
    text stays unseen by whoever fixes the bank."""
    messages = _eval_messages()
    assert messages, f"{EVAL_FILE} holds no states"
    eval_words = set().union(*(_word_grams(m) for m in messages))
    eval_chars = set().union(*(_char_grams(m) for m in messages))
    leaked = []
    for lang in LANGUAGES:
        for phrase in _all_phrases(lang):
            text = phrase.format(order=SLOT, amount=SLOT)
            grams = _char_grams(text) & eval_chars if lang in {"zh", "ja"} else _word_grams(text) & eval_words
            if grams:
                leaked.append((lang, phrase))
    assert leaked == []


def test_leakage_check_detects_a_shared_run() -> None:
    """Rule: leakage - the n-gram check itself finds a 5-word run across punctuation and case, and an
    8-character CJK run, but not a run broken by a placeholder."""
    assert _word_grams("Hola, ¿DÓNDE está mi paquete ahora?") & _word_grams("dónde está mi paquete ahora mismo")
    assert not _word_grams(f"dónde está {SLOT} mi paquete ahora") & _word_grams("dónde está mi paquete ahora")
    assert _char_grams("请问我的快递到底在哪里呢") & _char_grams("我的快递到底在哪里！")
    assert not _char_grams("我的快递到底在") & _char_grams("我的快递到底在哪里")
