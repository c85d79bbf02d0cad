"""Do two versions of the code route the same way? Dump, then compare, ``detect()`` and ``route()``.

    PYTHONPATH=/work/main .venv/bin/python bench/route_corpus.py --dump /tmp/before.jsonl
    PYTHONPATH=$PWD       .venv/bin/python bench/route_corpus.py --dump /tmp/after.jsonl --compare /tmp/before.jsonl

A speed change to routing must not change a single decision, so this writes, for every state of
a fixed corpus, ``detect(state)``, ``Router().route(state, explain=True)`` and
``Router.laya().route(state, questions, explain=True)`` (``elapsed_us`` removed: it is a
timing), what an ``on_route`` hook saw (the context's decision and model, whether it had a run
id and a parent call id), and a few requests down the other rules of the chain (``model``,
``task``, ``lang``, ``lang_guess``), one JSON line per state. ``--compare`` reads an earlier
dump and prints the first differing lines; the exit status is 1 when anything differs.

The corpus is built at run time, nothing of it is stored here: the fresh hand-written states
(``tests/data/fresh``), every text of the three intent datasets when ``JEVLAYA_DATA_DIR`` or
``/work/shared/datasets`` has them, seeded word salads from the stop-word lists of all 27
languages (with the letters only some of them use, sentence ends and line breaks), text in ten
scripts, two that detection does not tell apart and letters of no script, mixed with Latin,
3,000 texts with typographic signs, odd spaces, emoji and inverted marks between their words, and
nested states (dicts, lists, tuples, bytes, numbers, long texts
past the detection budget, many sentences past the segment budget).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]

# letters of other scripts (ranges of code points), mixed into the generated states
SCRIPT_RANGES = {
    "Cyrillic": (0x0410, 0x044F), "Greek": (0x0391, 0x03C9), "Arabic": (0x0627, 0x064A),
    "Hebrew": (0x05D0, 0x05EA), "Han": (0x4E00, 0x4FFF), "Hiragana": (0x3041, 0x3093),
    "Katakana": (0x30A1, 0x30F3), "Hangul": (0xAC00, 0xAD00), "Devanagari": (0x0905, 0x0939),
    "Thai": (0x0E01, 0x0E2E),
    # scripts detection does not tell apart ("Other"), and letters of the Common script
    "Runic": (0x16A0, 0x16EA), "Tifinagh": (0x2D30, 0x2D67), "Common": (0x02B0, 0x02C1),
}
PUNCTUATION = [" ", " ", " ", " ", ", ", ". ", "! ", "? ", "\n", "\n\n", "。", "？", " - ", "; ", "\t", "  "]


def fresh_texts() -> Iterator[str]:
    for path in sorted((ROOT / "tests" / "data" / "fresh").glob("*.tsv")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
        for row in csv.DictReader(lines, delimiter="\t"):
            yield row.get("email") or row.get("message") or row.get("text") or next(iter(row.values()))


def dataset_texts() -> Iterator[str]:
    root = next((Path(p) for p in (os.environ.get("JEVLAYA_DATA_DIR"), "/work/shared/datasets")
                 if p and (Path(p) / "clinc150").is_dir()), None)
    if root is None:
        print("route_corpus: no intent datasets found (set JEVLAYA_DATA_DIR); using the rest", file=sys.stderr)
        return
    for split in json.loads((root / "clinc150" / "data_full.json").read_text()).values():
        for text, _ in split:
            yield text
    for name in ("train.csv", "test.csv"):
        with open(root / "banking77" / name, encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                yield row["text"]
    for name in ("train_kfold1.json", "test_kfold1.json"):
        data = json.loads((root / "hwu64" / name).read_text())
        for example in data["rasa_nlu_data"]["common_examples"]:
            yield example["text"]


def salads(rng: random.Random, n: int) -> Iterator[str]:
    """Word salads: stop words of one, two or three languages, hint letters, other words."""
    from jevlaya_lab.decisions.detect.languages import HINT_LETTERS, STOPWORDS

    langs = sorted(STOPWORDS)
    vocab = {lang: sorted(words) for lang, words in STOPWORDS.items()}
    plain = ["order", "refund", "Paket", "pedido", "commande", "zamówienie", "objednávka", "4411",
             "ÉCOLE", "İstanbul", "straße", "ÅRHUS", "naïve", "café", "x", "I", "A", "Ñandú", "#12",
             "e-mail", "don't", "l'été", "¿Dónde", "¡Hola", "«oui»", "ǅemal", "ﬁnance"]
    for _ in range(n):
        chosen = rng.sample(langs, rng.choice((1, 1, 2, 3)))
        words = []
        for _ in range(rng.choice((0, 1, 2, 3, 4, 5, 8, 12, 20, 40))):
            roll = rng.random()
            if roll < 0.7:
                word = rng.choice(vocab[rng.choice(chosen)])
            elif roll < 0.85:
                word = rng.choice(plain)
            else:
                letters = HINT_LETTERS.get(rng.choice(chosen)) or "abc"
                word = "".join(rng.choice(letters + "aeiourst") for _ in range(rng.randint(1, 7)))
            if rng.random() < 0.15:
                word = word.capitalize() if rng.random() < 0.5 else word.upper()
            words.append(word)
            words.append(rng.choice(PUNCTUATION))
        yield "".join(words).strip() if rng.random() < 0.8 else "".join(words)


SIGNS = ["\u2019", "\u201c", "\u201d", " \u2014 ", "\u2026", "\u00a0", ".\u00a0", ".\u2009", "\u3000", "\U0001f642",
         "\u00ab", "\u00bb", "\u00bf", "\u00a1", "\u3002", "\uff01", "\u00b5", "\u00b0", "\u20ac", "\u2028"]


def signed(rng: random.Random, texts: list[str], n: int) -> Iterator[str]:
    """Corpus texts with typographic signs, odd spaces, emoji, inverted marks and CJK sentence
    ends put between their words (letters stay ASCII unless a sign is a letter, like µ)."""
    for _ in range(n):
        words = rng.choice(texts).split(" ")
        yield "".join(w + (rng.choice(SIGNS) if rng.random() < 0.3 else " ") for w in words).strip()


def script_texts(rng: random.Random, n: int) -> Iterator[str]:
    """Runs of ten scripts, alone or mixed with Latin words, digits and punctuation."""
    names = sorted(SCRIPT_RANGES)
    latin = ["the", "order", "is", "late", "el", "pedido", "no", "ha", "llegado", "and", "please", "Иван"]
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 8)):
            roll = rng.random()
            if roll < 0.6:
                lo, hi = SCRIPT_RANGES[rng.choice(names)]
                pieces.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12))))
            elif roll < 0.9:
                pieces.append(rng.choice(latin))
            else:
                pieces.append(str(rng.randint(0, 9999)))
            pieces.append(rng.choice(PUNCTUATION))
        yield "".join(pieces)


def nested(rng: random.Random, texts: list[str], n: int) -> Iterator[Any]:
    """Dicts, lists, tuples, bytes and scalars holding corpus texts."""
    for _ in range(n):
        kind = rng.randrange(7)
        pick = [rng.choice(texts) for _ in range(rng.randint(1, 4))]
        if kind == 0:
            yield {"subject": pick[0], "body": " ".join(pick[1:]), "id": rng.randint(0, 99)}
        elif kind == 1:
            yield [{"role": "user", "content": t} for t in pick]
        elif kind == 2:
            yield (pick[0], [pick[-1], None, 3.5], {"nested": {"deeper": pick[0]}})
        elif kind == 3:
            yield {"bytes": pick[0].encode("utf-8") + (b"\xff" if rng.random() < 0.3 else b""), "n": True}
        elif kind == 4:
            yield " ".join(pick) * rng.choice((30, 80))  # past the 4,000-character budget
        elif kind == 5:
            yield ". ".join(pick * 12)  # past the 32-sentence budget
        else:
            yield {"a b": pick[0], "1x": [pick[-1]], "": "", "list": []}


def corpus() -> Iterator[Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    import decisions as bench_decisions
    import routing as bench_routing

    rng = random.Random(13)
    texts = list(fresh_texts()) + list(dataset_texts())
    generated = list(salads(rng, 4000)) + list(script_texts(rng, 1500))
    generated += list(signed(rng, texts[:3000] + generated[:2000], 3000))
    yield from bench_decisions.ROUTE_STATES
    yield from bench_routing.STATES.values()
    yield from ["", " ", "1234", "!!!", "a", "I", "ok", "no", "Ñ", "ß", "\n\n", "é é é é"]
    yield from texts
    yield from generated
    yield from nested(rng, texts + generated, 3000)


def _plain(value: Any) -> Any:
    """The decision without its timing, as JSON-ready data."""
    value = json.loads(json.dumps(value, ensure_ascii=False, default=repr))
    if isinstance(value, dict) and isinstance(value.get("explain"), dict):
        value["explain"].pop("elapsed_us", None)
    return value


class Seen:
    """An ``on_route`` hook that records what it saw."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def on_route(self, ctx: Any) -> None:
        self.seen.append({"decision": _plain(ctx.decision), "model": ctx.model, "states": len(ctx.states),
                          "run_id": bool(ctx.run_id), "parent_id": bool(ctx.parent_id),
                          "questions": ctx.questions is not None})


def dump(path: str) -> int:
    from jevlaya_lab.decisions import detect as detection
    from jevlaya_lab.decisions.router import Router

    plain, laya = Router(), Router.laya()
    seen = Seen()
    hooked = Router.laya(hooks=[seen])
    questions = {"intent": {"type": "choice", "instructions": "What?", "criteria": {"a": "", "b": ""}}}
    triage = {q: {"type": "noul", "instructions": "x"} for q in sorted(laya.workflows.get("triage", ()))}
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for i, state in enumerate(corpus()):
            row: dict[str, Any] = {"i": i, "detect": detection.detect(state),
                                   "route": _plain(plain.route(state, explain=True)),
                                   "laya": _plain(laya.route(state, questions, explain=True))}
            if i % 7 == 0:
                row["chain"] = [_plain(laya.route(state, lang=lang, explain=True)) for lang in ("es", "en-US", "und")]
                row["chain"].append(_plain(laya.route(state, task="english")))
                row["chain"].append(_plain(laya.route(state, model="english", questions=triage)))
                row["chain"].append(_plain(Router.laya(auto_task_detection=True).route(state, triage, explain=True)))
                row["chain"].append(_plain(plain.route(state, lang_guess=lambda s: None, explain=True)))
            if i % 5 == 0:
                seen.seen.clear()
                row["hooked"] = _plain(hooked.route(state, questions if i % 2 else None, explain=True))
                batch = [{"state": state}, {"state": "hola amigo, ¿qué tal?"}]
                row["hooked_batch"] = [_plain(d) for d in hooked.route_batch(batch)]
                row["seen"] = list(seen.seen)
            out.write(json.dumps(row, ensure_ascii=False) + "\n")  # key order is compared too
            count += 1
    print(f"route_corpus: {count} states written to {path}")
    return count


def compare(path: str, earlier: str) -> int:
    with open(path, encoding="utf-8") as now, open(earlier, encoding="utf-8") as before:
        # split("\n"), not splitlines(): a state's text may hold U+2028, which JSON leaves as is
        new, old = now.read().rstrip("\n").split("\n"), before.read().rstrip("\n").split("\n")
    differing = [i for i, (a, b) in enumerate(zip(new, old)) if a != b]
    for i in differing[:5]:
        print(f"state {i} differs:\n  before {old[i][:1500]}\n  now    {new[i][:1500]}")
    if len(new) != len(old):
        print(f"route_corpus: {len(new)} states now, {len(old)} before")
    print(f"route_corpus: {len(differing)} of {min(len(new), len(old))} states differ")
    return 1 if differing or len(new) != len(old) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", required=True, help="write one JSON line per state here")
    parser.add_argument("--compare", help="an earlier --dump to compare with")
    args = parser.parse_args()
    dump(args.dump)
    return compare(args.dump, args.compare) if args.compare else 0


if __name__ == "__main__":
    sys.exit(main())
