"""How many encoder layers the statement reader trains: the reader alone, scored on the dev statements.

The shipped statement reader (:mod:`jevlaya_lab.decisions.statement_reader`) trains copies of the
encoder's top layers; this script measures the choice of how many, with the reader's own pairs
(``training.reader``: intents' statements and descriptions, and with ``--emotions DIR`` the
GoEmotions statements) but a plain model: the bundled ``mini-en`` encoder (MiniLM-L6) reading
``[CLS] statement [SEP] state``, mean-pooled, one linear unit; every layer and the embeddings
trained, or with ``--trainable-layers N`` only the top ``N``. Scored on the dev yes/no questions
(``bench/user_questions.py``; the locked half is never read here): AUC per statement of the reader,
of the untrained cosine in the same run, and of their sum in standard units per statement (not the
shipped blend, which is one fit across statements); balanced accuracy at the reader's 0.5 and ECE.

Run: ``.venv/bin/python bench/joint_reader.py --steps 1500 --emotions DIR`` (``--trainable-layers``,
``--lr``, ``--hold-out``, ``--threads``, ``--batch``, ``--seed``).

Reading (1500 steps of 32, seed 0, with emotions; dev means over 22 statements, cosine 0.767): all
layers, lr 3e-5: reader 0.828, sum 0.839, balanced 0.718, ECE 0.119 (statements about the
hand-written messages 0.723 -> 0.826); the top 2 layers, lr 3e-5, 15 % of the intents held out:
reader 0.730, sum 0.796. The shipped 3 layers at 1e-4 are measured through the checkpoint itself
(``bench/quality.py --user-questions``: 0.833 in the shipped blend). The all-layer reader would
ship a second 45 MB encoder.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from user_questions import gold_rows, load_questions  # noqa: E402

from jevlaya_lab.decisions.training import metrics  # noqa: E402
from jevlaya_lab.decisions.training.cli import load_encoder  # noqa: E402
from jevlaya_lab.decisions.training.intents import split_intents  # noqa: E402
from jevlaya_lab.decisions.training.reader import emotion_pairs, intent_pairs  # noqa: E402


class JointReader(nn.Module):
    """Encoder over the pair, mean-pooled, one linear unit: the statement's log-odds."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.out = nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.out(pooled).squeeze(-1)


def _auc(scores: list[float], truth: list[bool]) -> float:
    pos = [s for s, t in zip(scores, truth) if t]
    neg = [s for s, t in zip(scores, truth) if not t]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def _z(values: list[float]) -> list[float]:
    m, s = statistics.mean(values), statistics.pstdev(values) or 1.0
    return [(v - m) / s for v in values]


@torch.no_grad()
def _embed(encoder: nn.Module, tokenizer, texts: list[str]) -> torch.Tensor:
    out = []
    for i in range(0, len(texts), 64):
        batch = tokenizer(texts[i:i + 64], padding=True, truncation=True, max_length=128, return_tensors="pt")
        hidden = encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
    return torch.cat(out)


@torch.no_grad()
def _joint(model: JointReader, tokenizer, statement: str, texts: list[str]) -> list[float]:
    out = []
    for i in range(0, len(texts), 64):
        part = texts[i:i + 64]
        batch = tokenizer([statement] * len(part), part, padding=True, truncation=True, max_length=128,
                          return_tensors="pt")
        out += model(dict(batch)).tolist()
    return out


def evaluate(model: JointReader, base: nn.Module, tokenizer, data_dir: str | None) -> dict:
    """Per dev yes/no question: AUC of the joint reader, of the untrained cosine and of their sum."""
    model.eval()
    cache: dict = {}
    rows = []
    for q in load_questions(("dev",)):
        if q.kind != "yesno":
            continue
        gold = gold_rows(q, "en", data_dir=data_dir, cache=cache)
        texts, truth = [t for _, t, _ in gold], [bool(g) for _, _, g in gold]
        statement = q.raw["statement"]
        cos = (_embed(base, tokenizer, texts) @ _embed(base, tokenizer, [statement]).T).squeeze(-1).tolist()
        joint = _joint(model, tokenizer, statement, texts)
        blend = [a + b for a, b in zip(_z(cos), _z(joint))]
        probs = [[1 - p, p] for p in torch.sigmoid(torch.tensor(joint)).tolist()]
        golds = [int(t) for t in truth]
        rows.append({"id": q.id, "source": q.source, "n": len(texts), "cosine_auc": round(_auc(cos, truth), 4),
                     "joint_auc": round(_auc(joint, truth), 4), "blend_auc": round(_auc(blend, truth), 4),
                     "joint_balanced": round(metrics.balanced_accuracy(probs, golds), 4),
                     "joint_ece": round(metrics.expected_calibration_error(probs, golds), 4)})
    means = {k: round(statistics.mean(r[k] for r in rows), 4)
             for k in ("cosine_auc", "joint_auc", "blend_auc", "joint_balanced", "joint_ece")}
    for source in ("states", "datasets"):
        part = [r for r in rows if r["source"] == source]
        means[source] = {k: round(statistics.mean(r[k] for r in part), 4)
                         for k in ("cosine_auc", "joint_auc", "blend_auc", "joint_balanced")}
    return {"questions": rows, "means": means}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trainable-layers", type=int, default=None,
                        help="train only the top N encoder layers (and the output unit); default: all")
    parser.add_argument("--emotions", type=Path, default=None,
                        help="a folder with GoEmotions' train.tsv and labels.txt (without it: intents only)")
    parser.add_argument("--hold-out", type=float, default=0.0, help="leave this share of the intents out of training")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "joint_reader.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    base, tokenizer, _ = load_encoder("mini-en")
    base.eval()
    encoder, _, _ = load_encoder("mini-en")
    model = JointReader(encoder)
    if args.trainable_layers is not None:
        layers = model.encoder.encoder.layer
        frozen = [model.encoder.embeddings, *layers[:len(layers) - args.trainable_layers]]
        for part in frozen:
            part.requires_grad_(False)
    n = args.steps * args.batch
    trained, _ = split_intents(args.hold_out, args.seed)
    pairs = intent_pairs(trained, args.data_dir, n if args.emotions is None else n // 2, rng)
    if args.emotions is not None:
        pairs += emotion_pairs(args.emotions, n - len(pairs), rng)
    rng.shuffle(pairs)
    print(f"{len(pairs)} pairs, {sum(p[2] for p in pairs)} positive", flush=True)
    before = evaluate(model, base, tokenizer, args.data_dir)
    print(f"untrained joint reader: {json.dumps(before['means'])}", flush=True)
    trainable = [p for p in model.encoder.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW([{"params": trainable, "lr": args.lr},
                                   {"params": model.out.parameters(), "lr": 1e-3}], weight_decay=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    started = time.perf_counter()
    model.train()
    for step in range(args.steps):
        part = pairs[step * args.batch:(step + 1) * args.batch]
        batch = tokenizer([p[0] for p in part], [p[1] for p in part], padding=True, truncation=True,
                          max_length=96, return_tensors="pt")
        loss = loss_fn(model(dict(batch)), torch.tensor([float(p[2]) for p in part]))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} {time.perf_counter() - started:.0f}s", flush=True)
    report = evaluate(model, base, tokenizer, args.data_dir)
    report.update({"steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed,
                   "emotions": args.emotions is not None,
                   "trainable_layers": args.trainable_layers, "train_seconds": round(time.perf_counter() - started, 1)})
    for r in report["questions"]:
        print(f"  {r['id']:<18}{r['source']:<9}{r['n']:>4}  cos {r['cosine_auc']:.3f}  joint {r['joint_auc']:.3f}"
              f"  blend {r['blend_auc']:.3f}  bal@0.5 {r['joint_balanced']:.3f}  ece {r['joint_ece']:.3f}")
    print(json.dumps(report["means"], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
