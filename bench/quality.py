"""Quality report of the bundled decision checkpoints (issue 4, item 5).

    .venv/bin/python bench/quality.py [--checkpoints mini-en mini-multi] [--synthetic 1500]

Per checkpoint, on (a) the held-out synthetic split (the trainer's held-out seed, never trained on)
and (b) the hand-written states in tests/data/eval_<group>_*.tsv: accuracy of choice answers,
mean absolute error of scores (plus their exact-level accuracy), accuracy of noul at 0.5, and
expected calibration error (10 bins), per question and per question type. Prints a table and writes
bench/results/quality.json. Every answer goes through the public Agent, exactly as users get it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jevlaya_lab.decisions import bundled  # noqa: E402
from jevlaya_lab.decisions.training import evaluation  # noqa: E402
from jevlaya_lab.decisions.training.synthetic import generate  # noqa: E402
from jevlaya_lab.decisions.training.trainer import HELDOUT_SEED_OFFSET  # noqa: E402

GROUPS = {"mini-en": "en", "mini-multi": "multi"}


def _table(title: str, report: dict) -> str:
    lines = [title, f"  {'question':<28}{'type':<8}{'n':>5}{'acc':>8}{'mae':>8}{'ece':>8}"]
    for key, row in [*report["questions"].items(), *((f"ALL {t}", {"type": t, **r}) for t, r in report["types"].items())]:
        mae = f"{row['mae']:.3f}" if "mae" in row else "-"
        lines.append(f"  {key:<28}{row['type']:<8}{row['n']:>5}{row['accuracy']:>8.3f}{mae:>8}{row['ece']:>8.3f}")
    return "\n".join(lines)


def _speed(name: str, agent) -> dict:
    """Warm load time and p50/p90 latency of one state x 5 questions (triage + one email question)."""
    import statistics

    from jevlaya_lab.decisions import presets
    from jevlaya_lab.decisions.agent import Agent

    t0 = time.perf_counter()
    Agent(str(bundled.checkpoint_dir(name)), model_id=name)
    warm = time.perf_counter() - t0
    questions = {**presets.triage_questions(), "needs_reply": presets.email_questions()["needs_reply"]}
    state = {"message": "Hi, my order #5521 still has not arrived and I need it for Friday. Can you check?"}
    agent.predict(state, questions)
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        agent.predict(state, questions)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"warm_load_seconds": round(warm, 2), "p50_ms_1x5": round(statistics.median(times), 1),
            "p90_ms_1x5": round(times[int(0.9 * len(times)) - 1], 1)}


def evaluate(name: str, n_synthetic: int) -> dict:
    import torch

    from jevlaya_lab.decisions.agent import Agent

    torch.set_num_threads(2)
    t0 = time.perf_counter()
    directory = bundled.checkpoint_dir(name)
    agent = Agent(str(directory), model_id=name)
    load_s = time.perf_counter() - t0
    calibration = json.loads((bundled.head_dir(name) / bundled.HEAD_CALIBRATION).read_text())
    train_config = calibration.get("train_config") or {}
    seed = train_config.get("seed", 0)
    shares = {k: train_config[k] for k in ("generic_share", "multilingual_share", "match_share")
              if k in train_config}
    out: dict = {"checkpoint": name, "load_seconds": round(load_s, 2), **_speed(name, agent)}
    t0 = time.perf_counter()
    heldout = evaluation.sample(generate(max(n_synthetic, 1), seed=seed + HELDOUT_SEED_OFFSET, **shares), n_synthetic)
    out["synthetic_heldout"] = evaluation.evaluate_examples(agent, heldout)
    group = GROUPS[name]
    try:
        states = evaluation.load_gold_states(ROOT / "tests" / "data", group)
    except FileNotFoundError as exc:
        out["handwritten"] = {"error": str(exc)}
    else:
        out["handwritten"] = evaluation.evaluate_gold_states(agent, states)
        out["handwritten_states"] = len(states)
    out["eval_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", nargs="+", default=list(bundled.BUNDLED), choices=bundled.BUNDLED)
    parser.add_argument("--synthetic", type=int, default=800, help="held-out synthetic rows to score")
    parser.add_argument("--keep-cache", action="store_true",
                        help="reuse the user cache (default: a fresh one, so 'cold' includes first-use assembly)")
    args = parser.parse_args(argv)
    if not args.keep_cache:
        import os
        import tempfile

        os.environ["JEVLAYA_HOME"] = tempfile.mkdtemp(prefix="jevlaya-quality-")
    results = []
    for name in args.checkpoints:
        try:
            result = evaluate(name, args.synthetic)
        except bundled.BundledCheckpointError as exc:
            print(f"{name}: not evaluated: {exc}\n")
            results.append({"checkpoint": name, "error": str(exc)})
            continue
        results.append(result)
        print(_table(f"{name}: held-out synthetic split", result["synthetic_heldout"]))
        if "error" in result["handwritten"]:
            print(f"{name}: hand-written set: {result['handwritten']['error']}")
        else:
            print(_table(f"{name}: hand-written set ({result['handwritten_states']} states)", result["handwritten"]))
        print(f"  load cold {result['load_seconds']}s (first use assembles the cache), warm "
              f"{result['warm_load_seconds']}s; 1 state x 5 questions p50 {result['p50_ms_1x5']} ms, "
              f"p90 {result['p90_ms_1x5']} ms; evaluation {result['eval_seconds']}s\n")
    out = ROOT / "bench" / "results" / "quality.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
