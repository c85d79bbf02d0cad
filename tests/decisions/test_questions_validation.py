"""Question validation and rendering."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jevlaya_lab.decisions.questions import Question, QuestionError, parse_questions


def parse_one(definition: dict, qid: str = "q") -> Question:
    return parse_questions({qid: definition})[0]


def test_choice_dict_criteria_render_label_and_description():
    q = parse_one({"type": "choice", "instructions": "Pick", "criteria": {"a": "first", "b": ""}})
    assert q.labels == ("a", "b")
    assert q.option_texts == ("a: first", "b")
    assert q.option_order == (0, 1)
    assert q.text == "choice question: Pick"


def test_choice_list_criteria_and_scalar_labels_render_as_json():
    q = parse_one({"type": "choice", "instructions": "Pick", "criteria": [1, False, "x", 2.5]})
    assert q.labels == (1, False, "x", 2.5)
    assert q.option_texts == ("1", "False", "x", "2.5")  # labels: str(), as laya renders them
    q = parse_one({"type": "choice", "instructions": "Pick", "criteria": {"a": True, "b": [1, "é"]}})
    assert q.option_texts == ("a: true", 'b: [1, "é"]')  # descriptions: one-line JSON


def test_non_string_instructions_and_criteria_render_as_one_line_json_not_repr():
    q = parse_one({"type": "choice", "instructions": {"ask": "qué", "n": [1, 2]},
                   "criteria": {"x": {"desc": "ñ"}}})
    assert q.instructions == '{"ask": "qué", "n": [1, 2]}'
    assert q.option_texts == ('x: {"desc": "ñ"}',)


def test_score_renders_levels_and_keeps_legend():
    q = parse_one({"type": "score", "instructions": "How bad?", "criteria": ["fine", "bad"]})
    assert q.labels == ("0", "1")
    assert q.option_texts == ("level 0: fine", "level 1: bad")
    assert q.legend == ("fine", "bad")


def test_noul_defaults_to_false_then_true_options():
    q = parse_one({"type": "noul", "instructions": "It rains"})
    assert q.labels == ("false", "true")
    assert q.option_texts == ("false: no, the statement does not hold", "true: yes, the statement holds")


def test_noul_criteria_keys_are_case_insensitive_and_labels_name_both_words():
    q = parse_one({"type": "noul", "instructions": "It rains",
                   "criteria": {"TRUE": "wet", "False": "dry"}, "labels": {"false": "no", "true": " sí "}})
    assert q.option_texts == ("no: dry", "sí: wet")


def test_noul_criteria_may_name_one_side_and_only_empty_means_default():
    """As laya 0.4.15: missing/None/"" -> the default text; anything else is used as written."""
    q = parse_one({"type": "noul", "instructions": "x", "criteria": {"true": "  "}})
    assert q.option_texts == ("false: no, the statement does not hold", "true:   ")
    q = parse_one({"type": "noul", "instructions": "x", "criteria": {"false": "", "true": None}})
    assert q.option_texts == ("false: no, the statement does not hold", "true: yes, the statement holds")


def test_integer_question_ids_are_accepted_and_key_the_answer():
    assert [q.id for q in parse_questions({1: {"type": "noul", "instructions": "x"},
                                           "b": {"type": "noul", "instructions": "y"}})] == [1, "b"]


def test_read_is_kept_per_question_and_defaults_to_true():
    """``read`` (this project's key) is a choice's or a yes/no's own; without it a question may be read."""
    got = parse_questions({"a": {"type": "noul", "instructions": "x"},
                           "b": {"type": "noul", "instructions": "x", "read": False},
                           "c": {"type": "choice", "instructions": "x", "criteria": ["p"], "read": True}})
    assert [q.read for q in got] == [True, False, True]
    assert got[0] != got[1]  # so caches keyed on questions keep read and unread answers apart


def test_option_order_is_kept_as_slot_order():
    q = parse_one({"type": "choice", "instructions": "Pick", "criteria": ["a", "b", "c"],
                   "option_order": [2, 0, 1]})
    assert q.option_order == (2, 0, 1)


def test_questions_must_be_a_dict_type_error():
    with pytest.raises(TypeError, match="questions must be a dict"):
        parse_questions([("q", {"type": "noul", "instructions": "x"})])


@pytest.mark.parametrize(
    ("definition", "fragment"),
    [
        ({"type": "choice", "criteria": ["a"]}, "missing 'instructions'"),
        ({"type": "choice", "instructions": "  ", "criteria": ["a"]}, "is empty"),
        ({"type": "choice", "instructions": "x"}, "missing 'criteria'"),
        ({"type": "choice", "instructions": "x", "criteria": []}, "criteria is empty"),
        ({"type": "choice", "instructions": "x", "criteria": "a,b"}, "criteria must be a dict"),
        ({"type": "choice", "instructions": "x", "criteria": [1, 1.0]}, "duplicate label 1.0"),
        ({"type": "choice", "instructions": "x", "criteria": [1, True]}, "duplicate label True"),
        ({"type": "choice", "instructions": "x", "criteria": [["a"]]}, "not a hashable scalar"),
        ({"type": "choice", "instructions": "x", "criteria": [""]}, "label '' is empty"),
        ({"type": "choice", "instructions": "x", "criteria": [float("nan")]}, "nan"),
        ({"type": "choice", "instructions": "x", "criteria": ["a", "b"], "option_order": [0, 0]},
         "not a permutation"),
        ({"type": "choice", "instructions": "x", "criteria": ["a"], "option_order": [True]},
         "option indices"),
        ({"type": "score", "instructions": "x", "criteria": {"0": "low"}}, "list of level"),
        ({"type": "noul", "instructions": "x", "criteria": ["y"]}, "must be a dict"),
        ({"type": "noul", "instructions": "x", "criteria": {"yes": "y", "no": "n"}}, "key 'yes'"),
        ({"type": "noul", "instructions": "x", "labels": {"true": "y"}}, "exactly 'false' and 'true'"),
        ({"type": "noul", "instructions": "x", "labels": {"false": "a", "true": " a"}}, "distinct"),
        ({"type": "noul", "instructions": "x", "labels": {"false": " ", "true": "y"}}, "non-blank"),
        ({"type": "choice", "instructions": "x", "criteria": [None, "a"]}, "label None"),
        ({"type": "score", "instructions": "x", "criteria": ["a", None]}, "score level 1 is None"),
        ({"type": "noul", "instructions": "x", "option_order": [1, 0]}, "unknown key"),
        ({"type": "choice", "instructions": "x", "critera": ["a"]}, "unknown key(s) ['critera']"),
        ({"type": "multi", "instructions": "x"}, "type 'multi' is not one of"),
        ({"instructions": "x"}, "type None"),
        ({"type": "choice", "instructions": object(), "criteria": ["a"]}, "cannot be rendered"),
        ({"type": "choice", "instructions": "x", "criteria": ["a"], "read": "no"}, "read must be True or False"),
        ({"type": "noul", "instructions": "x", "read": 0}, "write 'read': False"),
        ({"type": "score", "instructions": "x", "criteria": ["a"], "read": False}, "never reads score levels"),
    ],
)
def test_bad_question_raises_value_error_naming_the_question_id(definition, fragment):
    with pytest.raises(QuestionError) as info:
        parse_questions({"ok": {"type": "noul", "instructions": "fine"}, "bad_q": definition})
    message = str(info.value)
    assert message.startswith("question 'bad_q': ")
    assert fragment in message
    assert isinstance(info.value, ValueError)


def test_definition_that_is_not_a_dict_names_the_id():
    with pytest.raises(ValueError, match=r"^question 'x': definition must be a dict"):
        parse_questions({"x": ["choice"]})


@pytest.mark.parametrize("qid", [2.5, True, "", None])
def test_question_ids_must_be_non_empty_strings_or_ints(qid):
    with pytest.raises(ValueError, match=r"question ids must be non-empty strings or ints"):
        parse_questions({qid: {"type": "noul", "instructions": "x"}})


# -- property tests: malformed input raises only the documented exceptions ------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=4), inner,
                                                                       max_size=3)), max_leaves=6)
definitions = st.one_of(
    values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["choice", "score", "noul", "other"])},
        optional={"instructions": values, "criteria": values, "option_order": values,
                  "labels": values, "extra": values},
    ),
)


@settings(max_examples=300, deadline=None)
@given(qid=st.text(min_size=1, max_size=6).filter(str.strip), definition=definitions)
def test_property_malformed_questions_raise_only_question_error_naming_the_id(qid, definition):
    try:
        parsed = parse_questions({qid: definition})
    except QuestionError as exc:
        assert str(exc).startswith(f"question {qid!r}: ")
    else:
        (q,) = parsed
        assert q.id == qid and len(q.labels) == len(q.option_texts) >= 1
        assert sorted(q.option_order) == list(range(len(q.labels)))


@settings(max_examples=100, deadline=None)
@given(st.one_of(scalars, st.lists(scalars, max_size=3)))
def test_property_non_dict_questions_raise_type_error(value):
    with pytest.raises(TypeError, match="questions must be a dict"):
        parse_questions(value)
