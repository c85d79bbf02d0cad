"""The statement reader left one dataset out: unseen labels and statements with and without it.

    .venv/bin/python bench/reader_lodo.py --emotions DIR [--held clinc150 ...] [--pool-cache PREFIX]

For each held-out dataset (CLINC150, BANKING77, HWU64): ``jevlaya-lab train`` of ``mini-en``'s
recipe on the two others (``--calibrate-dir tests/data/fresh``, as shipped), then a statement
reader trained on top of it with ``training.reader.build_reader`` as ``--reader-only`` trains the
shipped one, its intents limited to the two datasets; both never see the held dataset. Scored on
the held dataset's *test* utterances, through the Agent (the full label set is a question of more
options than the reader reads, answered by the prior alone: ``bench/quality.py``'s
leave-one-dataset-out reports it):

- **choices as users ask them**: ``--questions`` questions of 3-8 of the held dataset's labels
  (seeded), the options the bare label words or the labels with their held-out description
  (``eval_description``), asked with an instruction no training row uses, ``--per-option`` test
  utterances per option; accuracy with the reader reading the options, without it (the checkpoint
  alone: the prior), and the untrained cosine of the same encoder;
- **yes/no**: the held-out statements (``eval_statement``) on test utterances, half true, half a
  near intent's (``real_data.zero_shot_noul``): balanced accuracy at 0.5 and AUC, with and without
  the reader, and the cosine at the split's median (which no model can know).

Prints a table per dataset and the mean; writes ``bench/results/reader_lodo.json``. Each dataset
takes a head training (minutes with ``--pool-cache``) and a reader training (tens of minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from quality import _auc, _bal_at, _cosine_probs  # noqa: E402  (bench/quality.py's scoring)

RESULTS = ROOT / "bench" / "results" / "reader_lodo.json"
USER_INSTRUCTIONS = ("Which one is it?", "Sort this message.", "Where does this go?", "What fits?",
                     "Pick the matching topic for this one.")
"""Instructions a user might write, used by no training row (checked against ``real_data.INSTRUCTIONS``)."""


def user_choices(intents: dict, held: str, test: list, n: int, per_option: int, seed: int) -> list[tuple[dict, list]]:
    """``n`` user-sized choice questions over ``held``'s labels with ``(text, gold index)`` rows."""
    rng = random.Random(seed)
    keys = sorted(k for k, v in intents.items() if v.dataset == held)
    said: dict[str, list[str]] = {}
    for u in test:
        said.setdefault(u.intent, []).append(u.text)
    out = []
    for _ in range(n):
        options = rng.sample([k for k in keys if said.get(k)], rng.randint(3, 8))
        labels = [intents[k].intent.replace("_", " ") for k in options]
        criteria = labels if rng.random() < 0.5 else {lb: intents[k].eval_description for lb, k in zip(labels, options)}
        rows = [(t, i) for i, k in enumerate(options) for t in rng.sample(said[k], min(per_option, len(said[k])))]
        out.append(({"type": "choice", "instructions": rng.choice(USER_INSTRUCTIONS), "criteria": criteria}, rows))
    return out


def _choice_accuracy(agent, questions) -> float:
    hits = total = 0
    for question, rows in questions:
        names = list(question["criteria"])
        answers = agent.predict_batch([t for t, _ in rows], {"q": question})
        for a, (_, gold) in zip(answers, rows):
            probs = a["answers"]["q"]["probabilities"]
            hits += max(names, key=probs.__getitem__) == names[gold]
            total += 1
    return hits / max(1, total)


def _cosine_accuracy(agent, questions) -> float:
    from jevlaya_lab.decisions.encoding import row_tokenizer
    from jevlaya_lab.decisions.prior_inputs import PriorBuilder

    builder = PriorBuilder(agent.decision_model, row_tokenizer(agent.tokenizer))
    hits = total = 0
    for question, rows in questions:
        top = [p.index(1.0) for p in _cosine_probs(builder, agent.tokenizer, [t for t, _ in rows], question)]
        hits += sum(t == g for t, (_, g) in zip(top, rows))
        total += len(rows)
    return hits / max(1, total)


def _yes_no(agent, rows) -> tuple[list[float], list[bool]]:
    by_statement: dict[str, list[tuple[str, bool]]] = {}
    for text, statement, truth in rows:
        by_statement.setdefault(statement, []).append((text, truth))
    scores, truth = [], []
    for statement, items in by_statement.items():
        answers = agent.predict_batch([t for t, _ in items], {"q": {"type": "noul", "instructions": statement}})
        scores += [a["answers"]["q"]["noul"] for a in answers]
        truth += [t for _, t in items]
    return scores, truth


def run_held(held: str, args: argparse.Namespace) -> dict:
    import torch

    from jevlaya_lab.decisions.agent import Agent
    from jevlaya_lab.decisions.training import cli as train_cli
    from jevlaya_lab.decisions.training.datasets import DATASETS, load_dataset
    from jevlaya_lab.decisions.training.intents import load_intents
    from jevlaya_lab.decisions.training.reader import ReaderTraining, build_reader
    from jevlaya_lab.decisions.training.real_data import zero_shot_noul
    from jevlaya_lab.decisions.training.trainer import statement_z

    others = [d for d in DATASETS if d != held]
    intents = load_intents()
    test = load_dataset(held, args.data_dir)["test"]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ck"
        argv = ["--name", "mini-en", "--datasets", ",".join(others), "--out", str(out), "--seed", str(args.seed),
                "--calibrate-dir", str(ROOT / "tests" / "data" / "fresh")]
        if args.data_dir:
            argv += ["--data-dir", args.data_dir]
        if args.pool_cache:
            argv += ["--pool-cache", args.pool_cache]
        if train_cli.main(argv) != 0:
            raise SystemExit(f"training without {held} failed")
        agent = Agent(str(out), model_id=f"mini-en without {held}")
    torch.set_num_threads(args.threads)  # the training command sets its own
    head_s = time.perf_counter() - started
    training = ReaderTraining(layers=args.layers, steps=args.steps, seed=args.seed)
    reader, config = build_reader(agent, training, data_dir=args.data_dir, emotions=args.emotions,
                                  datasets=others, log=lambda m: print(m, flush=True))
    reader_s = time.perf_counter() - started - head_s
    model = agent.decision_model
    plain = model.prior.config
    reading = dataclasses.replace(plain, reader=config)
    unread_choices = reading.with_choice_weight(0.0)
    questions = user_choices(intents, held, test, args.questions, args.per_option, args.seed)
    noul = zero_shot_noul(random.Random(args.seed + 1).sample(test, min(args.noul_rows, len(test))), intents,
                          seed=args.seed)
    result: dict = {"held": held, "reader": config.to_value(), "head_s": round(head_s), "reader_s": round(reader_s)}
    model.reader, model.prior.config = reader, reading
    result["choices_with_reader"] = _choice_accuracy(agent, questions)
    scores, truth = _yes_no(agent, noul)
    result["yesno_with_reader"] = {"balanced": _bal_at(scores, truth, 0.5), "auc": _auc(scores, truth)}
    model.prior.config = unread_choices
    result["choices_without_reader"] = _choice_accuracy(agent, questions)
    model.reader, model.prior.config = None, plain
    scores, truth = _yes_no(agent, noul)
    result["yesno_without_reader"] = {"balanced": _bal_at(scores, truth, 0.5), "auc": _auc(scores, truth)}
    result["choices_cosine"] = _cosine_accuracy(agent, questions)
    _, z = statement_z(model, agent.tokenizer, [r[0] for r in noul], [r[1] for r in noul])
    cos, gold = z.tolist(), [r[2] for r in noul]  # z: each statement's cosine, standardised (same ranking)
    result["yesno_cosine"] = {"balanced_at_median": _bal_at(cos, gold, statistics.median(cos)),
                              "auc": _auc(cos, gold)}
    result = {k: (round(v, 4) if isinstance(v, float) else
                  {kk: round(vv, 4) for kk, vv in v.items()} if isinstance(v, dict) and k != "reader" else v)
              for k, v in result.items()}
    print(json.dumps(result), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    from jevlaya_lab.decisions.training.datasets import DATASETS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--held", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--emotions", default=None, help="GoEmotions' folder (train.tsv, labels.txt), as for --reader-only")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--questions", type=int, default=60)
    p.add_argument("--per-option", type=int, default=8)
    p.add_argument("--noul-rows", type=int, default=1200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pool-cache", default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    results = [run_held(h, args) for h in args.held]
    keys = ("choices_with_reader", "choices_without_reader", "choices_cosine")
    print(f"\n{'held out':<10}" + "".join(f"{k:>24}" for k in keys) + f"{'yes/no bal with / without / cos@median':>42}")
    for r in results:
        print(f"{r['held']:<10}" + "".join(f"{r[k]:>24.3f}" for k in keys)
              + f"{r['yesno_with_reader']['balanced']:>18.3f} / {r['yesno_without_reader']['balanced']:.3f}"
              f" / {r['yesno_cosine']['balanced_at_median']:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    previous.update({r["held"]: r for r in results})
    Path(args.out).write_text(json.dumps(previous, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
