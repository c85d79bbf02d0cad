"""Presets: fresh valid question dicts that name the state field they read."""

from __future__ import annotations

import pytest

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.questions import parse_questions

FACTORIES = [presets.triage_questions, presets.email_questions, presets.guard_questions,
             presets.moderation_questions, presets.router_questions]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_preset_returns_a_fresh_dict_each_call(factory):
    first = factory()
    first.clear()
    second = factory()
    assert second, "a preset must not share its dict between calls"
    inner = next(iter(second.values()))
    inner["instructions"] = "changed"
    assert next(iter(factory().values()))["instructions"] != "changed"


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_preset_names_the_state_field_it_reads_in_every_instruction(name):
    field = presets.STATE_FIELDS[name]
    questions = presets.PRESETS[name]()
    assert all(field in q["instructions"] for q in questions.values())
    renamed = presets.PRESETS[name](field="payload")
    assert all("payload" in q["instructions"] and field not in q["instructions"] for q in renamed.values())


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_preset_questions_are_valid_and_cover_all_three_types_overall(factory):
    parsed = parse_questions(factory())
    assert [q.id for q in parsed] == list(factory())


def test_presets_together_use_choice_score_and_noul():
    types = {q["type"] for f in FACTORIES for q in f().values()}
    assert types == {"choice", "score", "noul"}


def test_triage_preset_has_the_documented_question_ids():
    assert list(presets.triage_questions()) == ["intent", "sentiment", "is_urgent", "priority"]
    assert "refund" in presets.triage_questions()["intent"]["criteria"]


@pytest.mark.parametrize("bad", ["", 3, ["message"]])
def test_bad_field_is_a_value_error_naming_the_field_and_the_fix(bad):
    with pytest.raises(ValueError, match=r"field=.*non-empty string.*field='message'"):
        presets.triage_questions(field=bad)


def test_presets_are_reachable_from_the_top_level_package():
    import jevlaya_lab

    assert jevlaya_lab.presets.triage_questions() == presets.triage_questions()
