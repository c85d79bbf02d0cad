"""The similarity prior (decisions/prior.py): declared in the config, exact, and absent by default."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from jevlaya_lab.decisions.testing import fixed_prior_parts, make_tiny_parts, pooled_text, trained_share

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Who handles this?",
             "criteria": {"billing_team": "money and invoices", "technical": "bugs and crashes", "sales": ""},
             "option_order": [2, 0, 1]},
    "level": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
    "refund": {"type": "noul", "instructions": "The customer asks for money back."},
}
STATES = ["my invoice is wrong", {"message": "the app crashes at login"}, ["hi", "please refund me"]]


def _prior_parts(**kwargs):
    parts = make_tiny_parts(similarity_prior={"rank": 0}, **kwargs)
    model = parts.model
    with torch.no_grad():  # the Laya scorer adds nothing: answers are the prior alone
        model.scorer[-1].weight.zero_()
        model.scorer[-1].bias.zero_()
        model.prior.scale.copy_(torch.tensor([7.0, 5.0, 9.0]))
        model.prior.bias.copy_(torch.tensor([0.0, 0.0, -3.0]))
    return parts


def test_prior_answers_equal_an_independent_cosine_computation(tmp_path):
    """With a zero scorer, each probability is softmax(scale * cos) of plain mean-pooled vectors,
    whatever the slot order; a noul's true side gets scale * cos(state, statement) + bias."""
    parts = _prior_parts()
    agent = Agent(parts)
    results = agent.predict_batch(STATES, QUESTIONS)
    encoder, tokenizer = parts.model.encoder, parts.tokenizer
    from jevlaya_lab.decisions.encoding import serialize_state

    for state, result in zip(STATES, results):
        s = pooled_text(encoder, tokenizer, serialize_state(state))
        team_texts = ["billing team: money and invoices", "technical: bugs and crashes", "sales"]
        cos = torch.stack([s @ pooled_text(encoder, tokenizer, t) for t in team_texts])
        want = torch.softmax(7.0 * cos, dim=0)
        got = result["answers"]["team"]["probabilities"]
        assert [got[k] for k in ("billing_team", "technical", "sales")] == pytest.approx(want.tolist(), abs=2e-4)
        levels = ["low", "medium", "high"]
        cos = torch.stack([s @ pooled_text(encoder, tokenizer, t) for t in levels])
        got = result["answers"]["level"]["probabilities"]
        assert [got[str(i)] for i in range(3)] == pytest.approx(torch.softmax(5.0 * cos, 0).tolist(), abs=2e-4)
        statement = pooled_text(encoder, tokenizer, QUESTIONS["refund"]["instructions"])
        p_true = torch.sigmoid(9.0 * (s @ statement) - 3.0).item()
        assert result["answers"]["refund"]["noul"] == pytest.approx(p_true, abs=2e-4)


def test_prior_round_trips_through_a_checkpoint_directory(tmp_path):
    model, tokenizer, config = make_tiny_parts(similarity_prior={"rank": 3, "prefix": "query: "})
    with torch.no_grad():
        model.prior.state_proj.normal_()
    path = save_checkpoint(tmp_path / "ck", model, tokenizer, config)
    saved = json.loads((path / "rl_agent_config.json").read_text())
    assert saved["similarity_prior"] == {"pooling": "mean", "prefix": "query: ", "rank": 3, "anchors": 0,
                                         "gate": [0.85, 40.0], "joint_head": True}
    before = Agent((model, tokenizer, config)).predict_batch(STATES, QUESTIONS)
    after = Agent(path).predict_batch(STATES, QUESTIONS)
    assert [r["answers"] for r in before] == [r["answers"] for r in after]


def test_a_laya_checkpoint_without_the_key_has_no_prior_and_no_extra_tensors(tmp_path):
    model, tokenizer, config = make_tiny_parts()
    assert model.prior is None
    assert not any(k.startswith("prior.") for k in model.state_dict())
    path = save_checkpoint(tmp_path / "ck", model, tokenizer, config)
    assert "similarity_prior" not in json.loads((path / "rl_agent_config.json").read_text())
    assert load_checkpoint(path).model.prior is None


@pytest.mark.parametrize("value, fragment", [
    ("mean", "use an object"),
    ({"pooling": "max"}, 'pooling must be "mean"'),
    ({"rank": -1}, "rank must be an int >= 0"),
    ({"rnak": 4}, "unknown keys ['rnak']"),
    ({"prefix": 3}, "prefix must be a string"),
    ({"reference": -1}, "reference must be an int >= 0"),
    ({"reference": True}, "reference must be an int >= 0"),
])
def test_a_bad_prior_entry_names_the_key_and_the_fix(tmp_path, value, fragment):
    model, tokenizer, config = make_tiny_parts(similarity_prior={"rank": 0})
    path = save_checkpoint(tmp_path / "ck", model, tokenizer, config)
    data = json.loads((path / "rl_agent_config.json").read_text())
    data["similarity_prior"] = value
    (path / "rl_agent_config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="similarity_prior") as info:
        load_checkpoint(path)
    assert fragment in str(info.value)


def test_without_the_joint_head_the_answers_are_the_prior_alone():
    """``joint_head: false`` skips the row pass; with a zero scorer the probabilities are the same."""
    joint = _prior_parts()
    alone = make_tiny_parts(similarity_prior={"rank": 0, "joint_head": False})
    alone.model.load_state_dict(joint.model.state_dict())
    got = Agent(alone).predict_batch(STATES, QUESTIONS)
    want = Agent(joint).predict_batch(STATES, QUESTIONS)
    for g, w in zip(got, want):
        for qid in QUESTIONS:
            key = "noul" if QUESTIONS[qid]["type"] == "noul" else "probabilities"
            assert g["answers"][qid][key] == pytest.approx(w["answers"][qid][key], abs=2e-4)


def test_the_learned_correction_applies_only_near_the_training_texts():
    """An option text equal to an anchor gets the full correction; one far from every anchor none."""
    parts = make_tiny_parts(similarity_prior={"rank": 2, "anchors": 1, "gate": [0.9, 60.0]})
    prior = parts.model.prior
    anchor = torch.nn.functional.normalize(torch.randn(32), dim=0)
    with torch.no_grad():
        prior.anchors[0] = anchor
        prior.state_proj.normal_()
    far = torch.nn.functional.normalize(torch.randn(32) - 3 * anchor * (torch.randn(32) @ anchor), dim=0)
    far = torch.nn.functional.normalize(far - (far @ anchor) * anchor, dim=0)  # orthogonal: cos 0
    options = torch.stack([anchor, far])[None]
    state = torch.nn.functional.normalize(torch.randn(1, 32), dim=-1)
    gate = prior.gate(options)[0]
    assert gate[0] > 0.99 and gate[1] < 1e-6
    with torch.no_grad():
        logits = prior(state, options, torch.tensor([0]), torch.zeros(1, 2, dtype=torch.bool))[0]
        plain = prior.scale[0] * (options[0] @ state[0])
        correction = (state @ prior.state_proj.T) @ (options[0] @ prior.option_proj.T).T
    assert logits[1] == pytest.approx(plain[1].item(), abs=1e-5)
    assert logits[0] == pytest.approx((plain[0] + gate[0] * correction[0, 0]).item(), abs=1e-5)


def test_a_statement_is_read_against_the_reference_states(tmp_path):
    """With reference states, a noul's true side gets scale * z + bias, where z standardises
    cos(state, statement) by the mean and std of cos(reference, statement); choices and scores
    keep the plain cosine. The references survive a save and load."""
    parts = make_tiny_parts(similarity_prior={"rank": 0, "reference": 3})
    plain = _prior_parts()
    model = parts.model
    model.load_state_dict({**plain.model.state_dict(), "prior.reference": model.prior.reference}, strict=True)
    encoder, tokenizer = model.encoder, parts.tokenizer
    references = ["where is my parcel", "thanks for the quick help", "the invoice total looks wrong"]
    with torch.no_grad():
        model.prior.reference.copy_(torch.stack([pooled_text(encoder, tokenizer, t) for t in references]))
    path = save_checkpoint(tmp_path / "ck", *parts)
    assert json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]["reference"] == 3
    from jevlaya_lab.decisions.encoding import serialize_state

    statement = pooled_text(encoder, tokenizer, QUESTIONS["refund"]["instructions"])
    against = model.prior.reference @ statement
    got = Agent(path).predict_batch(STATES, QUESTIONS)
    without = Agent(plain).predict_batch(STATES, QUESTIONS)
    for state, result, base in zip(STATES, got, without):
        s = pooled_text(encoder, tokenizer, serialize_state(state))
        z = (s @ statement - against.mean()) / against.std()
        assert result["answers"]["refund"]["noul"] == pytest.approx(torch.sigmoid(9.0 * z - 3.0).item(), abs=2e-4)
        assert result["answers"]["refund"]["noul"] != pytest.approx(base["answers"]["refund"]["noul"], abs=1e-3)
        for qid in ("team", "level"):
            assert result["answers"][qid]["probabilities"] == pytest.approx(
                base["answers"][qid]["probabilities"], abs=2e-4)


KNOWN = "The customer asks for money back."


def _fallback_parts(gate, fallback):
    """A prior with 3 reference states, 2 anchors (KNOWN and "refund"), ``gate`` and ``fallback``,
    scales and biases as :func:`_prior_parts` sets them."""
    return fixed_prior_parts({"rank": 0, "reference": 3, "anchors": 2, "gate": gate, "fallback": fallback},
                             anchors=(KNOWN, "refund"), unseen=())


def test_an_unseen_statement_gets_the_fallback_and_a_known_one_keeps_the_trained_answer(tmp_path):
    """With a ``fallback`` [scale, bias, hubness], a statement far from every anchor (gate ~0) is
    answered sigmoid(scale * (z - hubness * h(s)) + bias), h(s) the state's mean cosine to its
    nearest anchors; a statement equal to an anchor (gate ~1) keeps scale * z + bias. It survives a
    save and load, and a bad entry names the key."""
    parts = _fallback_parts([0.9, 60.0], [1.5, 0.25, 2.0])
    model, tokenizer = parts.model, parts.tokenizer
    encoder = model.encoder
    known, unseen = KNOWN, "The writer attaches a photograph."
    path = save_checkpoint(tmp_path / "ck", *parts)
    assert json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]["fallback"] == [1.5, 0.25, 2.0]
    from jevlaya_lab.decisions.encoding import serialize_state

    questions = {"known": {"type": "noul", "instructions": known}, "new": {"type": "noul", "instructions": unseen}}
    prior = model.prior
    for state, result in zip(STATES, Agent(path).predict_batch(STATES, questions)):
        s = pooled_text(encoder, tokenizer, serialize_state(state))
        hub = (prior.anchors @ s).topk(2).values.mean()
        for qid, text in (("known", known), ("new", unseen)):
            o = pooled_text(encoder, tokenizer, text)
            against = prior.reference @ o
            z = (s @ o - against.mean()) / against.std()
            g = trained_share(prior, o)
            trained, fallback = 9.0 * z - 3.0, 1.5 * (z - 2.0 * hub) + 0.25
            want = torch.sigmoid(g * trained + (1 - g) * fallback).item()
            assert result["answers"][qid]["noul"] == pytest.approx(want, abs=2e-4)
            if qid == "known":
                assert g > 0.99 and result["answers"][qid]["noul"] == pytest.approx(torch.sigmoid(trained).item(), abs=2e-3)
    data = json.loads((path / "rl_agent_config.json").read_text())
    data["similarity_prior"]["fallback"] = [1.0, "x", 2.0]
    (path / "rl_agent_config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="fallback must be"):
        load_checkpoint(path)


def test_a_training_statement_keeps_its_trained_answer_alone_under_a_soft_gate(tmp_path):
    """With a soft gate a text equal to an anchor has a gate below 1 (0.73 at [0.9, 10]); the
    fallback share is read from the gate of a training text itself, so such a statement (a preset's
    own) is answered sigmoid(scale * z + bias) exactly, with none of the fallback."""
    parts = _fallback_parts([0.9, 10.0], [1.5, 0.25, 0.0])
    model, tokenizer = parts.model, parts.tokenizer
    encoder, known = model.encoder, KNOWN
    o = pooled_text(encoder, tokenizer, known)
    assert model.prior.gate(o[None])[0].item() == pytest.approx(torch.sigmoid(torch.tensor(1.0)).item(), abs=1e-3)
    from jevlaya_lab.decisions.encoding import serialize_state

    answers = Agent(save_checkpoint(tmp_path / "ck", *parts)).predict_batch(
        STATES, {"known": {"type": "noul", "instructions": known}})
    for state, result in zip(STATES, answers):
        against = model.prior.reference @ o
        z = (pooled_text(encoder, tokenizer, serialize_state(state)) @ o - against.mean()) / against.std()
        assert result["answers"]["known"]["noul"] == pytest.approx(torch.sigmoid(9.0 * z - 3.0).item(), abs=2e-4)


def test_an_option_far_from_the_training_texts_is_read_with_its_question(tmp_path):
    """With ``option_context``, a choice option far from every anchor is pooled as
    "<instructions> <option text>", one equal to an anchor keeps its own text, and the vector
    is g * v(text) + (1 - g) * v(instructions text); scores and yes/no statements are unchanged.
    It survives a save and load, and a bad entry names the key."""
    parts = make_tiny_parts(similarity_prior={"rank": 0, "anchors": 1, "gate": [0.9, 60.0], "option_context": True})
    model, tokenizer = parts.model, parts.tokenizer
    plain = _prior_parts()
    model.load_state_dict({**plain.model.state_dict(), "prior.anchors": model.prior.anchors}, strict=True)
    encoder = model.encoder
    with torch.no_grad():
        model.prior.anchors.copy_(pooled_text(encoder, tokenizer, "technical: bugs and crashes")[None])
    path = save_checkpoint(tmp_path / "ck", *parts)
    assert json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]["option_context"] is True
    from jevlaya_lab.decisions.encoding import serialize_state

    prior = model.prior
    for state, result in zip(STATES, Agent(path).predict_batch(STATES, QUESTIONS)):
        s = pooled_text(encoder, tokenizer, serialize_state(state))
        vectors, gates = [], []
        for text in ["billing team: money and invoices", "technical: bugs and crashes", "sales"]:
            own = pooled_text(encoder, tokenizer, text)
            gates.append(float(prior.gate(own[None])[0]))
            vectors.append(gates[-1] * own + (1 - gates[-1]) * pooled_text(encoder, tokenizer, f"Who handles this? {text}"))
        assert gates[1] > 0.99 and min(gates) < 0.5  # the anchor's own text keeps it; another is read in context
        want = torch.softmax(7.0 * torch.stack([s @ v for v in vectors]), dim=0)
        got = result["answers"]["team"]["probabilities"]
        assert [got[k] for k in ("billing_team", "technical", "sales")] == pytest.approx(want.tolist(), abs=2e-4)
        levels = torch.stack([s @ pooled_text(encoder, tokenizer, t) for t in ["low", "medium", "high"]])
        got = result["answers"]["level"]["probabilities"]
        assert [got[str(i)] for i in range(3)] == pytest.approx(torch.softmax(5.0 * levels, 0).tolist(), abs=2e-4)
    data = json.loads((path / "rl_agent_config.json").read_text())
    data["similarity_prior"]["option_context"] = "yes"
    (path / "rl_agent_config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="option_context must be true or false"):
        load_checkpoint(path)
