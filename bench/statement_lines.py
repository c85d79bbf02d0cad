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

``--fit-line`` fits the reader's ``line`` instead (``decisions/statement_reader.py``, "Read against
reference messages"): every dev statement answered by the open part with its blended answer read
against ``--reference`` hand-written messages (a checkpoint copy whose line is the identity), one
logistic over those standardised answers, fit on the other dev statements for each statement
(printed: balanced accuracy and ECE beside the answers as shipped) and then on all of them;
``--ship`` writes that line and the reference texts into the package's open head (the dev half may
guide any decision; the locked half is read only by ``bench/quality.py --locked``). The figures are
printed for all of them, then for the statements negated as a whole and for the others apart;
``--without-negated`` fits on the others only, as the shipped line is fit: the statements a reader
still reads near chance would make one line for all statements flatter (session 33: scale 0.73
against 1.14, locked ECE 0.110; on the 36, 1.08 and 0.093).

    JEVLAYA_DATA_DIR=DIR .venv/bin/python bench/statement_lines.py --fit-line --without-negated --threads 2 [--ship]

``--fit-fallback`` does the same for an open part that reads no statement (``mini-multi``'s): one
logistic over each dev statement's log-odds as answered, ``w * L + c``, fit on the other dev statements
for each (printed beside the answers as shipped) and then on all; ``--ship`` folds it into the open
head's ``fallback`` ``[scale, bias, hubness]`` (an unseen statement's logit before the temperature
``T``): ``[w * scale, w * bias + c * T, w * hubness]``.

    JEVLAYA_DATA_DIR=DIR .venv/bin/python bench/statement_lines.py --checkpoint mini-multi --fit-fallback [--ship]

``--negation`` measures a contrast against a generic negation, which no answer uses: each dev
statement ``S`` is also asked as ``"It is not true that s."`` (:func:`negated`), and its answer is
read as ``L(S) - L(not S)``, at 0 and through a line fit on the other dev statements for each, beside
``S`` alone (mean AUC and balanced accuracy). Measured on ``mini-en`` (36 dev statements): the reader
answers the negation as it answers the statement (mean AUC of "no" to ``not S``: 0.166), so the
contrast ranks worse than ``S`` alone (AUC 0.626 against 0.857; balanced 0.572 at 0, 0.587 refit,
against 0.773 as shipped; a line over both answers 0.771).

    JEVLAYA_DATA_DIR=DIR .venv/bin/python bench/statement_lines.py --negation --threads 2

``--message-centre`` measures a per-message offset, which no answer uses: each message is also asked
:data:`UNRELATED` (statements about things a support message seldom holds), and a statement's
log-odds become ``L - a * (m - mean m)``, ``m`` the message's mean log-odds over them (how readily the
reader says yes to anything about that message), for a few weights ``a`` (mean AUC, balanced accuracy
at 0 and refit on the other dev statements).

``--rewordings`` measures averaging the answers over generic rewordings of each statement, which no
answer uses: its subject made "The writer" (:func:`writer_worded`: "They", "The customer", "I", "my" ...)
and "The message says that s." (:func:`said_worded`), each alone and averaged with the statement as
written.

    JEVLAYA_DATA_DIR=DIR .venv/bin/python bench/statement_lines.py --message-centre --rewordings --threads 2
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jevlaya_lab.decisions.training.negation import inside  # noqa: E402


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


def _fit(rows: list[tuple[str, Any, list[bool]]]) -> tuple[list[float], float]:
    """One balanced logistic over ``rows`` (``(id, features [n, k], gold)``), every statement weighing
    the same and yes and no alike within each (``trainer.balanced_logistic``)."""
    import torch

    from jevlaya_lab.decisions.training.trainer import balanced_logistic

    x = torch.cat([f for _, f, _ in rows])
    y = torch.tensor([float(g) for *_, gs in rows for g in gs])
    return balanced_logistic(x, y, [name for name, f, _ in rows for _ in range(len(f))])


def _left_out(rows: list[tuple[str, Any, list[bool]]]) -> list[Any]:
    """Each statement's log-odds through the line :func:`_fit` on the *other* statements."""
    import torch

    out = []
    for i, (_, features, _) in enumerate(rows):
        weights, bias = _fit([r for j, r in enumerate(rows) if j != i])
        out.append(features @ torch.tensor(weights) + bias)
    return out


def lines(statements: list[tuple[str, Any, Any, list[bool]]]) -> dict[str, list[float]]:
    """Per line (``shipped``, ``refit``, ``z``, ``refit+z``, ``own line``), each statement's balanced
    accuracy; ``statements``: ``(id, log-odds, z-score against the reference, gold)``, tensors of
    one number per gold row."""
    import torch

    def left_out(features) -> list[float]:
        scores = _left_out([(name, features(a, z), gold) for name, a, z, gold in statements])
        return [balanced(v.tolist(), gold) for v, (*_, gold) in zip(scores, statements)]

    return {
        "shipped": [balanced(a.tolist(), g) for _, a, _, g in statements],
        "refit": left_out(lambda a, z: a[:, None]),
        "z": left_out(lambda a, z: z[:, None]),
        "refit+z": left_out(lambda a, z: torch.stack([a, z], dim=1)),
        "own line": [max(balanced(a.tolist(), g, float(t)) for t in a.unique()) for _, a, _, g in statements],
    }


def line_fit(statements: list[tuple[str, Any, list[bool]]]) -> tuple[dict[str, list[float]], tuple[float, float]]:
    """``(per line, each statement's balanced accuracy then ECE, ``(scale, bias)`` fit on all)``:
    ``statements`` are ``(id, standardised answer, gold)``; ``left out`` is the line fit on the other
    statements for each one, ``as is`` the standardised answer at 0 (no line)."""
    import torch

    from jevlaya_lab.decisions.training import metrics

    def scores(values: list[Any]) -> list[float]:
        golds = [g for *_, g in statements]
        bal = [balanced(v.tolist(), g) for v, g in zip(values, golds)]
        ece = [metrics.expected_calibration_error([[1 - p, p] for p in torch.sigmoid(v).tolist()], [int(x) for x in g])
               for v, g in zip(values, golds)]
        return bal + ece

    rows = [(name, a[:, None], gold) for name, a, gold in statements]
    (scale,), bias = _fit(rows)
    return {"as is": scores([a for _, a, _ in statements]), "left out": scores(_left_out(rows))}, (scale, bias)


def dev_statements(data_dir: str | None) -> list[tuple[str, list[str], list[bool], dict]]:
    """``(id, texts, gold, question as asked)`` of every dev yes/no statement of the benchmark."""
    from bench import user_questions as uq

    out, cache = [], {}
    for q in uq.load_questions(("dev",)):
        if q.kind == "yesno":
            rows = uq.gold_rows(q, "en", data_dir=data_dir, cache=cache)
            out.append((q.id, [r[1] for r in rows], [bool(r[2]) for r in rows], q.agent_question("en")))
    return out


def _identity_line_copy(name: str, reference: list[str], out: Path) -> float:
    """A copy of the bundled ``name`` checkpoint in ``out`` whose open part reads a statement against
    ``reference`` with the identity line; returns the open part's noul temperature (the line's unit)."""
    import json
    import shutil

    from jevlaya_lab.decisions import bundled

    shutil.copytree(bundled.checkpoint_dir(name), out)
    path = out / "rl_agent_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    temperature = float(config["open_questions"]["temperature"][2])
    config["open_questions"]["similarity_prior"]["reader"].update(line=[temperature, 0.0], reference=reference)
    path.write_text(json.dumps(config), encoding="utf-8")
    return temperature


def _print_rows(results: dict[str, list[float]], names: tuple[str, ...], n: int) -> None:
    """One line per name of :func:`line_fit`'s results (``n`` balanced accuracies, then ``n`` ECEs)."""
    for name in names:
        bal, ece = results[name][:n], results[name][n:]
        print(f"  {name:<9} balanced {statistics.mean(bal):.3f}  ECE {statistics.mean(ece):.3f}  "
              f"below 0.80: {sum(v < 0.8 for v in bal)}")


def _open_head_config(name: str) -> tuple[Path, dict]:
    """The package's open head config of bundled checkpoint ``name``: its path and parsed value."""
    import json

    from jevlaya_lab.decisions import bundled

    path = bundled.head_dir(name) / bundled.OPEN_DIR / bundled.HEAD_CONFIG
    return path, json.loads(path.read_text(encoding="utf-8"))


def _write_config(path: Path, config: dict) -> None:
    import json

    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    print(f"  wrote {path}")


def fit_line_main(args: Any) -> int:
    import tempfile

    import torch

    from bench import user_questions as uq
    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.agent import Agent

    negating = uq.negating_ids()
    statements = [s for s in dev_statements(args.data_dir) if not (args.without_negated and s[0] in negating)]
    reference = reference_texts(args.reference, args.seed)
    shipped = Agent(str(bundled.checkpoint_dir(args.checkpoint)), model_id=args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        temperature = _identity_line_copy(args.checkpoint, reference, Path(tmp) / "ckpt")
        agent = Agent(str(Path(tmp) / "ckpt"), model_id=args.checkpoint)
        assert agent._open is not None and agent._open.agent.temperatures.get("noul", 2) == temperature, \
            "the line is in the open part's noul temperature, the third of its config's"
        standardised, as_shipped = [], []
        for qid, texts, gold, question in statements:
            standardised.append((qid, torch.tensor(log_odds(agent, texts, question)), gold))
            as_shipped.append((qid, torch.tensor(log_odds(shipped, texts, question)), gold))
    results, (scale, bias) = line_fit(standardised)
    results["shipped"] = line_fit(as_shipped)[0]["as is"]
    n = len(standardised)
    print(f"{args.checkpoint}: {n} dev statements read against {len(reference)} reference messages")
    _print_rows(results, ("shipped", "as is", "left out"), n)
    for label, keep in (("negated as a whole", True), ("the others", False)):
        at = [i for i, (qid, *_) in enumerate(standardised) if (qid in negating) == keep]
        if at and len(at) < n:
            print(f" {len(at)} {label}:")
            _print_rows({k: [v[i] for i in at] + [v[n + i] for i in at] for k, v in results.items()},
                        ("shipped", "as is", "left out"), len(at))
    line = [round(scale * temperature, 4), round(bias * temperature, 4)]
    print(f"  line fit on all {n}: scale {scale:.4f}, bias {bias:.4f} -> config line {line} (x {temperature})")
    if args.ship:
        path, config = _open_head_config(args.checkpoint)
        config["similarity_prior"]["reader"].update(line=line, reference=reference)
        _write_config(path, config)
    return 0


def folded_fallback(fallback: list[float], w: float, c: float, temperature: float) -> list[float]:
    """The ``fallback`` ``[scale, bias, hubness]`` whose unseen statements' log-odds are ``w * L + c``
    where ``fallback``'s were ``L`` (a logit over the noul ``temperature``), rounded to 4 places."""
    scale, bias, hubness = fallback
    return [round(w * scale, 4), round(w * bias + c * temperature, 4), round(w * hubness, 4)]


def fit_fallback_main(args: Any) -> int:
    import torch

    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.agent import Agent

    agent = Agent(str(bundled.checkpoint_dir(args.checkpoint)), model_id=args.checkpoint)
    reader = None if agent._open is None else agent._open.agent.decision_model.prior.config.reader
    if agent._open is None or (reader is not None and reader.blend is not None):
        raise SystemExit(f"--fit-fallback: {args.checkpoint}'s open part must exist and read no statement "
                         "(a reader with a blend answers them: use --fit-line)")
    answers = [(qid, torch.tensor(log_odds(agent, texts, question)), gold)
               for qid, texts, gold, question in dev_statements(args.data_dir)]
    results, (w, c) = line_fit(answers)
    n = len(answers)
    print(f"{args.checkpoint}: {n} dev statements, log-odds as answered by the open part")
    _print_rows(results, ("as is", "left out"), n)
    path, config = _open_head_config(args.checkpoint)
    temperature = float(config["temperature"][2])
    was = config["similarity_prior"]["fallback"]
    fallback = folded_fallback(was, w, c, temperature)
    print(f"  fit on all {n}: w {w:.4f}, c {c:.4f} -> fallback {fallback} (was {was}, T {temperature})")
    if args.ship:
        config["similarity_prior"]["fallback"] = fallback
        _write_config(path, config)
    return 0


def negated(statement: str) -> str:
    """A negation that any statement takes: "It is not true that s." for a statement ``S``."""
    return f"It is not true that {inside(statement)}."


def negation_main(args: Any) -> int:
    """``--negation``: see the module docstring."""
    import torch

    from bench.quality import _auc
    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.agent import Agent

    agent = Agent(str(bundled.checkpoint_dir(args.checkpoint)), model_id=args.checkpoint)
    rows = []
    for qid, texts, gold, question in dev_statements(args.data_dir):
        said = torch.tensor(log_odds(agent, texts, question))
        denied = torch.tensor(log_odds(agent, texts, {**question, "instructions": negated(question["instructions"])}))
        rows.append((qid, said, denied, gold))

    def left_out(features) -> list[float]:
        scores = _left_out([(name, features(a, b), gold) for name, a, b, gold in rows])
        return [balanced(v.tolist(), gold) for v, (*_, gold) in zip(scores, rows)]

    results = {
        "S as shipped": [balanced(a.tolist(), g) for _, a, _, g in rows],
        "S - not S at 0": [balanced((a - b).tolist(), g) for _, a, b, g in rows],
        "S - not S refit": left_out(lambda a, b: (a - b)[:, None]),
        "S, not S refit": left_out(lambda a, b: torch.stack([a, b], dim=1)),
    }
    print(f"{args.checkpoint}: {len(rows)} dev statements, each also asked as 'It is not true that ...'")
    print(f"  mean AUC: S {statistics.mean(_auc(a.tolist(), g) for _, a, _, g in rows):.3f}, "
          f"'no' to not S {statistics.mean(_auc((-b).tolist(), g) for _, _, b, g in rows):.3f}, "
          f"S - not S {statistics.mean(_auc((a - b).tolist(), g) for _, a, b, g in rows):.3f}")
    for name, values in results.items():
        print(f"  {name:<16} balanced {statistics.mean(values):.3f}  below 0.80: {sum(v < 0.8 for v in values)}")
    return 0


UNRELATED = (
    "The writer mentions the weather.", "The message is about a sports game.", "The writer talks about their pet.",
    "The text is a poem.", "The writer describes a holiday they enjoyed.", "The message talks about cooking a recipe.",
    "The writer mentions a film they watched.", "The text discusses politics.",
    "The writer talks about their children.",
    "The message is about music.", "The writer asks about a school exam.", "The text mentions a hospital visit.",
    "The writer talks about gardening.", "The message is about a video game.", "The writer mentions their birthday.",
    "The message discusses a scientific discovery.", "The text is written as a joke.",
    "The writer talks about a wedding.", "The message mentions a train journey.",
    "The writer talks about learning a language.")
"""``--message-centre``'s statements, written for it: none is a benchmark question's property."""


def _print_levers(title: str, rows: list[tuple[str, Any, list[bool]]], variants: dict[str, Any]) -> None:
    """Mean AUC, balanced accuracy at 0 and refit on the other statements, per variant of the
    log-odds (``variants``: name -> function of a row's index to its log-odds tensor)."""
    from bench.quality import _auc

    print(title)
    golds = [gold for *_, gold in rows]
    for name, scores in variants.items():
        values = [scores(i) for i in range(len(rows))]
        at_zero = [balanced(v.tolist(), g) for v, g in zip(values, golds)]
        refit = _left_out([(qid, v[:, None], gold) for v, (qid, _, gold) in zip(values, rows)])
        print(f"  {name:<22} AUC {statistics.mean(_auc(v.tolist(), g) for v, g in zip(values, golds)):.3f}"
              f"  balanced {statistics.mean(at_zero):.3f} (below 0.80: {sum(b < 0.8 for b in at_zero)})"
              f"  refit {statistics.mean(balanced(v.tolist(), g) for v, g in zip(refit, golds)):.3f}")


def message_centre_main(agent, statements: list, args: Any) -> None:
    """``--message-centre``: see the module docstring."""
    import torch

    texts = list(dict.fromkeys(t for _, ts, _, _ in statements for t in ts))
    bank = torch.tensor([log_odds(agent, texts, {"type": "noul", "instructions": s}) for s in UNRELATED])
    centre = dict(zip(texts, (bank.mean(0) - bank.mean()).tolist()))
    rows = [(qid, torch.tensor(log_odds(agent, ts, q)), gold) for qid, ts, gold, q in statements]
    m = [torch.tensor([centre[t] for t in ts]) for _, ts, _, _ in statements]
    _print_levers(f"{args.checkpoint}: {len(rows)} dev statements, each message also asked {len(UNRELATED)} "
                  "unrelated statements", rows,
                  {f"L - {a} m": (lambda i, a=a: rows[i][1] - a * m[i]) for a in (0.0, 0.25, 0.5, 1.0)})


def writer_worded(statement: str) -> str:
    """``statement`` with its subject made "The writer": a leading "They", "The customer", "The person",
    "The user", "The sender", "Whoever wrote this", "Someone", "I" (and "They're", "They'd", "I'm"), a
    leading "My" as "The writer's", and "I" / "my" / "me" elsewhere as "they" / "their" / "them"."""
    for pattern, replacement in ((r"^(They're|I'm)\b", "The writer is"), (r"^They'd\b", "The writer would"),
                                 (r"^(They|The customer|The person|The user|The sender|Whoever wrote this|Someone|I)\b",
                                  "The writer"), (r"^My\b", "The writer's"), (r"\bI am\b", "they are"),
                                 (r"\bI'm\b", "they're"), (r"\bI\b", "they"), (r"\bmy\b", "their"),
                                 (r"\bme\b", "them")):
        statement = re.sub(pattern, replacement, statement)
    return statement


def said_worded(statement: str) -> str:
    """"The message says that s." for a statement ``S``."""
    return f"The message says that {inside(statement)}."


def rewordings_main(agent, statements: list, args: Any) -> None:
    """``--rewordings``: see the module docstring."""
    import torch

    rows, worded = [], {"writer": [], "says": []}
    for qid, texts, gold, question in statements:
        rows.append((qid, torch.tensor(log_odds(agent, texts, question)), gold))
        for name, reword in (("writer", writer_worded), ("says", said_worded)):
            asked = reword(question["instructions"])
            worded[name].append(rows[-1][1] if asked == question["instructions"] else
                                torch.tensor(log_odds(agent, texts, {**question, "instructions": asked})))
    _print_levers(f"{args.checkpoint}: {len(rows)} dev statements, as written and reworded", rows, {
        "as written": lambda i: rows[i][1], "writer": lambda i: worded["writer"][i],
        "says": lambda i: worded["says"][i],
        "as written + writer": lambda i: (rows[i][1] + worded["writer"][i]) / 2,
        "as written + says": lambda i: (rows[i][1] + worded["says"][i]) / 2,
        "all three": lambda i: (rows[i][1] + worded["writer"][i] + worded["says"][i]) / 3})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="mini-en")
    parser.add_argument("--reference", type=int, default=300, help="hand-written messages a statement is read against")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", help="the intent datasets' folder (default $JEVLAYA_DATA_DIR)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fit-line", action="store_true",
                        help="fit the open part reader's line against the reference messages (see above)")
    parser.add_argument("--fit-fallback", action="store_true",
                        help="refit the open part's fallback on the dev statements (an open part without a blend)")
    parser.add_argument("--negation", action="store_true",
                        help="measure a contrast against a generic negation of each statement (see above)")
    parser.add_argument("--message-centre", action="store_true",
                        help="measure a per-message offset read from unrelated statements (see above)")
    parser.add_argument("--rewordings", action="store_true",
                        help="measure averaging over generic rewordings of each statement (see above)")
    parser.add_argument("--without-negated", action="store_true",
                        help="with --fit-line: leave out the dev statements that negate a property as a whole")
    parser.add_argument("--ship", action="store_true",
                        help="with --fit-line or --fit-fallback: write it into the package's open head")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    if args.fit_line:
        return fit_line_main(args)
    if args.fit_fallback:
        return fit_fallback_main(args)
    if args.negation:
        return negation_main(args)

    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.agent import Agent

    agent = Agent(str(bundled.checkpoint_dir(args.checkpoint)), model_id=args.checkpoint)
    if args.message_centre or args.rewordings:
        statements = dev_statements(args.data_dir)
        if args.message_centre:
            message_centre_main(agent, statements, args)
        if args.rewordings:
            rewordings_main(agent, statements, args)
        return 0
    reference = reference_texts(args.reference, args.seed)
    statements = []
    for qid, texts, gold, question in dev_statements(args.data_dir):
        answers = torch.tensor(log_odds(agent, texts, question))
        on_reference = torch.tensor(log_odds(agent, reference, question))
        z = (answers - on_reference.mean()) / on_reference.std().clamp_min(1e-6)
        statements.append((qid, answers, z, gold))

    results = lines(statements)
    print(f"{args.checkpoint}: {len(statements)} dev statements, {len(reference)} reference messages")
    for name, values in results.items():
        print(f"  {name:<9} balanced {statistics.mean(values):.3f}  below 0.80: {sum(v < 0.8 for v in values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
