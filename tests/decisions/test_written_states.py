"""The hand-written training states (``training/data/written``): every record loads with valid
gold answers for its preset, both groups are there in their languages, and they become training
rows the way synthetic preset rows do (several copies, each with its own option order)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.training.synthetic import gold_index
from jevlaya_lab.decisions.training.written import DATA, load_written, written_examples


def test_every_file_loads_with_valid_answers_for_every_preset_question():
    states = load_written()
    counts = Counter((s.group, s.preset) for s in states)
    assert set(counts) == {("en", p) for p in presets.PRESETS} | {("multi", "triage")}
    assert counts[("en", "triage")] >= 600 and counts[("multi", "triage")] >= 600
    for s in states:
        assert set(s.golds) == set(presets.PRESETS[s.preset]())
    triage = [s for s in states if s.preset == "triage"]
    assert all(s.golds["is_urgent"] == (s.golds["priority"] >= 2) for s in triage)
    urgent = sum(s.golds["is_urgent"] for s in triage) / len(triage)
    assert 0.3 < urgent < 0.6, urgent  # both answers are well represented


def test_multilingual_states_cover_the_thirteen_languages():
    langs = Counter(r["lang"] for path in DATA.glob("multi_*.json")
                    for r in json.loads(path.read_text(encoding="utf-8")))
    assert set(langs) == {"es", "fr", "de", "pt", "it", "ru", "uk", "ar", "hi", "zh", "ja", "ko", "tr"}
    assert min(langs.values()) >= 40


def test_written_rows_ask_every_question_in_fresh_option_orders():
    states = [s for s in load_written(("en",)) if s.preset == "email"][:20]
    rows = written_examples(states, copies=3, seed=5)
    assert len(rows) == 3 * 20 * len(presets.PRESETS["email"]())
    assert {r.task for r in rows} == {f"written.email.{q}" for q in presets.PRESETS["email"]()}
    orders = {tuple(r.question["criteria"]) for r in rows if r.task == "written.email.category"}
    assert len(orders) > 20  # shuffled per copy, not one fixed order
    for r in rows:
        gold_index(r)  # the gold answer is one of the row's options
    assert written_examples(states, copies=3, seed=5) == rows
    multi = written_examples([s for s in load_written(("multi",))][:5], copies=1, seed=0)
    assert {r.task.split(".")[1] for r in multi} == {"triage_ml"}


@pytest.mark.parametrize("name, record, fragment", [
    ("en_triage.json", [{"message": "hi", "intent": "refnud", "sentiment": "neutral", "priority": 0}],
     "en_triage.json[0]: intent = 'refnud' is not a valid answer"),
    ("en_router.json", [{"request": "hi", "route": "chat", "complexity": 5, "needs_tools": False}],
     "complexity = 5"),
    ("en_guard.json", [{"user_input": "", "attack": "none"}], "needs a non-empty string 'user_input'"),
    ("en_email.json", [{"email": "Subject: hi", "category": "spam"}], "missing or mistyped label for 'needs_reply'"),
    ("fr_triage.json", [], "name it <group>_<preset>"),
])
def test_a_bad_record_or_file_name_is_refused_with_the_place_and_the_fix(tmp_path, name, record, fragment):
    (tmp_path / name).write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_written(("en",), str(tmp_path))
    assert fragment in str(info.value)


def test_unknown_groups_are_refused():
    with pytest.raises(ValueError, match="use a subset of en, multi"):
        load_written(("de",))


def test_each_state_knows_its_writer_batch_from_the_file_name(tmp_path):
    record = {"message": "The invoice total looks wrong.", "intent": "billing", "sentiment": "neutral", "priority": 1}
    for name in ("en_triage.json", "en_triage_b.json", "en_triage_c.json"):
        (tmp_path / name).write_text(json.dumps([record]), encoding="utf-8")
    assert [s.batch for s in load_written(("en",), str(tmp_path))] == ["a", "b", "c"]


def test_every_english_preset_has_four_writers():
    """Cross-writer validation needs other writers to hold out: each English preset has batches a,
    b, d and e (triage also c), each of a few dozen states at least."""
    states = load_written(("en",))
    for preset in presets.PRESETS:
        sizes = Counter(s.batch for s in states if s.preset == preset)
        assert set(sizes) >= {"a", "b", "d", "e"}, (preset, sizes)
        assert min(sizes.values()) >= 40, (preset, sizes)


def test_label_aliases_rename_options_and_the_gold_alike_and_nothing_else():
    """label_aliases: a share of the choice rows name some options as a user might ("tech support"),
    from a stream of their own, so the rows stay those of alias_share=0 apart from the names."""
    from jevlaya_lab.decisions.training import bank

    states = load_written(("en",))[::40]
    plain = written_examples(states, copies=2, seed=5)
    renamed = written_examples(states, copies=2, seed=5, alias_share=1.0)
    assert len(plain) == len(renamed)
    changed = mixed = 0
    for a, b in zip(plain, renamed):
        assert (a.state, a.task) == (b.state, b.task)
        if a.question["type"] != "choice":
            assert (a.question, a.gold) == (b.question, b.gold)
            continue
        changed += 1
        preset = a.task.split(".")[1]
        old, new = list(a.question["criteria"]), list(b.question["criteria"])
        assert len(old) == len(new)
        assert all(n == o or n in bank.LABEL_ALIASES[preset][o] for o, n in zip(old, new))
        assert old != new  # at least one option renamed; the others keep their names (mixed rows)
        assert gold_index(b) == gold_index(a) and b.gold in [a.gold, *bank.LABEL_ALIASES[preset][a.gold]]
        mixed += 0 < sum(o == n for o, n in zip(old, new))
        if isinstance(a.question["criteria"], dict):  # descriptions stay with their option
            assert list(a.question["criteria"].values()) == list(b.question["criteria"].values())
    assert changed > 20 and mixed > changed / 3
    some = written_examples(states, copies=2, seed=5, alias_share=0.3)
    share = sum(x.question != y.question for x, y in zip(plain, some)) / changed
    assert 0.15 < share < 0.45
    with pytest.raises(ValueError, match="alias_share=1.5"):
        written_examples(states, copies=1, seed=5, alias_share=1.5)


def test_no_alias_is_a_label_the_training_uses():
    """An alias text is kept out of the anchors (written.is_alias_text), so no alias may equal a
    preset, dataset or generic-task label: that label's texts would lose their gate."""
    from jevlaya_lab.decisions.training import bank
    from jevlaya_lab.decisions.training.intents import load_intents
    from jevlaya_lab.decisions.training.written import is_alias_text

    labels = {i.intent for i in load_intents().values()} | set(bank.TOPICS) | set(bank.EMOTIONS)
    labels |= {label for make in presets.PRESETS.values() for q in make().values() if q["type"] == "choice"
               for label in q["criteria"]}
    assert not [label for label in labels if is_alias_text(label.replace("_", " "))]
    assert is_alias_text("tech support") and is_alias_text("tech support: an existing customer needs help")
    assert not is_alias_text("technical issue: the product is broken")


def test_every_label_of_every_preset_choice_has_aliases():
    from jevlaya_lab.decisions.training import bank

    for preset, make in presets.PRESETS.items():
        for qid, q in make().items():
            if q["type"] == "choice":
                assert set(q["criteria"]) <= set(bank.LABEL_ALIASES[preset]), (preset, qid)
                names = [n for label in q["criteria"] for n in bank.LABEL_ALIASES[preset][label]]
                assert len(names) == len(set(names)), (preset, qid)  # one alias names one option


def test_no_text_is_in_two_writer_batches():
    """A held-out batch must be unseen: the same text in two batches would be trained and scored."""
    batches: dict[str, set[str]] = {}
    for s in load_written():
        batches.setdefault(" ".join(s.text.lower().split()), set()).add(f"{s.group}/{s.batch}")
    assert not {text: where for text, where in batches.items() if len(where) > 1}


def test_a_held_out_writer_batch_is_the_whole_written_held_out_split_and_nothing_of_it_is_trained():
    """Cross-writer validation (bench/quality.py --cross-writer): batch b's states are held out
    whole, once per question, and the other batches train (written_copies rows each)."""
    from jevlaya_lab.decisions.training.trainer import TrainConfig, _examples, run_split

    cfg = TrainConfig(datasets="", n_synthetic=4, n_heldout_synthetic=4, written="en", written_holdout="b")
    train, held = _examples(cfg, run_split(cfg), lambda m: None)
    states = load_written(("en",))
    questions = {p: len(presets.PRESETS[p]()) for p in presets.PRESETS}
    held_rows = [e for e in held if e.task.startswith("written.")]
    train_rows = [e for e in train if e.task.startswith("written.")]
    assert len(held_rows) == sum(questions[s.preset] for s in states if s.batch == "b")
    assert len(train_rows) == 3 * sum(questions[s.preset] for s in states if s.batch != "b")
    held_texts = {s.text for s in states if s.batch == "b"}

    def text_of(row):  # wrap_state gives the text alone or inside the preset's state dict
        return row.state if isinstance(row.state, str) else row.state[presets.STATE_FIELDS[row.task.split(".")[1]]]

    assert all(text_of(e) in held_texts for e in held_rows)
    assert not any(text_of(e) in held_texts for e in train_rows)
    with pytest.raises(ValueError, match="written_holdout='z'"):
        run_split(TrainConfig(datasets="", n_synthetic=4, written="en", written_holdout="z"))
