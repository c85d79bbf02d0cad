"""How ``agent.adapt``'s constants were chosen: a sweep on the user-question benchmark's dev half.

``bench/adapt.py`` runs the whole ``agent.adapt`` for one setting (minutes per run). Choosing the
fitting constants of :mod:`jevlaya_lab.decisions.adapt_fit` needs many settings over several
seeds, so this script computes each question's base features once (the checkpoint's
log-probabilities and pooled state vectors for every state: :func:`adapt_features.base_features`, what
``adapt`` itself reads), and then, per setting, seed and k, draws the labels as ``bench/adapt.py``
does (:func:`adapt.draw`), fits with :func:`adapt_fit.fit_question` and scores the held-out
states with the fitted correction applied exactly as the adapted Agent applies it. A test
(``tests/decisions/test_adapt.py``) checks that this replay gives the adapted Agent's answers.

Each setting is ``NAME=VALUE[,NAME=VALUE...]`` over adapt_fit's float constants, or
``method=<method>``, or ``self-train=M``, or ``parts=own|open|both|cv|concat``; ``base`` is the module as
it ships. ``parts=`` (a checkpoint with an open part, :mod:`jevlaya_lab.decisions.open_questions`)
fits every question on that part's features whatever the route says; ``both`` fits each part
alone and answers with the mean of the two fitted probabilities (two encoders' views of the same
labels, which ``adapt`` does not combine); ``cv`` fits each part alone and answers with the one
whose labels' cross-validated log-loss is lower (a part chosen per question from its labels);
``concat`` fits one correction over both parts' state vectors side by side.
``self-train=M`` measures self-training, which ``adapt`` does not do: after the fit, the held-out
states' most confident answers of each predicted class (M per label the class was given) join the
labels, and a second fit answers the held-out states. It reads the unlabelled states, so it would
need the table as well as the labels.

Printed per setting and k: mean balanced accuracy of the yes/no statements, mean accuracy of the
choices, mean ECE, over the seeds (``--negated-apart``: also the yes/no mean of the statements marked
``"negates"`` and of the others); the dev half only (the locked half is read by ``bench/adapt.py
--half locked``, once, for the figures that are reported).

    .venv/bin/python bench/adapt_levers.py --seeds 0 1 2 \\
        base THRESHOLD_PENALTY=0.01 YESNO_BALANCE=0 method=auto method=linear-0.003 self-train=1
    .venv/bin/python bench/adapt_levers.py --checkpoint mini-multi --seeds 0 1 2 base parts=own parts=both
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def features(agent, task, parts=("base",)):
    """``(question, targets [n], {part: (lp [n, k], vectors [n, d])})`` over all of a task's items:
    ``base`` from the part that ``adapt`` fits the question on, ``own`` / ``open`` from that part."""
    import torch

    from jevlaya_lab.decisions import adapt_features
    from jevlaya_lab.decisions.adapt import answer_index
    from jevlaya_lab.decisions.open_questions import answering
    from jevlaya_lab.decisions.questions import parse_questions

    (q,) = parse_questions({task["id"]: task["question"]})
    texts = [x for x, _ in task["items"]]
    heads = {"base": answering(agent, (q,), adapting=True)[0], "own": agent,
             "open": agent._open.agent if agent._open else None}
    found = {}
    for part in parts:
        lps, vectors = adapt_features.base_features(agent, texts, (q,), parts=[heads[part]])
        found[part] = (lps[0], vectors[0])
    targets = torch.tensor([answer_index(q, g, "gold") for _, g in task["items"]])
    return q, targets, found


def cached_features(checkpoint, languages, needed, found, cache, error):
    """``{checkpoint, languages, parts, tasks: {id: features(...)}}`` for the tasks ``found``: read from
    the file ``cache`` when it holds this checkpoint's features of every part ``needed``, else computed
    (:func:`features`) and written there (if ``cache`` is given). ``error(message)`` refuses parts
    that the checkpoint lacks."""
    import torch

    from jevlaya_lab import load

    saved = torch.load(cache, weights_only=False) if cache and Path(cache).is_file() else {}
    if (saved.get("checkpoint"), saved.get("languages")) != (checkpoint, languages) \
            or not set(needed) <= set(saved.get("parts", ())):
        base = load(checkpoint, device="cpu")
        if base._open is None and len(needed) > 1:
            error(f"parts=: {checkpoint} has no open part to fit on")
        saved = {"checkpoint": checkpoint, "languages": languages, "parts": needed,
                 "tasks": {t["id"]: features(base, t, needed) for t in found}}
        if cache:
            torch.save(saved, cache)
    return saved


def replay(q, lp, vectors, targets, train_rows, test_rows, method, seed):
    """Held-out probabilities of the fit on ``train_rows`` (as the adapted Agent answers them)."""
    import torch

    from jevlaya_lab.decisions import adapt_fit

    train, test = torch.tensor(train_rows), torch.tensor(test_rows)
    fit, center, _ = adapt_fit.fit_question(q, lp[train], vectors[train], targets[train], seed=seed, method=method)
    return torch.softmax(adapt_fit.apply_fit(fit, center, lp[test], vectors[test]), dim=-1)


def both_parts(q, parts, targets, train_rows, test_rows, method, seed):
    """The mean of :func:`replay` on the own head's and on the open part's features (``parts``:
    :func:`features` with both)."""
    return sum(replay(q, *parts[p], targets, train_rows, test_rows, method, seed) for p in ("own", "open")) / 2


def lower_cv_part(q, parts, targets, train_rows, test_rows, method, seed):
    """:func:`replay` on the part (own or open) whose fit on the labels has the lower cross-validated
    log-loss (:func:`~jevlaya_lab.decisions.adapt_fit.fit_question`'s report); ties go to the open part."""
    import torch

    from jevlaya_lab.decisions import adapt_fit

    train = torch.tensor(train_rows)
    loss = {}
    for p in ("open", "own"):
        lp, vectors = parts[p]
        _, _, report = adapt_fit.fit_question(q, lp[train], vectors[train], targets[train], seed=seed, method=method)
        loss[p] = min(report.cv_log_loss.values())
    chosen = "own" if loss["own"] < loss["open"] else "open"
    return replay(q, *parts[chosen], targets, train_rows, test_rows, method, seed)


def concatenated_parts(q, parts, targets, train_rows, test_rows, method, seed):
    """:func:`replay` on the answering part's log-probabilities with one correction over both parts'
    state vectors side by side (one fit reads both encoders; ``both`` averages two fits)."""
    import torch

    vectors = torch.cat([parts["own"][1], parts["open"][1]], dim=1)
    return replay(q, parts["base"][0], vectors, targets, train_rows, test_rows, method, seed)


PARTS = {"own": lambda q, parts, *rest: replay(q, *parts["own"], *rest),
         "open": lambda q, parts, *rest: replay(q, *parts["open"], *rest),
         "both": both_parts, "cv": lower_cv_part, "concat": concatenated_parts}
"""What each ``parts=`` setting answers with, from :func:`features`' parts and the replay's arguments."""


def self_trained(q, lp, vectors, targets, train_rows, test_rows, method, seed, per_label: float):
    """:func:`replay`, then a second fit with the held-out states' most confident answers as labels:
    for each predicted class, ``per_label`` times the labels it was given (at least one)."""
    import torch

    from jevlaya_lab.decisions import adapt_fit

    probs = replay(q, lp, vectors, targets, train_rows, test_rows, method, seed)
    confidence, predicted = probs.max(dim=1)
    given = targets[torch.tensor(train_rows)]
    taken: list[int] = []
    for c in range(lp.shape[1]):
        mine = sorted((i for i in range(len(test_rows)) if predicted[i] == c), key=lambda i: -float(confidence[i]))
        taken += mine[:int(per_label * max(1, int((given == c).sum())))]
    rows = torch.tensor(train_rows + [test_rows[i] for i in taken])
    labels = torch.cat([given, predicted[torch.tensor(taken, dtype=torch.long)]])
    fit, center, _ = adapt_fit.fit_question(q, lp[rows], vectors[rows], labels, seed=seed, method=method)
    test = torch.tensor(test_rows)
    return torch.softmax(adapt_fit.apply_fit(fit, center, lp[test], vectors[test]), dim=-1)


def task_figures(found, saved, k, seeds, answer) -> list[tuple[str, str, float, float]]:
    """``(task id, kind, figure, ECE)`` per task and seed at ``k`` labels: each task's labels drawn
    as ``bench/adapt.py`` draws them, and the held-out probabilities ``answer(task_id, q, parts,
    targets, train_rows, test_rows)`` gives from the task's cached features scored (a yes/no's
    figure: balanced accuracy; a choice's: accuracy)."""
    from adapt import draw, score

    rows = []
    for seed in seeds:
        for t in found:
            q, targets, parts = saved["tasks"][t["id"]]
            index = {id(item): i for i, item in enumerate(t["items"])}
            train, test = draw(t["items"], k, seed + k)
            test_rows = [index[id(x)] for x in test]
            probs = answer(t["id"], q, parts, targets, [index[id(x)] for x in train], test_rows)
            balanced, accuracy, calibration = score(probs.tolist(), targets[test_rows].tolist(),
                                                    list(range(q.n_options)))
            rows.append((t["id"], t["kind"], balanced if t["kind"] == "yesno" else accuracy, calibration))
    return rows


def means(rows, keep=None) -> tuple[float, float, float]:
    """Mean yes/no figure, choice figure and ECE of :func:`task_figures`' rows whose task id
    ``keep(task_id)`` accepts (all by default)."""
    rows = [r for r in rows if keep is None or keep(r[0])]
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    return (mean([r[2] for r in rows if r[1] == "yesno"]), mean([r[2] for r in rows if r[1] != "yesno"]),
            mean([r[3] for r in rows]))


def mean_figures(found, saved, k, seeds, answer) -> tuple[float, float, float]:
    """Mean yes/no balanced accuracy, choice accuracy and ECE at ``k`` labels over ``seeds``
    (:func:`task_figures`, :func:`means`)."""
    return means(task_figures(found, saved, k, seeds, answer))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="*", default=["base"])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--data-dir", help="the intent datasets' folder (default $JEVLAYA_DATA_DIR)")
    parser.add_argument("--checkpoint", default="mini-en", choices=("mini-en", "mini-multi"))
    parser.add_argument("--languages", action="store_true",
                        help="the five-language dev questions (bench/adapt.py --languages) instead of the English ones")
    parser.add_argument("--cache", help="keep the base features in this file (torch.save) and reuse them")
    parser.add_argument("--negated-apart", action="store_true",
                        help="also print the yes/no mean of the statements negated as a whole and of the others")
    args = parser.parse_args(argv)

    import torch
    import user_questions as uq
    from adapt import fit_constant, language_tasks, tasks

    from jevlaya_lab.decisions import adapt_fit

    warnings.filterwarnings("ignore")
    parsed_settings = []
    for setting in args.settings:
        values: dict[str, float | str] = {}
        for part in ([] if setting == "base" else setting.split(",")):
            if part.startswith("method="):
                values["method"] = part.partition("=")[2]
                continue
            if part.startswith("parts="):
                values["parts"] = part.partition("=")[2]
                if values["parts"] not in PARTS:
                    parser.error(f"{part}: use parts={'|'.join(PARTS)}")
                continue
            if part.startswith("self-train="):
                try:
                    values["self-train"] = float(part.partition("=")[2])
                except ValueError:
                    parser.error(f"{part}: self-train takes a number of pseudo-labels per label, e.g. self-train=1")
                continue
            try:
                name, number = fit_constant(part)
            except ValueError as exc:
                parser.error(f"{exc}, or method=<method>, or self-train=M, or parts={'|'.join(PARTS)}")
            values[name] = number
        parsed_settings.append((setting, values))
    varied = {name for _, values in parsed_settings for name in values
              if name not in ("method", "self-train", "parts")}
    needed = ["base", "own", "open"] if any("parts" in values for _, values in parsed_settings) else ["base"]
    shipped = {name: getattr(adapt_fit, name) for name in varied}  # restored after each setting
    found, notes = (language_tasks("dev"), []) if args.languages else tasks("dev", args.data_dir, 0)
    negating = uq.negating_ids()
    for note in notes:
        print("note:", note)
    saved = cached_features(args.checkpoint, args.languages, needed, found, args.cache, parser.error)
    print(f"{len(found)} dev questions; features cached; torch threads {torch.get_num_threads()}")
    print(f"{'setting':<60}   k | yes/no choice  ECE   (mean over seeds "
          f"{' '.join(map(str, args.seeds))})")
    for setting, values in parsed_settings:
        for name, value in shipped.items():
            setattr(adapt_fit, name, values.get(name, value))
        method = str(values.get("method", "linear"))

        def answer(task_id, q, parts, targets, train_rows, test_rows, values=values, method=method):
            lp, vectors = parts["base"]
            if "parts" in values:
                return PARTS[str(values["parts"])](q, parts, targets, train_rows, test_rows, method, 0)
            if "self-train" in values:
                return self_trained(q, lp, vectors, targets, train_rows, test_rows, method, 0,
                                    float(values["self-train"]))
            return replay(q, lp, vectors, targets, train_rows, test_rows, method, 0)
        for k in args.k:
            rows = task_figures(found, saved, k, args.seeds, answer)
            yn, ch, ece = means(rows)
            print(f"{setting[:60]:<60} {k:>3} | {yn:.3f}  {ch:.3f}  {ece:.3f}", flush=True)
            if args.negated_apart:  # the same fits, grouped (a language task's id is "<lang>/<id>")
                apart = [means(rows, lambda i, keep=keep: (i.rpartition("/")[2] in negating) == keep)[0]
                         for keep in (True, False)]
                print(f"{'  negated as a whole / the others':<60} {k:>3} | {apart[0]:.3f} / {apart[1]:.3f}",
                      flush=True)
    for name, value in shipped.items():
        setattr(adapt_fit, name, value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
