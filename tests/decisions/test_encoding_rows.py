"""Token rows, budgets and truncation."""

from __future__ import annotations

import pytest
import torch

from jevlaya_lab.decisions.encoding import (
    BudgetError,
    encode_questions,
    encode_requests,
    row_tokenizer,
    tokenize_states,
)
from jevlaya_lab.decisions.testing import make_tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


def tokens(tok, batch, row):
    ids = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
    return tok.convert_ids_to_tokens(ids)


def test_row_layout_cls_question_sep_masked_options_sep_state_sep(tok):
    q = {"q": {"type": "choice", "instructions": "help", "criteria": {"a": "yes", "b": ""}}}
    batch = encode_requests(tok, ["hello"], q, max_len=64, head_max_len=32)
    assert tokens(tok, batch, 0) == ["[CLS]", "choice", "question", ":", "help", "[SEP]",
                                     "[MASK]", "a", ":", "yes", "[MASK]", "b", "[SEP]",
                                     "hello", "[SEP]"]
    assert batch.option_positions[0].tolist() == [6, 10]
    assert batch.option_mask[0].tolist() == [True, True]
    assert batch.type_ids.tolist() == [0]


def test_rows_of_a_state_are_adjacent_in_question_order_and_padded(tok, questions):
    batch = encode_requests(tok, ["a", "a much longer state with more words"], questions,
                            max_len=128, head_max_len=64)
    assert batch.input_ids.shape[0] == 6
    assert batch.type_ids.tolist() == [0, 1, 2, 0, 1, 2]
    assert batch.option_mask.sum(dim=1).tolist() == [3, 3, 2, 3, 3, 2]
    pad = row_tokenizer(tok).pad_id
    assert (batch.input_ids[batch.attention_mask == 0] == pad).all()


def test_noul_options_are_false_then_true_with_default_texts(tok):
    batch = encode_requests(tok, ["x"], {"n": {"type": "noul", "instructions": "it holds"}},
                            max_len=64, head_max_len=40)
    row = tokens(tok, batch, 0)
    first, second = (i for i, t in enumerate(row) if t == "[MASK]")
    assert row[first + 1] == "false" and row[second + 1] == "true"


def test_option_order_decides_the_slot_order(tok):
    q = {"q": {"type": "choice", "instructions": "pick", "criteria": ["a", "b", "c"],
               "option_order": [2, 0, 1]}}
    row = tokens(tok, encode_requests(tok, [""], q, max_len=64, head_max_len=32), 0)
    after_markers = [row[i + 1] for i, t in enumerate(row) if t == "[MASK]"]
    assert after_markers == ["c", "a", "b"]


def test_literal_mask_token_text_in_user_strings_is_replaced_by_a_space(tok):
    """As laya: the mask text cannot forge a marker; other special text stays."""
    q = {"q": {"type": "choice", "instructions": "is [MASK] here", "criteria": ["a[MASK]b"]}}
    batch = encode_requests(tok, ["say [MASK] now [SEP]"], q, max_len=64, head_max_len=32)
    row = tokens(tok, batch, 0)
    assert row.count("[MASK]") == 1  # only the option marker
    assert row.count("[SEP]") == 4  # the three structural ones and the user's, left as written
    assert batch.option_positions[0].tolist() == [row.index("[MASK]")]


def test_each_state_is_tokenised_once_per_call(tok, questions, monkeypatch):
    adapter = row_tokenizer(tok)
    calls: list[list[str]] = []
    original = adapter.encode

    def counting(texts):
        calls.append(list(texts))
        return original(texts)

    monkeypatch.setattr(adapter, "encode", counting)
    encode_requests(tok, ["state one", "state two"], questions, max_len=64, head_max_len=48)
    state_texts = [t for call in calls for t in call if t.startswith("state")]
    assert sorted(state_texts) == ["state one", "state two"]


def test_string_state_truncation_keeps_the_start_and_reports_usage(tok):
    q = {"n": {"type": "noul", "instructions": "x"}}
    state = " ".join(["hello"] * 100)
    batch = encode_requests(tok, [state], q, max_len=40, head_max_len=30)
    usage = batch.usage[0]
    assert batch.attention_mask[0].sum().item() == 40
    assert usage["state_tokens"] == 100
    kept = tokens(tok, batch, 0)
    assert kept[-1] == "[SEP]" and kept[-2] == "hello"
    assert usage["truncated"] is True and usage["truncated_questions"] == ["n"]
    assert usage["input_tokens"] == 40 and usage["output_tokens"] == 0
    assert usage["state_tokens_dropped"] == 100 - kept.count("hello")


def test_dict_state_is_one_line_json_keeping_non_ascii_and_the_start(tok):
    (state,) = tokenize_states(tok, [{"k": "v", "n": [1, 2]}])
    text = tok.decode(list(state.ids))
    assert text.replace(" ", "") == '{"k":"v","n":[1,2]}'


def test_list_state_truncation_keeps_the_last_tokens_of_its_json(tok):
    """A conversation keeps the last ``room`` tokens of its serialised JSON (mid-turn)."""
    turns = [{"role": "user", "content": f"turn{i} " + "word " * 5} for i in range(6)]
    (state,) = tokenize_states(tok, [turns])
    assert state.slice(9) == state.ids[-9:]
    kept = tok.convert_ids_to_tokens(list(state.slice(9)))
    assert kept[-1] == "]" and "[" not in kept  # starts mid-turn


def test_list_state_with_one_huge_turn_keeps_its_newest_tokens(tok):
    (state,) = tokenize_states(tok, [[{"content": "old"}, {"content": "x " * 50 + "last"}]])
    kept = tok.convert_ids_to_tokens(list(state.slice(5)))
    assert len(kept) == 5 and kept[-1] == "]" and "last" in kept


def test_option_text_is_capped_at_48_tokens_then_the_marker_is_prefixed(tok):
    long = " ".join(["word"] * 80)
    (head,) = encode_questions(tok, {"q": {"type": "choice", "instructions": "x",
                                           "criteria": {"a": long}}}, head_max_len=200)
    closing = len(head.ids) - 1
    assert closing - head.marker_positions[0] == 49
    assert head.collapsed is None


def test_squeezed_options_and_instruction_when_options_leave_under_16_tokens(tok):
    criteria = {f"o{i}": "word " * 10 for i in range(6)}
    (head,) = encode_questions(tok, {"q": {"type": "choice", "instructions": "word " * 40,
                                           "criteria": criteria}}, head_max_len=64)
    per = max(4, (64 - 16) // 6)
    widths = [b - a for a, b in zip(head.marker_positions, [*head.marker_positions[1:], len(head.ids) - 1])]
    assert widths == [per] * 6
    instruction_tokens = head.marker_positions[0] - 2  # between [CLS] and [SEP]
    assert instruction_tokens == max(8, 64 - per * 6)  # [CLS] and the [SEP]s are not counted
    assert head.collapsed == {"total": 6, "distinct": 6, "tokens_per_option": per} or head.collapsed is None


def test_options_left_identical_by_the_squeeze_are_reported_in_usage(tok):
    criteria = [f"topic number {i}" for i in range(20)]
    batch = encode_requests(tok, ["s"], {"t": {"type": "choice", "instructions": "x",
                                               "criteria": criteria}}, max_len=128, head_max_len=48)
    assert batch.usage[0]["options"] == {"t": {"total": 20, "distinct": 1, "tokens_per_option": 4}}


def test_question_whose_markers_cannot_fit_max_len_raises_budget_error(tok):
    criteria = [f"o{i}" for i in range(30)]
    with pytest.raises(BudgetError, match=r"^max_len=50 is too small for question 'wide': only \d+ of "
                                          r"its 30 option markers fall inside it.*raise max_len"):
        encode_requests(tok, ["s"], {"wide": {"type": "choice", "instructions": "x",
                                              "criteria": criteria}}, max_len=50, head_max_len=40)


def test_a_row_whose_markers_fit_but_not_its_end_is_cut_at_max_len(tok):
    q = {"q": {"type": "choice", "instructions": "x", "criteria": ["a", "word " * 30]}}
    batch = encode_requests(tok, ["hello"], q, max_len=20, head_max_len=64)
    assert batch.attention_mask[0].sum().item() == 20
    assert batch.usage[0]["truncated_questions"] == ["q"] and batch.usage[0]["state_tokens_dropped"] == 1


@pytest.mark.parametrize("bad", [0, -3, 2.5, "64", True, None])
def test_budgets_must_be_positive_ints(tok, bad):
    with pytest.raises(BudgetError, match="max_len must be a positive int"):
        encode_requests(tok, ["s"], {"n": {"type": "noul", "instructions": "x"}}, max_len=bad,
                        head_max_len=16)


@pytest.mark.parametrize("state", [None, 3, b"bytes", ("a",)])
def test_bad_states_raise_type_error_naming_the_index(tok, state):
    with pytest.raises(TypeError, match=r"state 1 "):
        tokenize_states(tok, ["fine", state])


def test_collated_tensors_are_long_and_bool(tok, questions):
    batch = encode_requests(tok, ["a"], questions, max_len=64, head_max_len=48)
    assert batch.input_ids.dtype == torch.long and batch.option_mask.dtype == torch.bool
    assert batch.to("cpu").input_ids.equal(batch.input_ids)


# -- property: every row respects its budget and keeps its markers ----------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

words = st.lists(st.sampled_from(["help", "word", "refund", "the", "a", "[MASK]", "ü", "x1"]),
                 max_size=30).map(" ".join)
option_lists = st.lists(words.filter(str.strip), min_size=1, max_size=12, unique=True)


@settings(max_examples=80, deadline=None)
@given(state=words, options=option_lists, instructions=words.filter(str.strip),
       max_len=st.integers(8, 160), head_max_len=st.integers(1, 120))
def test_property_rows_fit_max_len_and_markers_point_at_mask_tokens(state, options, instructions,
                                                                   max_len, head_max_len):
    tok = make_tiny_tokenizer()
    questions = {"q": {"type": "choice", "instructions": instructions, "criteria": options}}
    try:
        batch = encode_requests(tok, [state], questions, max_len=max_len, head_max_len=head_max_len)
    except BudgetError as exc:
        assert str(exc).startswith(f"max_len={max_len} is too small for question 'q': ")
        return
    adapter = row_tokenizer(tok)
    length = int(batch.attention_mask[0].sum())
    ids = batch.input_ids[0, :length].tolist()
    assert length <= max_len and ids[0] == adapter.cls_id
    positions = batch.option_positions[0].tolist()
    assert len(positions) == len(options) == int(batch.option_mask[0].sum())
    assert [ids[p] for p in positions] == [adapter.mask_id] * len(options)
    assert ids.count(adapter.mask_id) == len(options)
    (head,) = encode_questions(tok, questions, head_max_len=head_max_len)
    assert ids[: min(length, len(head.ids))] == list(head.ids)[:length]
    if length > len(head.ids):
        assert ids[-1] == adapter.sep_id
    kept = max(0, length - len(head.ids) - 1)
    usage = batch.usage[0]
    assert usage["state_tokens_dropped"] == usage["state_tokens"] - kept
    assert usage["truncated"] == (kept < usage["state_tokens"])
