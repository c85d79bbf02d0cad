"""Negated training statements (``training.negation``): each form of a negation, one by one, and
the pairs whose truth turns round with their statement."""

from __future__ import annotations

import json
import random

import pytest

from jevlaya_lab.decisions.training.negation import SENTENCES, inside, negate, negated_pairs, verb_negation
from jevlaya_lab.decisions.training.reader import EMOTION_REWORDINGS, EMOTION_STATEMENTS


@pytest.mark.parametrize(("statement", "plain", "contracted"), [
    ("The message asks how to activate a card.", "The message does not ask how to activate a card.",
     "The message doesn't ask how to activate a card."),
    ("The customer wishes they could pay later.", "The customer does not wish they could pay later.", None),
    ("The person denies making a payment.", "The person does not deny making a payment.", None),
    ("The writer expresses love or affection.", "The writer does not express love or affection.", None),
    ("The writer is happy.", "The writer is not happy.", "The writer isn't happy."),
    ("The customer's card is blocked.", "The customer's card is not blocked.", "The customer's card isn't blocked."),
    ("The person has a question.", "The person does not have a question.", "The person doesn't have a question."),
    ("The writer has just realised something.", "The writer has not just realised anything.",
     "The writer hasn't just realised anything."),
    ("The writer admires or praises someone.", "The writer does not admire or praise anyone.", None),
    ("The writer agrees with or approves of something.", "The writer does not agree with or approve of anything.",
     None),
    ("The message asks about fees or charges.", "The message does not ask about fees or charges.", None),
])
def test_a_statement_in_the_present_gets_its_verb_negated(statement, plain, contracted):
    assert verb_negation(statement) == plain
    if contracted is not None:
        assert verb_negation(statement, contracted=True) == contracted


@pytest.mark.parametrize("statement", [
    "The writer does not understand something and is puzzled.",  # already a negation
    "The customer cannot add a recipient.",
    "The text carries no particular emotion.",
    "The person no longer needs their booking.",
    "The customer transferred money to the wrong account.",  # a past verb: its bare form is not known
    "Somebody writes about money.",  # not "The <subject> <verb>"
    "The message",
])
def test_a_statement_the_verb_rule_does_not_fit_is_left_to_the_sentence_forms(statement):
    assert verb_negation(statement) is None
    rng = random.Random(0)
    for _ in range(20):
        assert negate(statement, rng) in {s.format(inside(statement)) for s in SENTENCES}


def test_inside_keeps_i_and_acronyms_and_drops_the_full_stop():
    assert inside("The writer is happy.") == "the writer is happy"
    assert inside("I want my money back.") == "I want my money back"
    assert inside("SMS codes never arrive.") == "SMS codes never arrive"


def test_negate_draws_both_forms_and_every_training_statement_gets_one():
    rng = random.Random(0)
    drawn = [negate("The writer is sad.", rng) for _ in range(200)]
    by_verb = sum(d in ("The writer is not sad.", "The writer isn't sad.") for d in drawn)
    assert 90 <= by_verb <= 150 and set(drawn) - {"The writer is not sad.", "The writer isn't sad."} == {
        s.format("the writer is sad") for s in SENTENCES}
    from jevlaya_lab.decisions.training import intents

    data = json.loads(intents.INTENTS_FILE.read_text(encoding="utf-8"))
    statements = [s for v in data.values() for s in v["statements"]] + [s for s in EMOTION_STATEMENTS.values() if s]
    statements += [w for ws in EMOTION_REWORDINGS.values() for w in ws]
    negated = [negate(s, random.Random(1)) for s in statements]
    assert all(n and n != s for n, s in zip(negated, statements))
    ruled = [verb_negation(s) for s in statements]
    assert sum(r is not None for r in ruled) / len(ruled) > 0.85  # most take the verb form


def test_negated_pairs_turn_the_truth_round_with_the_statement_and_keep_the_rest():
    pairs = [("The writer is happy.", f"text {i}", i % 2 == 0) for i in range(1000)]
    out = negated_pairs(pairs, 0.3, random.Random(0))
    assert [t for _, t, _ in out] == [t for _, t, _ in pairs]
    changed = [(o, p) for o, p in zip(out, pairs) if o[0] != p[0]]
    assert 250 <= len(changed) <= 350
    assert all(o[2] is (not p[2]) for o, p in changed)
    assert all(o == p for o, p in zip(out, pairs) if o[0] == p[0])
    assert negated_pairs(pairs, 0.0, random.Random(0)) == pairs
    with pytest.raises(ValueError, match="share=1.5: give the share of pairs to negate, from 0 to 1"):
        negated_pairs(pairs, 1.5, random.Random(0))


TOPICS = {"The customer writes about money.": ["refund", "invoice"],
          "The customer writes about the app.": ["crash", "login"]}


def test_a_reader_trained_with_negations_reads_them_and_one_trained_without_cannot():
    """End to end on a tiny encoder: the same steps and pairs, once with none negated and once with
    half of them negated (``ReaderTraining.negated``'s pairs, as ``build_reader`` draws them). Held-out
    negated pairs (every form :func:`negate` writes): the first reader reads them near chance (the
    shipped ``mini-en`` reader, at full size, read users' negated statements upside down), the second
    right, and both read the statements as written without a fault."""
    from jevlaya_lab.decisions.testing import make_tiny_parts, topic_pairs
    from jevlaya_lab.decisions.training.reader import ReaderTraining, reader_logits, train_reader

    rng = random.Random(0)
    training = ReaderTraining(layers=1, steps=700, batch=16, lr=1e-3, out_lr=3e-3, seed=0)
    pairs = topic_pairs(rng, training.steps * training.batch, TOPICS)
    held = topic_pairs(rng, 300, TOPICS)
    held_negated = negated_pairs(held, 1.0, rng)

    def accuracy(reader, parts, rows) -> float:
        r = reader_logits(parts.model, reader, parts.tokenizer, rows)
        return sum((x > 0) == truth for x, (*_, truth) in zip(r.tolist(), rows)) / len(rows)

    plain_parts, taught_parts = make_tiny_parts(num_layers=2), make_tiny_parts(num_layers=2)
    plain = train_reader(plain_parts.model, plain_parts.tokenizer, pairs, training, log=lambda _: None)
    taught = train_reader(taught_parts.model, taught_parts.tokenizer, negated_pairs(pairs, 0.5, random.Random(1)),
                          training, log=lambda _: None)
    assert accuracy(plain, plain_parts, held) == accuracy(taught, taught_parts, held) == 1.0
    assert accuracy(plain, plain_parts, held_negated) < 0.7  # measured 0.58: it cannot tell a negation
    assert accuracy(taught, taught_parts, held_negated) > 0.85  # measured 0.90


@pytest.mark.parametrize("argv", [["--reader-only", "--reader-negated", "1.5"],
                                  ["--reader-only", "--reader-negated", "-0.1"],
                                  ["--reader-refit", "--reader-negated", "0.25"]])
def test_a_bad_negated_share_is_refused_before_anything_loads(argv, capsys):
    from jevlaya_lab.decisions.training import cli as train_cli

    assert train_cli.main(["--name", "mini-en", *argv]) == 1
    err = capsys.readouterr().err
    assert f"--reader-negated {float(argv[-1]):g}: give the share of training pairs to negate, from 0 to 1" in err
    assert "with --reader-only" in err
