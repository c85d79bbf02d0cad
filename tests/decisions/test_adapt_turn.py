"""A yes/no the checkpoint reads upside down is turned round by ``adapt`` when the labels show it.

A statement negated as a whole ("Nothing arrived broken or damaged.") can rank the user's states
upside down: the ones where it holds get the lowest probabilities. ``adapt`` then fits the
correction on the turned log-probabilities, but only when the labels' zero-shot AUC is at most
``TURN_AUC`` and the turned fit's cross-validated log-loss beats the unturned one's by more than
``TURN_MARGIN``; the turn is stored as ``"sign": -1`` (adaptation version 2).
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from jevlaya_lab.decisions import adapt_fit
from jevlaya_lab.decisions.adaptation_report import auc
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.errors import CheckpointError
from jevlaya_lab.decisions.questions import parse_questions
from jevlaya_lab.decisions.testing import make_tiny_parts

STATEMENT = {"s": {"type": "noul", "instructions": "Nothing arrived broken or damaged."}}


def features(n: int, direction: float, seed: int, strength: float = 1.5) -> tuple[torch.Tensor, ...]:
    """``(lp, vectors, targets)`` for ``n`` states, half "yes": the log-odds follow the truth
    (``direction`` 1), are turned round (-1) or carry none of it (0); the vectors carry none."""
    generator = torch.Generator().manual_seed(seed)
    targets = torch.arange(n) % 2
    margin = direction * strength * (2.0 * targets - 1) + torch.randn(n, generator=generator, dtype=torch.float64)
    lp = torch.log_softmax(torch.stack([torch.zeros(n, dtype=torch.float64), margin], dim=1), dim=-1)
    vectors = torch.nn.functional.normalize(torch.randn(n, 16, generator=generator, dtype=torch.float64), dim=-1)
    return lp, vectors, targets


def balanced_on(fit, center, lp, vectors, targets) -> float:
    said = torch.softmax(adapt_fit.apply_fit(fit, center, lp, vectors), dim=-1).argmax(dim=1)
    return sum(float((said[targets == c] == c).double().mean()) for c in (0, 1)) / 2


@pytest.mark.parametrize("method", ["linear", "temperature+bias", "auto"])
def test_labels_that_rank_upside_down_turn_the_answer_round(method: str) -> None:
    (q,) = parse_questions(STATEMENT)
    turned_ones = []
    for seed in range(4):
        lp, vectors, targets = features(8, -1.0, seed)
        assert auc(lp, targets) <= adapt_fit.TURN_AUC, "the draw does not rank upside down"
        fit, center, report = adapt_fit.fit_question(q, lp, vectors, targets, seed=seed, method=method)
        assert report.turned == (fit.sign == -1)
        turned_ones.append(report.turned)
        if report.turned:
            assert report.shown_method == f"turned, {report.method}"
            assert any(name.startswith("turned, ") for name in report.cv_log_loss)
            assert report.cv_balanced > report.zero_shot_balanced
            fresh = features(200, -1.0, 100 + seed)
            assert balanced_on(fit, center, *fresh) >= 0.75  # states the fit never saw
    assert sum(turned_ones) >= 3, turned_ones


def test_labels_that_agree_are_never_turned() -> None:
    """(Labels that carry no ranking at all may come out upside down by chance, eight at a time,
    and be turned; that costs nothing in expectation, since neither way ranks.)"""
    (q,) = parse_questions(STATEMENT)
    for seed in range(8):
        lp, vectors, targets = features(8, 1.0, seed)
        fit, _, report = adapt_fit.fit_question(q, lp, vectors, targets, seed=seed, method="linear")
        assert not report.turned and fit.sign == 1, seed
        assert auc(lp, targets) > adapt_fit.TURN_AUC  # the turn is not even tried
        assert not any(name.startswith("turned") for name in report.cv_log_loss)


def test_the_margin_the_bound_and_turn_false_hold_a_turn(monkeypatch) -> None:
    """The same labels turned by default, and not with ``turn=False``, a margin larger than any
    gain, or a bound below their AUC."""
    (q,) = parse_questions(STATEMENT)
    lp, vectors, targets = features(8, -1.0, 0)
    assert adapt_fit.fit_question(q, lp, vectors, targets, method="linear")[2].turned
    assert not adapt_fit.fit_question(q, lp, vectors, targets, method="linear", turn=False)[2].turned
    monkeypatch.setattr(adapt_fit, "TURN_MARGIN", 10.0)
    assert not adapt_fit.fit_question(q, lp, vectors, targets, method="linear")[2].turned
    monkeypatch.setattr(adapt_fit, "TURN_MARGIN", 0.05)
    monkeypatch.setattr(adapt_fit, "TURN_AUC", 0.0)
    assert not adapt_fit.fit_question(q, lp, vectors, targets, method="linear")[2].turned


def test_choices_are_never_turned() -> None:
    (q,) = parse_questions({"c": {"type": "choice", "instructions": "Which?", "criteria": {"a": "", "b": ""}}})
    lp, vectors, targets = features(8, -1.0, 0)
    _, _, report = adapt_fit.fit_question(q, lp, vectors, targets, method="linear")
    assert not report.turned and not any(name.startswith("turned") for name in report.cv_log_loss)


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    """A tiny Agent adapted on a yes/no and saved (an ordinary, unturned adaptation: version 1)."""
    base = Agent(make_tiny_parts(seed=1), model_id="tiny", device="cpu")
    rng = random.Random(0)
    words = "refund invoice crash login order plan bill error".split()
    labels = [(" ".join(rng.sample(words, 3)), {"s": i % 2 == 0}) for i in range(10)]
    saved = base.adapt(labels, STATEMENT, method="temperature+bias").save(tmp_path_factory.mktemp("a") / "a")
    return saved


def test_a_stored_turn_is_read_and_applied_on_load(saved_tiny) -> None:
    """``"sign": -1`` turns the checkpoint's log-odds round: the turned answer's log-odds and the
    unturned one's sum to twice the fitted threshold bias, whatever the state."""
    config_file = saved_tiny / "rl_agent_config.json"
    config = json.loads(config_file.read_text())
    assert config["adaptation"]["version"] == 1 and "sign" not in config["adaptation"]["questions"][0]
    states = ["refund my invoice", "the login page crashed", "upgrade my plan please"]
    log_odds = lambda p: torch.logit(torch.tensor(p, dtype=torch.float64)).item()  # noqa: E731
    before = [log_odds(r["answers"]["s"]["noul"]) for r in Agent(saved_tiny, device="cpu").predict_batch(states, STATEMENT)]
    entry = config["adaptation"]["questions"][0]
    bias = entry["bias"][1] - entry["bias"][0]
    turned = json.loads(json.dumps(config))
    turned["adaptation"]["version"] = 2
    turned["adaptation"]["questions"][0]["sign"] = -1
    config_file.write_text(json.dumps(turned))
    try:
        agent = Agent(saved_tiny, device="cpu")
        after = [log_odds(r["answers"]["s"]["noul"]) for r in agent.predict_batch(states, STATEMENT)]
        for b, a in zip(before, after):
            assert b + a == pytest.approx(2 * bias, abs=1e-3), (before, after)
        assert agent.adapted_questions == STATEMENT
        for value, words in ((dict(turned["adaptation"], version=1), "-1 in version 2 only"),
                             (dict(turned["adaptation"], version=3), "\"version\" 1 or 2, got 3"),
                             (dict(turned["adaptation"], version=True), "got True")):
            config_file.write_text(json.dumps({**turned, "adaptation": value}))
            with pytest.raises(CheckpointError, match="adaptation is invalid") as caught:
                Agent(saved_tiny, device="cpu")
            assert words in str(caught.value)
        broken = json.loads(json.dumps(turned))
        broken["adaptation"]["questions"][0]["sign"] = 2
        config_file.write_text(json.dumps(broken))
        with pytest.raises(CheckpointError, match=r"questions\[0\] \(sign must be 1 or -1"):
            Agent(saved_tiny, device="cpu")
    finally:
        config_file.write_text(json.dumps(config))


@pytest.mark.integration
def test_mini_en_turns_a_statement_it_reads_upside_down_from_eight_labels(tmp_path) -> None:
    """"None of our products has failed them." (a dev statement of the user-question benchmark):
    ``mini-en`` answers it upside down on the hand-written messages (balanced 0.31 and 0.38 at 0.5
    on the held-out ones of two seeded draws; 0.17-0.24 before its reader was trained with
    negations). Eight labels (4 + 4) turn it round (measured 0.74 and 0.63), above the same labels
    fitted unturned on each draw (0.25 and 0.57), and the saved checkpoint stores the turn and
    answers the same after a reload."""
    from pathlib import Path

    from jevlaya_lab import load

    data = Path(__file__).parents[1] / "data" / "user_questions"
    states = json.loads((data / "en_states.json").read_text(encoding="utf-8"))["states"]
    question = {"failed": {"type": "noul", "instructions": "None of our products has failed them."}}
    holds = [s["text"] for s in states if "broken" not in s["tags"]]
    fails = [s["text"] for s in states if "broken" in s["tags"]]

    def balanced(agent: Agent, test: list) -> float:
        said = [r["answers"]["failed"]["noul"] >= 0.5 for r in agent.predict_batch([s for s, _ in test], question)]
        recalls = [sum(y == g for (_, g), y in zip(test, said) if g == v) / sum(g == v for _, g in test)
                   for v in (True, False)]
        return sum(recalls) / 2

    base = load("mini-en", device="cpu")
    gains = []
    for seed in (0, 1):
        rng = random.Random(seed)
        yes, no = holds[:], fails[:]
        rng.shuffle(yes)
        rng.shuffle(no)
        train = [(s, {"failed": True}) for s in yes[:4]] + [(s, {"failed": False}) for s in no[:4]]
        test = [(s, True) for s in yes[4:]] + [(s, False) for s in no[4:]]
        adapted = base.adapt(train, question)
        report = adapted.adaptation_report["failed"]
        zero, fitted = balanced(base, test), balanced(adapted, test)
        assert report.turned and zero < 0.45 and fitted >= 0.6, (seed, report.cv_log_loss, zero, fitted)
        kept = base.adapt(train, question, turn=False)
        unturned = balanced(kept, test)
        assert not kept.adaptation_report["failed"].turned and unturned < fitted, (seed, unturned, fitted)
        gains.append(fitted - unturned)
    assert sum(gains) / len(gains) > 0.1, gains
    saved = adapted.save(tmp_path / "turned")
    stored = json.loads((saved / "rl_agent_config.json").read_text())["adaptation"]
    assert stored["version"] == 2 and stored["questions"][0]["sign"] == -1
    fresh = load(saved, device="cpu")
    texts = [s for s, _ in test[:5]] + [s for s, _ in test[-3:]]
    assert ([r["answers"] for r in fresh.predict_batch(texts, question)]
            == [r["answers"] for r in adapted.predict_batch(texts, question)])
