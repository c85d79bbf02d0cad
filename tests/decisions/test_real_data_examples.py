"""Examples built from real utterances (training/real_data.py) and the dataset loader (training/datasets.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from jevlaya_lab.decisions.questions import parse_questions
from jevlaya_lab.decisions.training.datasets import DatasetError, Utterance, load_dataset
from jevlaya_lab.decisions.training.intents import load_intents
from jevlaya_lab.decisions.training.real_data import (
    examples_from_utterances,
    intent_label,
    zero_shot_choice,
    zero_shot_noul,
)
from jevlaya_lab.decisions.training.synthetic import gold_index

INTENTS = load_intents()
KEYS = sorted(INTENTS)
# made-up utterances under real labels (the datasets' own text never enters the repository)
UTTERANCES = [Utterance(f"made-up message number {i} about {KEYS[i % len(KEYS)]}", KEYS[i % len(KEYS)])
              for i in range(1200)]


def test_examples_are_seeded_valid_and_point_at_their_gold():
    a = examples_from_utterances(UTTERANCES, INTENTS, seed=3)
    assert a == examples_from_utterances(UTTERANCES, INTENTS, seed=3)
    assert len(a) == len(UTTERANCES)
    for ex in a:
        q = parse_questions({"q": ex.question})[0]  # a valid question
        assert 0 <= gold_index(ex) < q.n_options


def test_choices_span_2_to_20_options_with_same_group_hard_negatives():
    examples = [e for e in examples_from_utterances(UTTERANCES, INTENTS, seed=1) if e.question["type"] == "choice"]
    sizes = Counter(len(e.question["criteria"]) for e in examples)
    assert min(sizes) == 2 and max(sizes) == 20
    by_label = {(i.dataset, intent_label(i)): i for i in INTENTS.values()}
    same_group = 0
    for e in examples:
        dataset = e.task.split(".")[0]
        gold = by_label[(dataset, e.gold)]
        same_group += any(by_label.get((dataset, label)) and by_label[(dataset, label)].group == gold.group
                          for label in e.question["criteria"] if label != e.gold)
    assert same_group / len(examples) > 0.5


def test_training_texts_never_use_the_held_out_descriptions_or_statements():
    held_out = {i.eval_description for i in INTENTS.values()} | {i.eval_statement for i in INTENTS.values()}
    for e in examples_from_utterances(UTTERANCES, INTENTS, seed=2):
        texts = [e.question["instructions"], *(e.question.get("criteria") or {}).values()]
        assert not held_out & set(texts)


def test_yes_no_rows_are_true_and_false_in_about_equal_measure():
    nouls = [e for e in examples_from_utterances(UTTERANCES, INTENTS, seed=4) if e.question["type"] == "noul"]
    share = sum(e.gold for e in nouls) / len(nouls)
    assert 0.4 < share < 0.6 and len(nouls) > 300


def test_zero_shot_questions_use_only_the_held_out_texts():
    criteria = zero_shot_choice(INTENTS, "banking77")
    assert len(criteria) == 77
    assert set(criteria.values()) == {i.eval_description for i in INTENTS.values() if i.dataset == "banking77"}
    pairs = zero_shot_noul([u for u in UTTERANCES if u.intent.startswith("hwu64/")], INTENTS, seed=0)
    statements = {i.eval_statement for i in INTENTS.values()}
    assert all(s in statements for _, s, _ in pairs)
    assert {t for _, _, t in pairs} == {True, False}


def test_loading_a_missing_dataset_names_the_path_and_the_option(tmp_path):
    with pytest.raises(DatasetError, match="--data-dir") as info:
        load_dataset("banking77", tmp_path)
    assert str(tmp_path / "banking77" / "train.csv") in str(info.value)
    with pytest.raises(ValueError, match="dataset='bank'.*clinc150, banking77, hwu64"):
        load_dataset("bank", tmp_path)
