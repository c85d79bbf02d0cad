"""Training the statement reader (:mod:`jevlaya_lab.decisions.statement_reader`) of a checkpoint.

    jevlaya-lab train --name mini-en --reader-only --emotions DIR --ship

The reader learns whether a statement holds for a message from many statements, not from labels:

- **intents**: each intent's two training statements and its three descriptions (as "The message
  is about <description>.", from ``intents.json``) against the train utterances of CLINC150,
  BANKING77 and HWU64; half the pairs are true (the utterance's own intent), half false (another
  intent's text, half of those from the same domain, so that the reader learns the difference
  between near intents and not only between domains).
- **properties of a message** (``emotions``, optional): one statement per GoEmotions emotion
  (Demszky et al., ACL 2020, CC BY 4.0; a folder with its ``train.tsv`` and ``labels.txt``, read at
  training time and never copied into the package) against Reddit comments carrying the label or
  not: what a message expresses and how, which intent statements never say. The statements are
  written here. Emotions whose statement would be a paraphrase of a question of the user-question
  benchmark are left out, so that no benchmark question is trained
  on: anger and annoyance, gratitude, remorse and curiosity.

A share of the intents (``hold_out``, 15 %) is left out of training altogether, texts and
utterances; the blend of the reader with the similarity (``fit_blend``) is fit on their held-out
statements (``eval_statement``) against their utterances, so that it is fit on statements and
messages the reader never saw, as a user's will be. Only the reader's layers and output unit
train; the encoder below them stays frozen (it is shared with every other answer).
"""

from __future__ import annotations

import csv
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jevlaya_lab.decisions.encoding import row_tokenizer, tokenize_states
from jevlaya_lab.decisions.model import DecisionModel
from jevlaya_lab.decisions.statement_reader import ReaderConfig, StatementReader, pair_rows
from jevlaya_lab.decisions.training.datasets import DATASETS, load_dataset
from jevlaya_lab.decisions.training.intents import Intent, load_intents
from jevlaya_lab.decisions.training.real_data import zero_shot_noul
from jevlaya_lab.decisions.training.trainer import balanced_logistic, statement_z

__all__ = ["EMOTION_STATEMENTS", "ReaderTraining", "emotion_pairs", "fit_blend", "intent_pairs", "split_intents",
           "train_reader"]

Pair = tuple[str, str, bool]
"""``(statement, text, truth)``."""

EMOTION_STATEMENTS: dict[str, str | None] = {
    "admiration": "The writer admires or praises someone.",
    "amusement": "The writer finds something funny.",
    "anger": None,
    "annoyance": None,
    "approval": "The writer agrees with or approves of something.",
    "caring": "The writer shows concern for how someone else is doing.",
    "confusion": "The writer does not understand something and is puzzled.",
    "curiosity": None,
    "desire": "The writer wishes they had or could do something.",
    "disappointment": "The writer feels let down.",
    "disapproval": "The writer disagrees with or objects to something.",
    "disgust": "The writer finds something revolting.",
    "embarrassment": "The writer feels embarrassed or awkward.",
    "excitement": "The writer is excited about something.",
    "fear": "The writer is scared or worried.",
    "gratitude": None,
    "grief": "The writer mourns a loss.",
    "joy": "The writer is happy.",
    "love": "The writer expresses love or affection.",
    "nervousness": "The writer is nervous or anxious.",
    "optimism": "The writer is hopeful that things will turn out well.",
    "pride": "The writer is proud of something.",
    "realization": "The writer has just realised something.",
    "relief": "The writer feels relieved.",
    "remorse": None,
    "sadness": "The writer is sad.",
    "surprise": "The writer is surprised.",
    "neutral": "The text carries no particular emotion.",
}
"""One statement per GoEmotions label; None: left out (it names a benchmark question's property)."""


@dataclass(frozen=True)
class ReaderTraining:
    """How a reader is trained (``jevlaya-lab train --reader-only`` options of the same names)."""

    layers: int = 2
    steps: int = 1500
    batch: int = 32
    lr: float = 1e-4
    out_lr: float = 1e-3
    max_len: int = 96
    hold_out: float = 0.15
    blend_rows: int = 4000
    seed: int = 0


def split_intents(share: float, seed: int) -> tuple[dict[str, Intent], dict[str, Intent]]:
    """``(trained, held out)`` intents: a seeded ``share`` of them held out."""
    intents = load_intents()
    keys = sorted(intents)
    held = set(random.Random(seed + 1).sample(keys, round(share * len(keys))))
    return ({k: v for k, v in intents.items() if k not in held}, {k: v for k, v in intents.items() if k in held})


def _utterances(intents: dict[str, Intent], data_dir: str | None) -> list[Any]:
    return [u for name in DATASETS for u in load_dataset(name, data_dir)["train"] if u.intent in intents]


def intent_pairs(intents: dict[str, Intent], data_dir: str | None, n: int, rng: random.Random) -> list[Pair]:
    """``n`` pairs of an utterance of ``intents`` with a training text of its own intent or another's."""
    texts = {k: [*v.statements, *(f"The message is about {d}." for d in v.descriptions)] for k, v in intents.items()}
    by_group: dict[str, list[str]] = {}
    for k, v in intents.items():
        by_group.setdefault(v.group, []).append(k)
    utterances = _utterances(intents, data_dir)
    keys = list(texts)
    out: list[Pair] = []
    while len(out) < n:
        u = rng.choice(utterances)
        if rng.random() < 0.5:
            out.append((rng.choice(texts[u.intent]), u.text, True))
            continue
        same = [k for k in by_group[intents[u.intent].group] if k != u.intent]
        other = rng.choice(same) if same and rng.random() < 0.5 else rng.choice(keys)
        if other != u.intent:
            out.append((rng.choice(texts[other]), u.text, False))
    return out


def emotion_pairs(directory: str | Path, n: int, rng: random.Random) -> list[Pair]:
    """``n`` pairs of an emotion's statement with a comment: half carrying it, half drawn at random."""
    directory = Path(directory)
    for name in ("train.tsv", "labels.txt"):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"emotions={str(directory)!r} has no {name}: give the folder holding "
                                    "GoEmotions' train.tsv and labels.txt")
    labels = (directory / "labels.txt").read_text(encoding="utf-8").split()
    rows = []
    with (directory / "train.tsv").open(encoding="utf-8", newline="") as handle:
        for text, ids, _ in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            rows.append((text, {labels[int(i)] for i in ids.split(",")}))
    kept = [e for e, s in EMOTION_STATEMENTS.items() if s and e in labels]
    holding = {e: [t for t, ls in rows if e in ls] for e in kept}
    out: list[Pair] = []
    for _ in range(n):
        e = rng.choice(kept)
        statement = EMOTION_STATEMENTS[e]
        assert statement is not None
        if rng.random() < 0.5 and holding[e]:
            out.append((statement, rng.choice(holding[e]), True))
        else:
            text, ls = rng.choice(rows)
            out.append((statement, text, e in ls))
    return out


def _batch(rows: Any, tokenizer: Any, pairs: Sequence[Pair]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    statements = rows.encode([p[0] for p in pairs])
    states = tokenize_states(tokenizer, [p[1] for p in pairs])
    return pair_rows(rows, [(list(s.ids), list(t.ids)) for s, t in zip(statements, states)])


def train_reader(model: DecisionModel, tokenizer: Any, pairs: Sequence[Pair], cfg: ReaderTraining,
                 log: Callable[[str], None] = print) -> StatementReader:
    """A reader of ``cfg.layers`` layers started from the encoder's top ones and trained on ``pairs``."""
    torch.manual_seed(cfg.seed)
    rows = row_tokenizer(tokenizer)
    reader = StatementReader(model.encoder, ReaderConfig(cfg.layers, (0.0, 1.0, 0.0)))
    encoder = model.encoder
    was = [p.requires_grad for p in encoder.parameters()]
    encoder.requires_grad_(False)
    optimiser = torch.optim.AdamW([{"params": reader.layers.parameters(), "lr": cfg.lr},
                                   {"params": reader.out.parameters(), "lr": cfg.out_lr}], weight_decay=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    started = time.perf_counter()
    reader.train()
    try:
        for step in range(cfg.steps):
            start = (step * cfg.batch) % len(pairs)
            part = pairs[start:start + cfg.batch]
            ids, types, mask = _batch(rows, tokenizer, part)
            ids, types, mask = ids[:, :cfg.max_len], types[:, :cfg.max_len], mask[:, :cfg.max_len]
            loss = loss_fn(reader(encoder, ids, types, mask), torch.tensor([float(p[2]) for p in part]))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            if step % 100 == 0 or step == cfg.steps - 1:
                log(f"reader step {step} loss {loss.item():.4f} {time.perf_counter() - started:.0f}s")
    finally:
        for p, flag in zip(encoder.parameters(), was):
            p.requires_grad_(flag)
    return reader.eval()


@torch.no_grad()
def reader_logits(model: DecisionModel, reader: StatementReader, tokenizer: Any, pairs: Sequence[Pair],
                  chunk: int = 64) -> torch.Tensor:
    """``[n]`` the reader's log-odds for ``(statement, text)`` pairs."""
    rows = row_tokenizer(tokenizer)
    out = [reader(model.encoder, *_batch(rows, tokenizer, pairs[i:i + chunk])) for i in range(0, len(pairs), chunk)]
    return torch.cat(out) if out else torch.zeros(0)


def blend_rows(held: dict[str, Intent], data_dir: str | None, n: int, seed: int) -> list[Pair]:
    """``n`` rows of a held-out intent's utterance with its ``eval_statement`` or a near intent's."""
    utterances = _utterances(held, data_dir)
    drawn = random.Random(seed).sample(utterances, min(n, len(utterances)))
    return [(statement, text, truth) for text, statement, truth in zero_shot_noul(drawn, held, seed=seed)]


def fit_blend(model: DecisionModel, reader: StatementReader, tokenizer: Any, rows: Sequence[Pair], *,
              temperature: float, max_len: int = 256) -> tuple[float, float, float]:
    """The reader config's ``blend``: one logistic fit of truth on ``(z, r)`` over ``rows`` (every
    statement pooled, so statement-agnostic; yes and no weighted equally), times ``temperature``."""
    _, z = statement_z(model, tokenizer, [r[1] for r in rows], [r[0] for r in rows], max_len=max_len)
    r = reader_logits(model, reader, tokenizer, rows)
    (a, b), c = balanced_logistic(torch.stack([z, r], dim=1), torch.tensor([float(x[2]) for x in rows]))
    return (round(a * temperature, 4), round(b * temperature, 4), round(c * temperature, 4))
