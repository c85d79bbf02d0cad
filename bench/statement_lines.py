"""Where an unseen statement's 0.5 line falls: can reference states, or a refit, put it right?

A user's own yes/no statement is answered with one statement-agnostic line (the reader's ``blend``,
fit on data the benchmark never touches). This script asks, on the user-question benchmark's *dev*
statements (``bench/user_questions.py``; the locked half is never read here), how much of the
distance to 0.80 balanced accuracy a better line could close without labels:

- ``shipped``: the answer as it is, balanced accuracy at 0.5;
- ``refit``: one logistic over the answer's log-odds ``L``, fit on the other dev statements for each
  statement in turn (every statement weighs the same, yes and no alike: ``trainer.balanced_logistic``);
- ``z``: the same over ``(L - mean) / spread`` of the statement's log-odds on ``--reference``
  hand-written training messages (``training.written``, a seeded draw): the statement read
  against how it answers typical messages;
- ``refit+z``: both features;
- ``own line``: each statement's best threshold on its own gold rows, which needs labels (a ceiling
  for any line, not a model).

Printed: the mean balanced accuracy over the dev statements and how many stay below 0.80.

    JEVLAYA_DATA_DIR=DIR .venv/bin/python bench/statement_lines.py --threads 2
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def reference_texts(n: int, seed: int) -> list[str]:
    """``n`` hand-written English training messages (``training.written.load_written``), a seeded draw."""
    from jevlaya_lab.decisions.training.written import load_written

    return random.Random(seed).sample([s.text for s in load_written(("en",))], n)


def log_odds(agent, texts: list[str], question: dict) -> list[float]:
    from jevlaya_lab.decisions.training.evaluation import _probs

    out = []
    for answer in agent.predict_batch(texts, {"q": question}):
        p = min(max(_probs(answer["answers"]["q"])[1], 1e-6), 1 - 1e-6)
        out.append(math.log(p / (1 - p)))
    return out


def balanced(scores: list[float], gold: list[bool], threshold: float = 0.0) -> float:
    """Balanced accuracy of "yes" above ``threshold`` (log-odds: 0 is the 0.5 line)."""
    from bench.quality import _bal_at

    return _bal_at(scores, gold, threshold)


def lines(statements: list[tuple[str, Any, Any, list[bool]]]) -> dict[str, list[float]]:
    """Per line (``shipped``, ``refit``, ``z``, ``refit+z``, ``own line``), each statement's balanced
    accuracy; ``statements``: ``(id, log-odds, z-score against the reference, gold)``, tensors of
    one number per gold row."""
    import torch

    from jevlaya_lab.decisions.training.trainer import balanced_logistic

    def left_out(features) -> list[float]:
        out = []
        for i, (_, answers, z, gold) in enumerate(statements):
            others = [s for j, s in enumerate(statements) if j != i]
            x = torch.cat([features(a, zz) for _, a, zz, _ in others])
            y = torch.tensor([float(g) for *_, gs in others for g in gs])
            groups = [name for name, a, _, _ in others for _ in range(len(a))]
            weights, bias = balanced_logistic(x, y, groups)
            out.append(balanced((features(answers, z) @ torch.tensor(weights) + bias).tolist(), gold))
        return out

    return {
        "shipped": [balanced(a.tolist(), g) for _, a, _, g in statements],
        "refit": left_out(lambda a, z: a[:, None]),
        "z": left_out(lambda a, z: z[:, None]),
        "refit+z": left_out(lambda a, z: torch.stack([a, z], dim=1)),
        "own line": [max(balanced(a.tolist(), g, float(t)) for t in a.unique()) for _, a, _, g in statements],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="mini-en")
    parser.add_argument("--reference", type=int, default=300, help="hand-written messages a statement is read against")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", help="the intent datasets' folder (default $JEVLAYA_DATA_DIR)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    from bench import user_questions as uq
    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.agent import Agent

    torch.set_num_threads(args.threads)
    agent = Agent(str(bundled.checkpoint_dir(args.checkpoint)), model_id=args.checkpoint)
    reference = reference_texts(args.reference, args.seed)
    statements = []
    cache: dict = {}
    for q in uq.load_questions(("dev",)):
        if q.kind != "yesno":
            continue
        rows = uq.gold_rows(q, "en", data_dir=args.data_dir, cache=cache)
        question = q.agent_question("en")
        answers = torch.tensor(log_odds(agent, [r[1] for r in rows], question))
        on_reference = torch.tensor(log_odds(agent, reference, question))
        z = (answers - on_reference.mean()) / on_reference.std().clamp_min(1e-6)
        statements.append((q.id, answers, z, [bool(r[2]) for r in rows]))

    results = lines(statements)
    print(f"{args.checkpoint}: {len(statements)} dev statements, {len(reference)} reference messages")
    for name, values in results.items():
        print(f"  {name:<9} balanced {statistics.mean(values):.3f}  below 0.80: {sum(v < 0.8 for v in values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
