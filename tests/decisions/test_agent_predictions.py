"""Agent answers: fields, calibration, min_confidence, chunking, devices, round trip, threads."""

from __future__ import annotations

import math
import threading
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevlaya_lab.decisions.agent import Agent, load, select_device
from jevlaya_lab.decisions.encoding import encode_requests
from jevlaya_lab.decisions.testing import make_tiny_parts


def close(a, b, tol=2e-3):
    """Results equal up to float noise of padding/batching (4-decimal rounding may flip)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol
    return a == b


def manual_probs(parts, state, question, *, temperature=1.0, max_len=128, head_max_len=64):
    """Slot-order probabilities computed straight from the model, for comparison."""
    batch = encode_requests(parts.tokenizer, [state], {"q": question}, max_len=max_len,
                            head_max_len=head_max_len)
    with torch.inference_mode():
        out = parts.model(batch)
    k = int(batch.option_mask[0].sum())
    return torch.softmax(out.option_logits[0, :k] / temperature, dim=-1).tolist(), \
        torch.softmax(out.act_logits[0], dim=-1)[0].item()


def test_answer_fields_per_type_and_usage(tiny_agent, questions):
    result = tiny_agent.predict("I want a refund", questions)
    assert result["model"] == "tiny"
    intent, urgency, spam = (result["answers"][k] for k in ("intent", "urgency", "spam"))
    assert intent["type"] == "choice" and intent["choice"] in {"refund", "bug", "other"}
    assert list(intent["probabilities"]) == ["refund", "bug", "other"]
    assert intent["choice"] == max(intent["probabilities"], key=intent["probabilities"].get)
    assert math.isclose(sum(intent["probabilities"].values()), 1.0, abs_tol=2e-4)
    assert urgency["legend"] == {"0": "not urgent", "1": "somewhat urgent", "2": "very urgent"}
    expected = sum(int(i) * p for i, p in urgency["probabilities"].items())
    assert math.isclose(urgency["score"], expected, abs_tol=5e-4)
    assert 0 <= spam["noul"] <= 1 and math.isclose(spam["confidence"], max(spam["noul"], 1 - spam["noul"]),
                                                    abs_tol=1e-4)
    for answer in (intent, urgency, spam):
        assert 0 <= answer["confidence"] <= 1 and 0 <= answer["answer_confidence"] <= 1
        assert 0 <= answer["action"]["act_probability"] <= 1
        assert "abstention" not in answer  # min_confidence absent: payload unchanged
    usage = result["usage"]
    assert usage["output_tokens"] == 0 and usage["input_tokens"] > 0
    assert set(usage) == {"input_tokens", "output_tokens", "state_tokens", "state_tokens_dropped",
                          "truncated", "truncated_questions"}


def test_floats_are_rounded_to_four_decimals(tiny_agent, questions):
    answers = tiny_agent.predict("hello", questions)["answers"]
    values = [answers["spam"]["noul"], answers["intent"]["confidence"], answers["urgency"]["score"],
              *answers["intent"]["probabilities"].values()]
    assert all(round(v, 4) == v for v in values)


def test_confidence_is_one_minus_normalised_entropy_and_one_for_a_single_option(tiny_agent):
    q = {"c": {"type": "choice", "instructions": "x", "criteria": ["a", "b", "c"]},
         "one": {"type": "choice", "instructions": "x", "criteria": ["only"]}}
    answers = tiny_agent.predict("hello", q)["answers"]
    probs = list(answers["c"]["probabilities"].values())
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    assert math.isclose(answers["c"]["confidence"], 1 - entropy / math.log(3), abs_tol=5e-4)
    assert answers["one"]["confidence"] == 1.0 and answers["one"]["probabilities"] == {"only": 1.0}


def test_probabilities_are_reported_in_caller_order_whatever_the_option_order():
    parts = make_tiny_parts(seed=4)
    agent = Agent(parts)
    question = {"type": "choice", "instructions": "pick", "criteria": ["a", "b", "c"],
                "option_order": [2, 0, 1]}
    slot_probs, act = manual_probs(parts, "hello", question)
    answer = agent.predict("hello", {"q": question})["answers"]["q"]
    assert list(answer["probabilities"]) == ["a", "b", "c"]
    # slot 0 holds option 2 ("c"), slot 1 option 0 ("a"), slot 2 option 1 ("b")
    assert answer["probabilities"] == {"a": round(slot_probs[1], 4), "b": round(slot_probs[2], 4),
                                       "c": round(slot_probs[0], 4)}
    assert answer["action"]["act_probability"] == round(act, 4)


def test_temperature_by_options_bucket_wins_over_type_temperature_and_is_clamped():
    parts = make_tiny_parts(seed=5, temperature=(2.0, 1.0, 1.0),
                            temperature_by_options={"choice:3-5": 100.0, "score:3-5": 0.01})
    with pytest.warns(RuntimeWarning, match="choice:3-5=100.0 -> 5; score:3-5=0.01 -> 0.5"):
        agent = Agent(parts)
    three = {"type": "choice", "instructions": "x", "criteria": ["a", "b", "c"]}
    two = {"type": "choice", "instructions": "x", "criteria": ["a", "b"]}
    score = {"type": "score", "instructions": "x", "criteria": ["l0", "l1", "l2"]}
    for question, temperature in ((three, 5.0), (two, 2.0), (score, 0.5)):
        slot_probs, _ = manual_probs(parts, "hi", question, temperature=temperature)
        got = agent.predict("hi", {"q": question})["answers"]["q"]["probabilities"]
        assert list(got.values()) == [round(p, 4) for p in slot_probs]


def test_temperature_edge_values_follow_laya_in_one_warning():
    """Laya 0.4.15's rules: NaN/inf/bool/non-numbers -> 1.0, numeric strings count, <= 0 -> 0.5."""
    parts = make_tiny_parts(seed=5, temperature=(float("nan"), "2.5", -2.0),
                            temperature_by_options={"choice:2": True, "score:3-5": float("inf"),
                                                    "noul:2": 0, "choice:3-5": 9, "bogus": 1.0})
    with pytest.warns(RuntimeWarning) as caught:
        agent = Agent(parts)
    assert len(caught) == 1
    message = str(caught[0].message)
    for listed in ("temperature[0] (choice)=nan -> 1", "temperature[2] (noul)=-2.0 -> 0.5",
                   "choice:2=True -> 1", "score:3-5=inf -> 1", "noul:2=0 -> 0.5",
                   "choice:3-5=9 -> 5", "'bogus' is not a bucket"):
        assert listed in message, listed
    assert "2.5" not in message  # a numeric string inside the range is not a replacement
    assert agent.temperatures.by_type == {"choice": 1.0, "score": 2.5, "noul": 0.5}
    assert agent.temperatures.by_bucket == {"choice:2": 1.0, "score:3-5": 1.0, "noul:2": 0.5,
                                            "choice:3-5": 5.0}


def test_min_confidence_threshold_marks_passed_and_abstained(tiny_agent, questions):
    gated = tiny_agent.predict("hello", questions, min_confidence=1.0)["answers"]
    assert all(a["abstention"] == "abstained" and a["low_confidence"] is True for a in gated.values())
    passed = tiny_agent.predict("hello", questions, min_confidence=0.0)["answers"]
    assert all(a["abstention"] == "passed" and "low_confidence" not in a for a in passed.values())


def test_min_confidence_map_is_keyed_by_bucket_with_default(tiny_agent, questions):
    answers = tiny_agent.predict("hello", questions,
                                 min_confidence={"noul:2": 1.0, "default": 0.0})["answers"]
    assert answers["spam"]["abstention"] == "abstained"
    assert answers["intent"]["abstention"] == answers["urgency"]["abstention"] == "passed"
    only = tiny_agent.predict("hello", questions, min_confidence={"choice:3-5": 1.0})["answers"]
    assert only["intent"]["abstention"] == "abstained" and only["spam"]["abstention"] == "passed"


def test_min_confidence_gates_answer_confidence_and_records_the_threshold(tiny_agent, questions):
    """As laya 0.4.15: the gate reads max p, not 1 - normalised entropy."""
    plain = tiny_agent.predict("hello", questions)["answers"]["intent"]
    assert plain["confidence"] < plain["answer_confidence"]
    between = (plain["confidence"] + plain["answer_confidence"]) / 2
    gated = tiny_agent.predict("hello", questions, min_confidence=between)["answers"]
    assert gated["intent"]["abstention"] == "passed" and "low_confidence" not in gated["intent"]
    assert {a["abstention_threshold"] for a in gated.values()} == {between}
    mapped = tiny_agent.predict("hello", questions, min_confidence={"noul:2": 0.9})["answers"]
    assert mapped["spam"]["abstention_threshold"] == 0.9
    assert mapped["intent"]["abstention_threshold"] == 0.0  # no bucket, no default: gate nothing


def test_a_result_without_confidences_is_unevaluated(tiny_agent):
    question = {"n": {"type": "noul", "instructions": "x"}}
    bare = {"model": "m", "answers": {"n": {"type": "noul", "noul": 0.7}}, "usage": {}}
    served = tiny_agent.predict("hello", question, min_confidence=0.5,
                                on_predict_start=lambda ctx: ctx.skip(bare))
    assert served["answers"]["n"]["abstention"] == "unevaluated"
    assert served["answers"]["n"]["abstention_threshold"] == 0.5 and "low_confidence" not in served["answers"]["n"]


@pytest.mark.parametrize("bad", [1.5, -0.1, "high", "0.5", True, float("nan"), {"choice:7": 0.5},
                                 {"choice": 0.5}, {"default": 2}])
def test_bad_min_confidence_is_a_value_error_naming_it(tiny_agent, questions, bad):
    with pytest.raises(ValueError, match="min_confidence"):
        tiny_agent.predict("hello", questions, min_confidence=bad)


def test_min_confidence_is_applied_before_end_hooks_and_also_to_skipped_results(tiny_agent, questions):
    seen = []
    fresh = tiny_agent.predict("hello", questions, min_confidence=1.0,
                               on_predict_end=lambda ctx: seen.append(ctx.results[0]["answers"]["spam"].copy()))
    assert seen[0]["abstention"] == "abstained"
    stale = {**fresh, "answers": {k: {**v} for k, v in fresh["answers"].items()}}
    served = tiny_agent.predict("hello", questions, min_confidence=0.0,
                                on_predict_start=lambda ctx: ctx.skip(stale))
    assert all(a["abstention"] == "passed" and "low_confidence" not in a
               for a in served["answers"].values())


def test_batch_size_chunks_forward_passes_without_changing_results(tiny_checkpoint_dir, questions, states):
    agent = Agent(tiny_checkpoint_dir)
    rows: list[int] = []  # rows per forward pass (a chunk may take one pass per length group)
    agent.decision_model.register_forward_hook(lambda module, args, out: rows.append(len(args[0].input_ids)))
    whole = agent.predict_batch(states * 2, questions)
    total = len(states) * 2 * len(questions)
    assert sum(rows) == total
    rows.clear()
    chunked = agent.predict_batch(states * 2, questions, batch_size=4)
    assert sum(rows) == total and max(rows) <= 4 * len(questions) and len(rows) >= 2
    assert close(whole, chunked)


def test_sort_by_length_keeps_results_in_input_order(tiny_agent, questions):
    states = ["word " * 30, "hi", "word " * 10, "a b"]
    plain = tiny_agent.predict_batch(states, questions, batch_size=2)
    sorted_ = tiny_agent.predict_batch(states, questions, batch_size=2, sort_by_length=True)
    singles = [tiny_agent.predict(s, questions) for s in states]
    assert close(plain, sorted_) and close(sorted_, singles)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8"])
def test_bad_batch_size_is_a_value_error(tiny_agent, questions, bad):
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        tiny_agent.predict_batch(["a"], questions, batch_size=bad)


def test_states_may_be_str_dict_or_conversation_list(tiny_agent, questions, states):
    results = tiny_agent.predict_batch(states, questions)
    assert [set(r["answers"]) for r in results] == [set(questions)] * 3
    with pytest.raises(TypeError, match=r"state 0 is None; pass a str, a dict or a list"):
        tiny_agent.predict(None, questions)


def test_questions_none_or_not_a_dict_is_a_type_error(tiny_agent):
    with pytest.raises(TypeError, match="questions is None"):
        tiny_agent.predict("x", None)
    with pytest.raises(TypeError, match="questions must be a dict"):
        tiny_agent.predict("x", ["spam"])


def test_save_load_predict_round_trip_gives_identical_answers(tmp_path, questions, states):
    from jevlaya_lab.decisions.checkpoint import save_checkpoint

    parts = make_tiny_parts(seed=11)
    in_memory = Agent(parts, model_id="m").predict_batch(states, questions)
    path = save_checkpoint(tmp_path / "ckpt", *parts)
    reloaded = load(path, model_id="m").predict_batch(states, questions)
    assert reloaded == in_memory


def test_model_id_defaults_to_the_source_and_appears_in_results(tiny_checkpoint_dir, questions):
    agent = Agent(str(tiny_checkpoint_dir))
    assert agent.model_id == str(tiny_checkpoint_dir)
    assert agent.predict("x", questions)["model"] == str(tiny_checkpoint_dir)
    with pytest.raises(TypeError, match="model_id"):
        Agent(tiny_checkpoint_dir, model_id=3)


def test_agent_rejects_a_bare_model_without_tokenizer_and_config():
    parts = make_tiny_parts()
    with pytest.raises(TypeError, match="lacks its tokenizer and config"):
        Agent(parts.model)


def test_device_auto_is_cpu_here_and_unavailable_devices_fall_back_with_a_warning(tiny_checkpoint_dir):
    mps = torch.backends.mps.is_available()
    expected = "cuda" if torch.cuda.is_available() else ("mps" if mps else "cpu")
    assert select_device(None).type == expected
    if not torch.cuda.is_available():
        with pytest.warns(RuntimeWarning, match="falling back to CPU"):
            agent = Agent(tiny_checkpoint_dir, device="cuda")
        assert agent.device.type == "cpu"
        assert next(agent.decision_model.parameters()).device.type == "cpu"
    with pytest.raises(ValueError, match="device='warp-drive' is not a torch device"):
        select_device("warp-drive")


def test_forward_runs_under_inference_mode(tiny_agent, questions):
    seen = []
    handle = tiny_agent.decision_model.register_forward_hook(
        lambda *a: seen.append(torch.is_inference_mode_enabled()))
    try:
        tiny_agent.predict("x", questions)
    finally:
        handle.remove()
    assert seen and all(seen)  # one pass per length group of rows


def test_sixteen_threads_on_one_agent_match_sequential_calls(tiny_agent, questions):
    states = [f"message number {i} about a refund" if i % 2 else {"turn": i, "text": "login error"}
              for i in range(16)]
    sequential = [tiny_agent.predict(s, questions) for s in states]
    results: list = [None] * 16
    errors: list = []
    barrier = threading.Barrier(16)

    def work(i):
        try:
            barrier.wait(timeout=30)
            results[i] = tiny_agent.predict(states[i], questions)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert results == sequential


# -- property tests: malformed input raises only the documented exceptions -------------------

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=10))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)), max_leaves=8)
any_value = st.one_of(json_value, st.just(object()), st.sets(st.integers(), max_size=2),
                      st.binary(max_size=4))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(qid=st.text(min_size=1, max_size=5).filter(str.strip),
       definition=st.fixed_dictionaries(
           {"type": st.sampled_from(["choice", "score", "noul", "bogus"])},
           optional={"instructions": any_value, "criteria": any_value, "option_order": any_value,
                     "labels": any_value}))
def test_property_agent_raises_only_documented_errors_naming_the_question(tiny_agent, qid, definition):
    try:
        result = tiny_agent.predict("a state", {qid: definition}, max_len=128, head_max_len=64)
    except ValueError as exc:
        assert str(exc).startswith(f"question {qid!r}: ")
    else:
        assert set(result["answers"]) == {qid}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=any_value)
def test_property_states_are_answered_or_raise_type_error_naming_the_index(tiny_agent, state):
    q = {"spam": {"type": "noul", "instructions": "spam"}}
    try:
        result = tiny_agent.predict_batch(["ok", state], q)
    except TypeError as exc:
        assert str(exc).startswith("state 1 ")
    else:
        assert len(result) == 2 and isinstance(state, (str, dict, list))


def test_quantize_int8_is_opt_in_and_moves_answers_only_a_little(tiny_checkpoint_dir, questions, states):
    """A fast mode off by default; its deviation is small and measured."""
    exact = Agent(tiny_checkpoint_dir)
    fast = Agent(tiny_checkpoint_dir, quantize="int8")
    assert exact.quantize is None and fast.quantize == "int8"
    assert not isinstance(fast.decision_model.encoder.encoder.layer[0].attention.self.query, torch.nn.Linear)
    for ours, theirs in zip(fast.predict_batch(states, questions), exact.predict_batch(states, questions)):
        for qid, answer in ours["answers"].items():
            reference = theirs["answers"][qid]
            assert abs(answer["answer_confidence"] - reference["answer_confidence"]) < 0.05
    with pytest.raises(ValueError, match="quantize='int4': use 'bf16'"):
        Agent(tiny_checkpoint_dir, quantize="int4")


def test_quantize_bf16_autocasts_the_forward_pass_where_the_cpu_has_bf16(tiny_checkpoint_dir, questions, states):
    """The bf16 fast mode: float32 weights, bfloat16 matrix products; refused without native bf16."""
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        with pytest.raises(ValueError, match="no native bfloat16"):
            Agent(tiny_checkpoint_dir, quantize="bf16")
        return
    exact = Agent(tiny_checkpoint_dir)
    fast = Agent(tiny_checkpoint_dir, quantize="bf16")
    assert fast.quantize == "bf16" and all(p.dtype == torch.float32 for p in fast.decision_model.parameters())
    dtypes = []
    fast.decision_model.scorer.register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
    results = fast.predict_batch(states, questions)
    assert dtypes and set(dtypes) == {torch.bfloat16}
    for ours, theirs in zip(results, exact.predict_batch(states, questions)):
        for qid, answer in ours["answers"].items():
            assert abs(answer["answer_confidence"] - theirs["answers"][qid]["answer_confidence"]) < 0.05
    prior = make_tiny_parts(similarity_prior={"rank": 3, "joint_head": True})  # pools vectors outside the pass
    exact_prior = Agent(make_tiny_parts(similarity_prior={"rank": 3, "joint_head": True}))
    for ours, theirs in zip(Agent(prior, quantize="bf16").predict_batch(states, questions),
                            exact_prior.predict_batch(states, questions)):
        for qid, answer in ours["answers"].items():
            assert abs(answer["answer_confidence"] - theirs["answers"][qid]["answer_confidence"]) < 0.05
