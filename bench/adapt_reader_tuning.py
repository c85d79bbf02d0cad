"""A lever for ``agent.adapt`` measured and not shipped: tuning the statement reader on the labels.

``agent.adapt`` fits a correction on the frozen checkpoint's answers and pooled state vectors. For a
user's own yes/no statement, ``mini-en``'s answer comes mostly from its statement reader, which
reads the statement and the message together (:mod:`jevlaya_lab.decisions.statement_reader`). This
script asks whether a few labels are better spent on the reader itself: per statement and draw of
k labels (:func:`adapt.draw`, as ``bench/adapt.py`` draws them), a copy of the reader (its top
encoder layers and output unit; the encoder below stays frozen and is run once per statement) is
trained on the k labelled ``(statement, state)`` pairs — AdamW, full batch, yes and no weighing
the same — and put in the checkpoint's place, so the statement is answered by the Agent's own
forward pass with the tuned reader. Scored on each statement's other states, in the same run:

- ``adapt``: ``agent.adapt``'s default fit (:func:`adapt_fit.fit_question`, replayed as
  ``bench/adapt_levers.py`` replays it; a test checks the replay gives the adapted Agent's answers);
- ``tuned``: the answer with the tuned reader, nothing else fitted;
- ``mean``: the mean of the two probabilities.

Printed per setting and k: mean balanced accuracy at 0.5 over the dev half's yes/no statements that
the checkpoint reads, over the seeds, and the mean seconds per statement of ``adapt``'s fit and of
the tuning. The dev half only; nothing here touches the locked half.

    .venv/bin/python bench/adapt_reader_tuning.py --seeds 0 1 2 --settings 3e-5:20 1e-4:10 1e-3:10:bias
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def read_pairs(agent, q, texts):
    """``(pair_ids, pair_types, pair_mask)`` of the pairs the Agent reads for a yes/no ``q``."""
    from jevlaya_lab.decisions.encoding import tokenize_states

    max_len, head_max_len = agent._budgets()
    tokens = tokenize_states(agent._rows, list(texts))
    (_, _, prior), = agent._chunks(tokens, (q,), max_len, head_max_len, batch_size=len(tokens))
    if len(prior.pair_row) != len(texts):
        return None  # the statement is near the training texts: the checkpoint does not read it
    order = prior.pair_row.argsort()
    return prior.pair_ids[order], prior.pair_types[order], prior.pair_mask[order]


def tune(reader, hidden, mask, yes, lr, steps, seed, part="all"):
    """A copy of ``reader`` trained on labelled pairs (``yes`` 1/0), yes and no weighing the same:
    every parameter (``part="all"``), or only the biases, the layer norms and the output unit
    (``"bias"``: a few thousand numbers per statement to store instead of the layers)."""
    from jevlaya_lab.decisions.adapt_fit import row_weights

    torch.manual_seed(seed)
    tuned = copy.deepcopy(reader).train()
    trained = [p for name, p in tuned.named_parameters()
               if part == "all" or name.startswith("out.") or name.endswith("bias") or "LayerNorm" in name]
    optimiser = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    weights = row_weights("noul", yes.long(), 2).float()  # adapt's own: yes and no weigh alike
    length = int(mask.sum(1).max())  # the labelled pairs' own padding only
    hidden, mask = hidden[:, :length], mask[:, :length]
    for _ in range(steps):
        loss = (torch.nn.functional.binary_cross_entropy_with_logits(
            tuned.read_from(hidden, mask), yes, reduction="none") * weights).sum()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return tuned.eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=["3e-5:20"],
                        help="LR:STEPS[:bias] of the tuning (bias: only biases, layer norms and the output unit)")
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-dir", help="the intent datasets' folder (default $JEVLAYA_DATA_DIR)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    settings = []
    for setting in args.settings:
        parts = setting.split(":")
        try:
            lr, steps = float(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            parts = []
        if len(parts) not in (2, 3) or parts[2:] not in ([], ["bias"]):
            parser.error(f"--settings {setting!r}: write LR:STEPS or LR:STEPS:bias, e.g. 1e-4:10 or 3e-3:10:bias")
        settings.append((setting, lr, steps, *parts[2:]))

    from adapt import draw, score, tasks
    from adapt_levers import features, replay

    from jevlaya_lab import load
    from jevlaya_lab.decisions.adapt_features import base_features
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    agent = load("mini-en", device="cpu")
    model = agent.decision_model
    shipped = model.reader
    found, notes = tasks("dev", args.data_dir, 0)
    for note in notes:
        print("note:", note)
    prepared = []
    for t in found:
        if t["kind"] != "yesno":
            continue
        q, lp, vectors, targets = features(agent, t)
        texts = [x for x, _ in t["items"]]
        pairs = read_pairs(agent, q, texts)
        if pairs is None:
            print(f"{t['id']}: not read by the checkpoint, left out")
            continue
        ids, types, mask = pairs
        with torch.no_grad():
            hidden = shipped.lower(model.encoder, ids, types, mask)
        prepared.append((t, q, lp, vectors, targets, texts, hidden, mask))
    print(f"{len(prepared)} dev yes/no statements read by mini-en; torch threads {torch.get_num_threads()}")
    print(f"{'setting':<10} {'k':>3} | adapt  tuned  mean  | s/fit adapt  tuning")
    for setting, lr, steps, *part in settings:
        for k in args.k:
            found_scores = {"adapt": [], "tuned": [], "mean": []}
            fit_time, tune_time = [], []
            for seed in args.seeds:
                for t, q, lp, vectors, targets, texts, hidden, mask in prepared:
                    index = {id(item): i for i, item in enumerate(t["items"])}
                    train, test = draw(t["items"], k, seed + k)
                    train_rows = [index[id(x)] for x in train]
                    test_rows = [index[id(x)] for x in test]
                    started = time.perf_counter()
                    fitted = replay(q, lp, vectors, targets, train_rows, test_rows, "linear", 0)
                    fit_time.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    rows = torch.tensor(train_rows)
                    tuned = tune(shipped, hidden[rows], mask[rows], targets[rows].float(), lr, steps, seed, *part)
                    tune_time.append(time.perf_counter() - started)
                    model.reader = tuned
                    try:
                        with torch.no_grad():
                            (tuned_lp,), _ = base_features(agent, [texts[i] for i in test_rows], (q,), vectors=False)
                    finally:
                        model.reader = shipped
                    gold = targets[test_rows].tolist()
                    for name, probs in (("adapt", fitted), ("tuned", tuned_lp.exp()),
                                        ("mean", (fitted + tuned_lp.exp()) / 2)):
                        found_scores[name].append(score(probs.tolist(), gold, [0, 1])[0])
            mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
            print(f"{setting:<10} {k:>3} | {mean(found_scores['adapt']):.3f}  {mean(found_scores['tuned']):.3f}  "
                  f"{mean(found_scores['mean']):.3f} | {mean(fit_time):.3f}  {mean(tune_time):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
