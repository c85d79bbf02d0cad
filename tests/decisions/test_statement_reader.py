"""The statement reader: unseen yes/no statements read together with the state (tiny models)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from jevlaya_lab.decisions.encoding import row_tokenizer, serialize_state, tokenize_states
from jevlaya_lab.decisions.prior import PRIOR_KEY
from jevlaya_lab.decisions.questions import parse_questions
from jevlaya_lab.decisions.statement_reader import READ_MAX_OPTIONS, ReaderConfig, StatementReader, pair_rows
from jevlaya_lab.decisions.testing import fixed_prior_parts, make_tiny_parts, pooled_text, topic_pairs, trained_share
from jevlaya_lab.decisions.training.reader import ReaderTraining, fit_blend, reader_logits, train_reader

KNOWN = "The customer asks for money back."
UNSEEN = "The writer attaches a photograph."
STATES = ["my invoice is wrong", {"message": "the app crashes at login"}, ["hi", "please refund me"]]
CHOICE = {"type": "choice", "instructions": "Which desk takes it?",
          "criteria": ["zebra crossing", "quantum flux", "tax"]}
PRIOR = {"rank": 0, "reference": 3, "anchors": 2, "gate": [0.9, 60.0], "fallback": [1.5, 0.25, 0.0]}


def _plain_reader_logit(encoder, reader, tokenizer, statement, text):
    """The reader's log-odds computed the plain way: the encoder with its top layers swapped for
    the reader's, over [CLS] statement [SEP] text [SEP] (types 0 then 1), mean-pooled, then the
    output unit."""
    first = [tokenizer.cls_token_id, *tokenizer(statement, add_special_tokens=False)["input_ids"],
             tokenizer.sep_token_id]
    second = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.sep_token_id]
    ids = torch.tensor([first + second])
    types = torch.tensor([[0] * len(first) + [1] * len(second)])
    layers = encoder.encoder.layer
    own = list(layers)
    try:
        for i, layer in enumerate(reader.layers):
            layers[len(own) - len(reader.layers) + i] = layer
        with torch.no_grad():
            hidden = encoder(input_ids=ids, token_type_ids=types).last_hidden_state
    finally:
        for i, layer in enumerate(own):
            layers[i] = layer
    return reader.out(hidden.mean(dim=1))[0, 0].item()


def _reader_parts(blend=(0.5, 2.0, -0.75), choices=0.0, fallback=True):
    reader = {"layers": 1, **({"blend": list(blend)} if blend else {}), **({"choices": choices} if choices else {})}
    prior = PRIOR if fallback else {k: v for k, v in PRIOR.items() if k != "fallback"}
    unseen = (UNSEEN, *(f"{CHOICE['instructions']} {o}" for o in CHOICE["criteria"]))
    parts = fixed_prior_parts({**prior, "reader": reader}, anchors=(KNOWN, "refund"), unseen=unseen, num_layers=2)
    with torch.no_grad():
        for p in parts.model.reader.parameters():  # the reader differs from the encoder's own top layer
            p.add_(torch.randn_like(p) * 0.5)
    return parts


def test_pair_rows_match_the_tokenizers_own_pair_encoding():
    """mini-en's own tokenizer (the tiny one has no pair template) encodes pairs as the reader does."""
    from transformers import AutoTokenizer

    from jevlaya_lab.decisions import bundled

    tokenizer = AutoTokenizer.from_pretrained(bundled.verified_encoder("mini-en").tokenizer, local_files_only=True)
    rows = row_tokenizer(tokenizer)
    texts = [("refund my order", "hi there, please refund me"), ("the app crashes", "ok")]
    ids, types, mask = pair_rows(rows, [(rows.encode([a])[0].ids, rows.encode([b])[0].ids) for a, b in texts])
    want = tokenizer([a for a, _ in texts], [b for _, b in texts], padding=True, return_tensors="pt")
    assert ids.tolist() == want["input_ids"].tolist()
    assert types[mask.bool()].tolist() == want["token_type_ids"][want["attention_mask"].bool()].tolist()
    assert mask.tolist() == want["attention_mask"].tolist()


def test_the_reader_runs_the_encoders_lower_layers_and_its_own_top_layers():
    parts = _reader_parts()
    encoder, tokenizer, reader = parts.model.encoder, parts.tokenizer, parts.model.reader
    got = reader_logits(parts.model, reader, tokenizer, [(UNSEEN, "please refund me", True)])[0].item()
    assert got == pytest.approx(_plain_reader_logit(encoder, reader, tokenizer, UNSEEN, "please refund me"), abs=1e-5)


def test_an_unseen_statement_is_the_blend_of_similarity_and_reader_and_a_known_one_is_not_read(tmp_path):
    """A statement far from every anchor (gate ~0) is answered sigmoid(g * trained + (1 - g) *
    (a * z + b * r + c)), r the reader's log-odds; a statement equal to an anchor (gate ~1) is not
    read at all and keeps the trained answer. The reader survives a save and load."""
    a, b, c = 0.5, 2.0, -0.75
    parts = _reader_parts((a, b, c))
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    path = save_checkpoint(tmp_path / "ck", *parts)
    assert json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]["reader"] == {
        "layers": 1, "blend": [a, b, c]}
    agent = Agent(path)
    assert agent.decision_model.reader is not None
    questions = {"known": {"type": "noul", "instructions": KNOWN}, "new": {"type": "noul", "instructions": UNSEEN}}
    prior = model.prior
    for state, result in zip(STATES, agent.predict_batch(STATES, questions)):
        text = serialize_state(state)
        s = pooled_text(encoder, tokenizer, text)
        for qid, statement in (("known", KNOWN), ("new", UNSEEN)):
            o = pooled_text(encoder, tokenizer, statement)
            against = prior.reference @ o
            z = ((s @ o - against.mean()) / against.std()).item()
            g = trained_share(prior, o)
            trained = 9.0 * z - 3.0
            if qid == "known":
                assert g > 0.99
                unseen = 1.5 * z + 0.25  # not read: the fallback, weighted by 1 - g ~ 0
            else:
                assert g < 0.01
                unseen = a * z + b * _plain_reader_logit(encoder, model.reader, tokenizer, statement, text) + c
            want = torch.sigmoid(torch.tensor(g * trained + (1 - g) * unseen)).item()
            assert result["answers"][qid]["noul"] == pytest.approx(want, abs=2e-4)
    inputs = agent._prior.inputs(tokenize_states(tokenizer, STATES), parse_questions(questions), 64, 2)
    assert inputs.pair_row.tolist() == [1, 3, 5]  # rows are state-major: only "new" is read


def test_joined_readers_average_their_log_odds_and_survive_a_save_and_load(tmp_path):
    """A reader joined with two others (each with its own weights) answers the mean of the three
    log-odds, each computed the plain way; its config counts the members, its tensors are
    ``reader.more.<j>.*`` after the first's, and the checkpoint it is saved in answers the same
    statements the same after loading. Readers of another size are refused by position."""
    parts = _reader_parts()
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    others = []
    for seed in (1, 2):
        other = StatementReader(encoder, model.reader.config)
        torch.manual_seed(seed)
        with torch.no_grad():
            for p in other.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        others.append(other)
    joined = model.reader.joined(others)
    assert joined.config == dataclasses.replace(model.reader.config, members=3)
    assert joined.config.to_value()["members"] == 3 and "members" not in model.reader.config.to_value()
    assert ReaderConfig.from_value(joined.config.to_value()) == joined.config
    pairs = [(UNSEEN, "please refund me", True), (UNSEEN, "the app crashes at login", False)]
    got = reader_logits(model, joined, tokenizer, pairs)
    for i, (statement, text, _) in enumerate(pairs):
        each = [_plain_reader_logit(encoder, r, tokenizer, statement, text) for r in (model.reader, *others)]
        assert len(set(round(x, 3) for x in each)) == 3  # three different readers ...
        assert got[i].item() == pytest.approx(sum(each) / 3, abs=1e-5)  # ... averaged
    assert {k.split(".")[1] for k in joined.state_dict() if k.startswith("more.")} == {"0", "1"}
    questions = {"new": {"type": "noul", "instructions": UNSEEN}}
    before = Agent(save_checkpoint(tmp_path / "one", *parts)).predict_batch(STATES, questions)
    model.reader, model.prior.config = joined, dataclasses.replace(model.prior.config, reader=joined.config)
    parts.config.extra[PRIOR_KEY] = {**parts.config.extra[PRIOR_KEY], "reader": joined.config.to_value()}
    path = save_checkpoint(tmp_path / "three", *parts)
    assert json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]["reader"]["members"] == 3
    loaded = Agent(path)
    assert loaded.decision_model.reader.config.members == 3
    assert reader_logits(loaded.decision_model, loaded.decision_model.reader, tokenizer, pairs).tolist() == \
        pytest.approx(got.tolist(), abs=1e-5)
    after = loaded.predict_batch(STATES, questions)
    assert [r["answers"]["new"]["noul"] for r in after] != [r["answers"]["new"]["noul"] for r in before]
    wider = StatementReader(encoder, dataclasses.replace(model.reader.config, layers=2))
    with pytest.raises(ValueError, match=r"readers to join \[1\] has 2 layers .* join single readers of 1 layers"):
        joined.joined([others[0], wider])


REFERENCE = ["where is my parcel", "thanks for the quick help", "my card was charged twice", "can we talk tomorrow"]


def test_a_line_reads_an_unseen_statement_against_the_reference_texts(tmp_path):
    """With ``"line": [s, t]`` and ``"reference"`` texts, an unseen statement's blended answer
    ``u = a * z + b * r + c`` is standardised against the same blend on each reference text (its
    cosine z-score and the reader's log-odds there): ``s * (u - mean) / std + t``; a known statement
    and a choice option are not; the line and the texts survive a save and load."""
    a, b, c, s, t = 0.5, 2.0, -0.75, 1.7, -0.4
    parts = _reader_parts((a, b, c))
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    path = save_checkpoint(tmp_path / "ck", *parts)
    data = json.loads((path / "rl_agent_config.json").read_text())
    data["similarity_prior"]["reader"].update(line=[s, t], reference=REFERENCE)
    (path / "rl_agent_config.json").write_text(json.dumps(data))
    agent, plain = Agent(path), Agent(save_checkpoint(tmp_path / "plain", *parts))
    assert agent.decision_model.prior.config.reader.line == (s, t)
    prior = model.prior
    o = pooled_text(encoder, tokenizer, UNSEEN)
    against = prior.reference @ o

    def blended(text):
        z = ((pooled_text(encoder, tokenizer, text) @ o - against.mean()) / against.std()).item()
        return a * z + b * _plain_reader_logit(encoder, model.reader, tokenizer, UNSEEN, text) + c

    on_reference = torch.tensor([blended(text) for text in REFERENCE])
    mean, std = on_reference.mean().item(), on_reference.std().item()
    g = trained_share(prior, o)
    assert g < 0.01
    questions = {"known": {"type": "noul", "instructions": KNOWN}, "new": {"type": "noul", "instructions": UNSEEN},
                 "desk": CHOICE}
    answers = zip(STATES, agent.predict_batch(STATES, questions), plain.predict_batch(STATES, questions))
    for state, result, before in answers:
        text = serialize_state(state)
        z = ((pooled_text(encoder, tokenizer, text) @ o - against.mean()) / against.std()).item()
        trained = 9.0 * z - 3.0
        want = torch.sigmoid(torch.tensor(g * trained + (1 - g) * (s * (blended(text) - mean) / std + t))).item()
        assert result["answers"]["new"]["noul"] == pytest.approx(want, abs=2e-4)
        assert result["answers"]["new"]["noul"] != pytest.approx(before["answers"]["new"]["noul"], abs=1e-3)
        for qid in ("known", "desk"):
            assert result["answers"][qid] == before["answers"][qid]
    again = save_checkpoint(tmp_path / "again", *load_checkpoint(path))
    assert json.loads((again / "rl_agent_config.json").read_text())["similarity_prior"]["reader"] == {
        "layers": 1, "blend": [a, b, c], "line": [s, t], "reference": REFERENCE}


def _assert_options_read(parts, text, read, base, weight):
    """``read``'s CHOICE probabilities are ``base``'s times exp(weight * r), renormalised, r the
    reader's log-odds of each option in context with ``text``."""
    model, tokenizer = parts.model, parts.tokenizer
    labels = CHOICE["criteria"]
    r = torch.tensor([_plain_reader_logit(model.encoder, model.reader, tokenizer, f"{CHOICE['instructions']} {o}",
                                          text) for o in labels])
    base_p = torch.tensor([base["answers"]["desk"]["probabilities"][o] for o in labels])
    want = torch.softmax(base_p.log() + weight * r, dim=0)
    got = torch.tensor([read["answers"]["desk"]["probabilities"][o] for o in labels])
    assert torch.allclose(got, want, atol=2e-4), (got, want)


def test_a_choice_with_unseen_options_adds_the_readers_log_odds_of_each_option_in_context(tmp_path):
    """With ``choices: w``, every option of a choice whose options are far from the training texts is
    read as ``<instructions> <option>`` with the state: its probability, against the same checkpoint
    without choice reading, is multiplied by exp(w * r / T) (r the reader's log-odds, T the choice
    temperature) and renormalised; a yes/no statement is read as before, and at w = 0 no option is
    read."""
    w = 1.7
    parts = _reader_parts(choices=w)
    model, tokenizer = parts.model, parts.tokenizer
    reading = Agent(save_checkpoint(tmp_path / "reads", *parts))
    plain_config = dataclasses.replace(model.prior.config, reader=dataclasses.replace(model.prior.config.reader,
                                                                                       choices=0.0))
    model.prior.config = plain_config
    parts.config.extra[PRIOR_KEY] = plain_config.to_value()
    plain = Agent(save_checkpoint(tmp_path / "plain", *parts))
    questions = {"desk": CHOICE, "new": {"type": "noul", "instructions": UNSEEN}}
    labels = CHOICE["criteria"]
    temperature = reading.temperatures.get("choice", len(labels))
    answers = zip(STATES, reading.predict_batch(STATES, questions), plain.predict_batch(STATES, questions))
    for state, read, base in answers:
        _assert_options_read(parts, serialize_state(state), read, base, w / temperature)
        assert read["answers"]["new"]["noul"] == pytest.approx(base["answers"]["new"]["noul"], abs=1e-6)
    parsed = parse_questions(questions)
    tokens = tokenize_states(tokenizer, STATES)
    assert reading._prior.inputs(tokens, parsed, 64, 3).pair_row.tolist() == [0, 2, 4] * 3 + [1, 3, 5]
    assert plain._prior.inputs(tokens, parsed, 64, 3).pair_row.tolist() == [1, 3, 5]
    names = [f"{o} {i}" for i in range(5) for o in CHOICE["criteria"]]
    for size, read in ((READ_MAX_OPTIONS, READ_MAX_OPTIONS * len(STATES)), (READ_MAX_OPTIONS + 1, 0)):
        many = parse_questions({"desk": {**CHOICE, "criteria": names[:size]}})
        assert len(reading._prior.inputs(tokens, many, 64, size).pair_row) == read  # too many options: not read


def test_a_reader_of_choices_only_reads_the_options_not_the_statements_and_needs_no_fallback(tmp_path):
    """Without ``blend`` the reader reads a choice's unseen options as with one, and no yes/no
    statement: an unseen statement keeps the trained answer (this prior has no fallback either)."""
    w = 1.7
    parts = _reader_parts(blend=None, choices=w, fallback=False)
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    path = save_checkpoint(tmp_path / "ck", *parts)
    written = json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]
    assert written["reader"] == {"layers": 1, "choices": w} and "fallback" not in written
    reading, plain = Agent(path), Agent(path)
    plain.decision_model.prior.config = plain.decision_model.prior.config.with_choice_weight(0.0)
    questions = {"desk": CHOICE, "new": {"type": "noul", "instructions": UNSEEN}}
    labels = CHOICE["criteria"]
    temperature = reading.temperatures.get("choice", len(labels))
    prior = model.prior
    answers = zip(STATES, reading.predict_batch(STATES, questions), plain.predict_batch(STATES, questions))
    for state, read, base in answers:
        text = serialize_state(state)
        _assert_options_read(parts, text, read, base, w / temperature)
        o, s = pooled_text(encoder, tokenizer, UNSEEN), pooled_text(encoder, tokenizer, text)
        against = prior.reference @ o
        z = ((s @ o - against.mean()) / against.std()).item()
        assert read["answers"]["new"]["noul"] == pytest.approx(torch.sigmoid(torch.tensor(9.0 * z - 3.0)).item(),
                                                               abs=2e-4)
    inputs = reading._prior.inputs(tokenize_states(tokenizer, STATES), parse_questions(questions), 64, 3)
    assert inputs.pair_row.tolist() == [0, 2, 4] * 3  # the options only, never the statement


def test_a_question_that_says_read_false_is_answered_without_the_reader(tmp_path):
    """``"read": False``: the statement gets the fallback (as the same checkpoint answers it unread)
    and the options the prior alone (as at choice weight 0); no pair is built for such a question,
    while another question of the same call is read as before. An adaptation fit on the unread
    question corrects it, and leaves the same question asked with reading as the checkpoint answers it."""
    parts = _reader_parts(choices=1.7)
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    path = save_checkpoint(tmp_path / "ck", *parts)
    agent, plain = Agent(path), Agent(path)
    plain.decision_model.prior.config = plain.decision_model.prior.config.with_choice_weight(0.0)
    new = {"type": "noul", "instructions": UNSEEN}
    read = {"desk": CHOICE, "new": new}
    unread = {"desk": {**CHOICE, "read": False}, "new": {**new, "read": False}}
    probabilities = lambda result: torch.tensor(list(result["answers"]["desk"]["probabilities"].values()))  # noqa: E731
    o = pooled_text(encoder, tokenizer, UNSEEN)
    g, against = trained_share(model.prior, o), model.prior.reference @ o
    answers = zip(STATES, agent.predict_batch(STATES, unread), plain.predict_batch(STATES, {"desk": CHOICE}),
                  agent.predict_batch(STATES, read))
    for state, off, base, on in answers:
        assert torch.allclose(probabilities(off), probabilities(base), atol=1e-6)
        assert not torch.allclose(probabilities(off), probabilities(on), atol=1e-3)  # reading moves them
        z = ((pooled_text(encoder, tokenizer, serialize_state(state)) @ o - against.mean()) / against.std()).item()
        fallback = torch.sigmoid(torch.tensor(g * (9.0 * z - 3.0) + (1 - g) * (1.5 * z + 0.25))).item()
        assert off["answers"]["new"]["noul"] == pytest.approx(fallback, abs=2e-4)
        assert abs(on["answers"]["new"]["noul"] - fallback) > 1e-3
    tokens = tokenize_states(tokenizer, STATES)
    assert not len(agent._prior.inputs(tokens, parse_questions(unread), 64, 3).pair_row)
    mixed = parse_questions({"desk": CHOICE, "new": unread["new"]})
    assert agent._prior.inputs(tokens, mixed, 64, 3).pair_row.tolist() == [0, 2, 4] * 3
    texts = [f"{topic} case {i}" for i in range(4) for topic in ("taxes owed", "zebra crossing", "flux")]
    labels = ["tax", "zebra crossing", "quantum flux"] * 4
    adapted = agent.adapt([(t, {"desk": label}) for t, label in zip(texts, labels)], {"desk": unread["desk"]})
    unread_desk, read_desk = {"desk": unread["desk"]}, {"desk": CHOICE}
    assert not all(torch.allclose(probabilities(a), probabilities(b), atol=1e-4) for a, b in
                   zip(adapted.predict_batch(texts, unread_desk), agent.predict_batch(texts, unread_desk)))
    for a, b in zip(adapted.predict_batch(texts, read_desk), agent.predict_batch(texts, read_desk)):
        assert torch.allclose(probabilities(a), probabilities(b), atol=1e-6)


@pytest.mark.parametrize("reader, fragment", [
    ({"layers": 0, "blend": [1, 1, 0]}, "layers must be an int >= 1"),
    ({"layers": 1, "blend": [1, "x", 0]}, "blend must be"),
    ({"layers": 1}, '"layers" and "blend"'),
    ({"layers": 1, "choices": 0}, '"choices" \\(options read\\)'),
    ({"layers": 1, "blend": [1, 1, 0], "choices": -1}, "choices must be a number >= 0"),
    ({"layers": 1, "blend": [1, 1, 0], "choices": True}, "choices must be a number >= 0"),
    ({"layers": 1, "blend": [1, 1, 0], "extra": 1}, '"layers" and "blend"'),
    ({"layers": 3, "blend": [1, 1, 0]}, "use at most 2"),
    ({"layers": 1, "blend": [1, 1, 0], "line": [1, 0]}, "line and reference come together"),
    ({"layers": 1, "blend": [1, 1, 0], "reference": ["a", "b"]}, "line and reference come together"),
    ({"layers": 1, "choices": 1, "line": [1, 0], "reference": ["a", "b"]}, "line standardises .* it needs a blend"),
    ({"layers": 1, "blend": [1, 1, 0], "line": [1, "x"], "reference": ["a", "b"]}, "line must be \\[scale, bias\\]"),
    ({"layers": 1, "blend": [1, 1, 0], "line": [1, 0], "reference": ["a"]}, "reference must be a list of at least 2"),
    ({"layers": 1, "blend": [1, 1, 0], "line": [1, 0], "reference": ["a", " "]}, "reference must be a list"),
    ({"layers": 1, "choices": 1, "line": [1, 0], "reference": ["a message"] * 300}, "is invalid; line standardises"),
    ({"layers": 1, "blend": [1, 1, 0], "members": 0}, "members must be an int >= 1"),
    ({"layers": 1, "blend": [1, 1, 0], "members": 2.0}, "members must be an int >= 1"),
    ({"layers": 1, "blend": [1, 1, 0], "members": True}, "members must be an int >= 1"),
])
def test_a_bad_reader_entry_names_the_key_and_the_fix(tmp_path, reader, fragment):
    path = save_checkpoint(tmp_path / "ck", *_reader_parts())
    data = json.loads((path / "rl_agent_config.json").read_text())
    data["similarity_prior"]["reader"] = reader
    (path / "rl_agent_config.json").write_text(json.dumps(data))
    with pytest.raises((CheckpointError, ValueError), match=fragment) as caught:
        load_checkpoint(path)
    assert len(str(caught.value)) < 900  # a long reference list is clipped in the message


def test_the_choice_weight_is_set_on_a_copy_and_needs_a_reader():
    """``PriorConfig.with_choice_weight`` (answers with and without reading the options in one
    process) changes only the reader's ``choices`` of a copy; a prior without a reader says so."""
    from jevlaya_lab.decisions.prior import PriorConfig

    config = PriorConfig.from_value({**PRIOR, "reader": {"layers": 1, "blend": [1, 1, 0], "choices": 0.5}})
    unread = config.with_choice_weight(0.0)
    assert unread.reader is not None and unread.reader.choices == 0.0 and config.reader.choices == 0.5
    assert unread.to_value() == {**config.to_value(), "reader": {"layers": 1, "blend": [1.0, 1.0, 0.0]}}
    with pytest.raises(ValueError, match="has no reader"):
        PriorConfig.from_value(PRIOR).with_choice_weight(1.0)


def test_a_readers_blend_needs_a_fallback_and_any_reader_needs_anchors():
    no_fallback = {k: v for k, v in PRIOR.items() if k != "fallback"}
    with pytest.raises(ValueError, match="reader.blend answers unseen statements in place of the fallback"):
        make_tiny_parts(num_layers=2, similarity_prior={**no_fallback, "reader": {"layers": 1, "blend": [1, 1, 0]}})
    for reader in ({"layers": 1, "blend": [1, 1, 0]}, {"layers": 1, "choices": 1.0}):
        with pytest.raises(ValueError, match="it needs anchors"):
            make_tiny_parts(num_layers=2, similarity_prior={**PRIOR, "anchors": 0, "reader": reader})


def test_a_reader_needs_a_bert_like_encoder():
    class NoLayers(torch.nn.Module):
        config = type("C", (), {"hidden_size": 8})()

    with pytest.raises(ValueError, match="needs a BERT-like encoder"):
        StatementReader(NoLayers(), ReaderConfig(1, (1.0, 1.0, 0.0)))


def test_training_the_reader_learns_a_statement_and_the_blend_weights_it():
    """On a tiny budget the reader learns which of two statements holds for a text (it must read
    both: each statement is true for half the texts), on pairs it never saw, and the fitted blend
    puts weight on it; the encoder below the reader is left as it was."""
    parts = make_tiny_parts(num_layers=2, similarity_prior={**PRIOR})
    model, tokenizer = parts.model, parts.tokenizer
    rng = random.Random(0)
    topics = {"the customer writes about money": ["refund", "invoice"],
              "the customer writes about the app": ["crash", "login"]}

    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    losses = []
    reader = train_reader(model, tokenizer, topic_pairs(rng, 600 * 16, topics),
                          ReaderTraining(layers=1, steps=600, batch=16, lr=1e-3, out_lr=3e-3, seed=0), log=losses.append)
    assert len(losses) == 7 and losses[-1].startswith("reader step 599 loss")
    held = topic_pairs(rng, 300, topics)
    r = reader_logits(model, reader, tokenizer, held)
    accuracy = ((r > 0) == torch.tensor([p[2] for p in held])).float().mean().item()
    assert accuracy > 0.9
    assert all(torch.equal(v, before[k]) for k, v in model.encoder.state_dict().items())
    assert all(p.requires_grad for p in model.encoder.parameters())
    a, b, c = fit_blend(model, reader, tokenizer, held, temperature=2.0)
    assert b > 0.5 and all(x == x for x in (a, b, c))


def test_the_choice_weight_follows_a_reader_that_picks_the_right_option(tmp_path):
    """``fit_choice_weight`` on an Agent that answers a choice from the cosine alone: a reader trained
    (tiny budget) to say which topic a text is about gets a clearly positive weight, and the
    answers with it pick the right option for texts it never saw."""
    from jevlaya_lab.decisions.training.reader import fit_choice_weight

    rng = random.Random(0)
    topics = {"money": ["refund", "invoice"], "app": ["crash", "login"], "parcel": ["courier", "delivery"]}
    filler = ["hi", "please", "order", "thanks"]
    instructions = "What is it about?"

    def text(topic):
        words = [*rng.sample(filler, 2), rng.choice(topics[topic])]
        rng.shuffle(words)
        return " ".join(words)

    def pair():
        topic, truth = rng.choice(list(topics)), rng.random() < 0.5
        other = rng.choice([t for t in topics if t != topic])
        return (f"{instructions} {topic}", text(topic if truth else other), truth)

    parts = _reader_parts()
    model, tokenizer = parts.model, parts.tokenizer
    training = ReaderTraining(layers=1, steps=500, batch=16, lr=1e-3, out_lr=3e-3, seed=0)
    reader = train_reader(model, tokenizer, [pair() for _ in range(500 * 16)], training, log=lambda _: None)
    golds = [rng.choice(list(topics)) for _ in range(120)]
    rows = [(text(g), list(topics).index(g)) for g in golds]
    question = {"type": "choice", "instructions": instructions, "criteria": list(topics)}
    weight = fit_choice_weight(Agent(save_checkpoint(tmp_path / "ck", *parts)), reader, [(question, rows)])
    assert weight > 1.0
    model.reader = reader
    model.prior.config = dataclasses.replace(model.prior.config,
                                             reader=dataclasses.replace(model.prior.config.reader, choices=weight))
    parts.config.extra[PRIOR_KEY] = model.prior.config.to_value()
    agent = Agent(save_checkpoint(tmp_path / "reads", *parts))
    answers = agent.predict_batch([t for t, _ in rows], {"q": question})
    picked = [list(topics).index(a["answers"]["q"]["choice"]) for a in answers]
    assert sum(p == g for p, (_, g) in zip(picked, rows)) / len(rows) > 0.9


def test_the_choice_weight_reads_the_own_head_even_where_an_open_part_would_answer(tmp_path):
    """The choice weight is fit over the own head's answers, the ones the reader's log-odds are added
    to: on a checkpoint with an open part that would answer the held-out choice (its options are
    far from the own head's training texts), the weight is the one fit on the own head alone, and
    it is a finite positive number, though the open part's answers to that choice differ. Each text's
    right option is the one the (random, seeded) reader reads highest, so a reader weight helps
    whatever its draw: with gold labels the reader does not follow, the fit weight often rounds to
    0 on both checkpoints and the comparison tells nothing."""
    from jevlaya_lab.decisions.prior_inputs import context_texts
    from jevlaya_lab.decisions.testing import tiny_open_part, with_open_part
    from jevlaya_lab.decisions.training.reader import fit_choice_weight

    texts = ["zebra stripes on the road", "flux capacitor broke", "my tax form", "crossing at the lights",
             "quantum physics homework", "tax refund late"]
    torch.manual_seed(0)  # the reader's noise (_reader_parts) drawn the same in every run
    parts = _reader_parts()
    said = torch.stack([reader_logits(parts.model, parts.model.reader, parts.tokenizer,
                                      [(o or "", t, False) for t in texts])
                        for o in context_texts(parse_questions({"q": CHOICE})[0])], dim=1)
    rows = list(zip(texts, said.argmax(dim=1).tolist()))
    alone = Agent(save_checkpoint(tmp_path / "own", *parts))
    weight_alone = fit_choice_weight(alone, alone.decision_model.reader, [(CHOICE, rows)])
    both = Agent(save_checkpoint(tmp_path / "both", *with_open_part(parts, tiny_open_part(num_layers=2))))
    own, opened = both._open.split(parse_questions({"q": CHOICE}))
    assert not own and [q.id for q in opened] == ["q"]  # predict_batch sends this choice to the open part
    routed = [a["answers"]["q"] for a in both.predict_batch(texts, {"q": CHOICE})]
    kept = [a["answers"]["q"] for a in alone.predict_batch(texts, {"q": CHOICE})]
    assert all(a.get("part") == "open" for a in routed)
    assert [a["probabilities"] for a in routed] != [a["probabilities"] for a in kept]
    weight_both = fit_choice_weight(both, both.decision_model.reader, [(CHOICE, rows)])
    assert weight_both == weight_alone
    assert 0.0 < weight_alone < float("inf"), weight_alone


def test_a_grouped_balanced_fit_weighs_every_group_alike():
    """``balanced_logistic`` with groups (a statement each): a statement with ten times the rows of
    another does not set the 0.5 line alone. Statement A's line is at x = 0, B's at x = 1; pooled,
    A's 1000 rows put the line near 0, grouped it sits between the two."""
    from jevlaya_lab.decisions.training.trainer import balanced_logistic

    g = torch.Generator().manual_seed(0)
    xa, xb = torch.rand(1000, generator=g) * 2 - 1, torch.rand(100, generator=g) * 2
    ya = (xa + 0.3 * torch.randn(1000, generator=g) > 0).float()
    yb = (xb + 0.3 * torch.randn(100, generator=g) > 1).float()
    x, y = torch.cat([xa, xb])[:, None], torch.cat([ya, yb])
    (w, ), b = balanced_logistic(x, y)
    (wg, ), bg = balanced_logistic(x, y, ["a"] * 1000 + ["b"] * 100)
    assert -b / w < 0.25 < 0.35 < -bg / wg < 0.65


def test_a_leave_one_dataset_out_split_keeps_the_same_held_out_intents():
    """``split_intents(..., datasets)`` (``bench/reader_lodo.py``) keeps only those datasets' intents,
    and holds out exactly the ones the full split holds out among them: a run without a dataset
    never trains on an intent that the shipped reader's blend was fit on, nor the other way round."""
    from jevlaya_lab.decisions.training.intents import split_intents

    trained, held = split_intents(0.15, 0)
    some = ("clinc150", "hwu64")
    trained_some, held_some = split_intents(0.15, 0, some)
    assert {v.dataset for v in (trained_some | held_some).values()} == set(some)
    assert held_some == {k: v for k, v in held.items() if v.dataset in some} and held_some
    assert trained_some == {k: v for k, v in trained.items() if v.dataset in some}


def test_readers_trained_from_other_seeds_hold_out_the_same_intents():
    """A joined reader's blend is fit on the held-out intents: every member must have left them out,
    whatever seed it was trained from; another ``hold_out_seed`` holds out others."""
    from jevlaya_lab.decisions.training.reader import reader_split

    first = reader_split(ReaderTraining(seed=0))
    assert reader_split(ReaderTraining(seed=1)) == reader_split(ReaderTraining(seed=7)) == first
    assert not set(first[0]) & set(first[1]) and len(first[1]) == 44
    assert set(reader_split(ReaderTraining(hold_out_seed=1))[1]) != set(first[1])


def test_emotion_pairs_read_the_folder_and_leave_out_the_benchmarks_properties(tmp_path):
    """Made-up comments in GoEmotions' layout: every pair's statement is a kept emotion's, a true
    pair's comment carries it, and a folder without the files is refused by name; with
    ``rewordings`` the statement is any of the emotion's five wordings."""
    from jevlaya_lab.decisions.training.reader import EMOTION_REWORDINGS, EMOTION_STATEMENTS, emotion_pairs

    labels = list(EMOTION_STATEMENTS)
    (tmp_path / "labels.txt").write_text("\n".join(labels) + "\n", encoding="utf-8")
    lines = [f"comment {i} about things\t{i % len(labels)},{(i * 7) % len(labels)}\tid{i}" for i in range(200)]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    carried = {f"comment {i} about things": {labels[i % len(labels)], labels[(i * 7) % len(labels)]} for i in range(200)}
    by_statement = {s: e for e, s in EMOTION_STATEMENTS.items() if s}
    pairs = emotion_pairs(tmp_path, 300, random.Random(0))
    assert len(pairs) == 300 and {s for s, _, _ in pairs} <= set(by_statement)
    assert all((by_statement[s] in carried[t]) == truth for s, t, truth in pairs)
    assert not {"gratitude", "curiosity", "remorse", "anger", "annoyance"} & {by_statement[s] for s, _, _ in pairs}
    reworded = emotion_pairs(tmp_path, 2000, random.Random(0), rewordings=True)
    by_wording = {w: e for e, ws in EMOTION_REWORDINGS.items() for w in ws} | by_statement
    assert all((by_wording[s] in carried[t]) == truth for s, t, truth in reworded)
    kept = {e for e, s in EMOTION_STATEMENTS.items() if s}
    assert set(EMOTION_REWORDINGS) == kept and all(len(set(ws)) == 4 for ws in EMOTION_REWORDINGS.values())
    assert {s for s, _, _ in reworded} == set(by_wording)  # every wording is drawn, the statement's too
    (tmp_path / "labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match="has no labels.txt"):
        emotion_pairs(tmp_path, 1, random.Random(0))


@pytest.mark.public_datasets
def test_the_reader_only_command_writes_a_head_with_the_reader(tmp_path, capsys):
    """``jevlaya-lab train --reader-only`` on a tiny budget: the written head holds the shipped head's
    tensors unchanged plus ``reader.*`` in fp16, and its config the reader (here with
    ``--reader-choices-only``: a choice weight and no blend; half its pairs asked negated). ``--reader-refit`` keeps the shipped
    reader's tensors and refits only its blend and choice weight; on mini-multi, whose shipped reader
    reads choices only, no blend. (Three runs of the command on the real checkpoints, each on the
    smallest rows that still fit a positive choice weight: 75 s on a 2-core machine.)"""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.prior import PriorConfig
    from jevlaya_lab.decisions.training import cli as train_cli

    out = tmp_path / "head"
    assert train_cli.main(["--name", "mini-en", "--reader-only", "--reader-choices-only", "--reader-layers", "1",
                           "--reader-steps", "2", "--reader-blend-rows", "64", "--reader-negated", "0.5",
                           "--out", str(out)]) == 0
    assert "reader: 64 pairs (247 intents, 50% negated)" in capsys.readouterr().out
    for refused in (["--reader-only", "--reader-rewordings"], ["--reader-refit", "--reader-rewordings", "--emotions", "x"]):
        assert train_cli.main(["--name", "mini-en", *refused, "--out", str(tmp_path / "no")]) == 1
        assert "--reader-rewordings words the emotions' statements" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
    shipped = {k: v for k, v in load_file(bundled.head_dir("mini-en") / "head.safetensors").items()
               if not k.startswith("reader.")}
    written = load_file(out / "head.safetensors")
    assert all(torch.equal(written[k], v) for k, v in shipped.items())
    reader = {k: v for k, v in written.items() if k.startswith("reader.")}
    assert reader and {v.dtype for v in reader.values()} == {torch.float16}
    assert {k.split(".")[2] for k in reader if k.startswith("reader.layers.")} == {"0"}
    config = json.loads((out / "config.json").read_text())["similarity_prior"]
    assert set(config["reader"]) == {"layers", "choices"} and config["reader"]["layers"] == 1
    assert ReaderConfig.from_value(config["reader"]).choices == config["reader"]["choices"] > 0
    assert PriorConfig.from_value(config).reader.blend is None
    refit = tmp_path / "refit"
    argv = ["--name", "mini-en", "--reader-refit", "--reader-blend-rows", "128", "--out", str(refit)]
    assert train_cli.main(argv) == 0
    shipped_all = load_file(bundled.head_dir("mini-en") / "head.safetensors")
    rewritten = load_file(refit / "head.safetensors")
    assert rewritten.keys() == shipped_all.keys() and all(torch.equal(rewritten[k], v) for k, v in shipped_all.items())
    config = json.loads((refit / "config.json").read_text())["similarity_prior"]["reader"]
    assert config["layers"] == 3 and config["choices"] > 0 and len(config["blend"]) == 3
    out = tmp_path / "mini-multi-choices"  # mini-multi's shipped reader reads choices only
    assert train_cli.main(["--name", "mini-multi", "--reader-refit", "--reader-blend-rows", "64",
                           "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["similarity_prior"]
    assert set(config["reader"]) == {"layers", "choices"} and config["reader"]["choices"] > 0
    assert PriorConfig.from_value(config).reader.blend is None  # no fallback: valid all the same


@pytest.mark.public_datasets
def test_the_reader_join_command_joins_a_reader_trained_from_another_seed_and_refits(tmp_path, capsys):
    """``--reader-join DIR`` keeps the shipped reader's tensors, adds those of the reader in DIR
    (trained over the same head with another ``--seed``) as ``reader.more.0.*``, counts the members
    and refits the blend and choice weight; a folder without a reader, one over another head, and
    ``--reader-only`` beside it are refused by name, and nothing is written."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.training import cli as train_cli

    other = tmp_path / "seed1"
    assert train_cli.main(["--name", "mini-en", "--reader-only", "--reader-layers", "3", "--reader-steps", "2",
                           "--reader-blend-rows", "64", "--seed", "1", "--out", str(other)]) == 0
    capsys.readouterr()
    for folders, extra, said in ((str(other), ["--reader-only"], "drop --reader-only"),
                                 (str(tmp_path / "none"), [], "holds no head with a reader"),
                                 (str(bundled.head_dir("mini-multi")), [], "differs from")):
        assert train_cli.main(["--name", "mini-en", "--reader-join", folders, *extra,
                               "--out", str(tmp_path / "no")]) == 1
        assert said in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
    joined = tmp_path / "joined"
    assert train_cli.main(["--name", "mini-en", "--reader-join", str(other), "--reader-blend-rows", "128",
                           "--out", str(joined)]) == 0
    shipped = load_file(bundled.head_dir("mini-en") / "head.safetensors")
    trained = {k: v for k, v in load_file(other / "head.safetensors").items() if k.startswith("reader.")}
    written = load_file(joined / "head.safetensors")
    assert all(torch.equal(written[k], v) for k, v in shipped.items())  # the first reader and the rest as shipped
    more = {"reader." + k[len("reader.more.0."):]: v for k, v in written.items() if k.startswith("reader.more.0.")}
    assert more.keys() == trained.keys() and all(torch.equal(more[k], v) for k, v in trained.items())
    assert written.keys() == shipped.keys() | {k for k in written if k.startswith("reader.more.0.")}
    config = json.loads((joined / "config.json").read_text())["similarity_prior"]["reader"]
    assert config["members"] == 2 and config["layers"] == 3 and len(config["blend"]) == 3 and config["choices"] > 0
    assert ReaderConfig.from_value(config).members == 2


def test_mini_en_reads_a_users_statement_about_what_a_message_contains():
    """The shipped mini-en carries a reader: a user's statement the cosine ranks near chance (a
    thank-you: bench/user_questions.py's dev 'thankful', cosine AUC 0.53) is answered yes for the
    thank-you messages and no for the others; the presets' statements are not read."""
    from jevlaya_lab import load

    agent = load("mini-en", device="cpu")
    assert agent.decision_model.reader is not None
    thanks = ["Thanks a lot, the new card arrived this morning and works fine.",
              "Just wanted to say thank you to Maria for sorting out my order so quickly!"]
    others = ["My card was declined twice at the supermarket today.",
              "Where is my parcel? It was due on Monday."]
    question = {"thanks": {"type": "noul", "instructions": "The customer says thank you."}}
    said = [r["answers"]["thanks"]["noul"] for r in agent.predict_batch(thanks + others, question)]
    assert min(said[:2]) > 0.5 > max(said[2:]), said
    from jevlaya_lab.decisions import presets

    preset = presets.PRESETS["triage"]()
    parsed = parse_questions({k: v for k, v in preset.items() if v["type"] == "noul"})
    inputs = agent._prior.inputs(tokenize_states(agent.tokenizer, others), parsed, 64, 2)
    assert len(parsed) and not len(inputs.pair_row)


def test_mini_en_reads_a_users_own_options_and_not_the_presets():
    """The shipped mini-en reads the options of a user's own choice with the message (``reader.choices``)
    and picks the desk each message belongs to; a preset's choice, whose options it was trained on,
    is not read."""
    from jevlaya_lab import load
    from jevlaya_lab.decisions import presets

    agent = load("mini-en", device="cpu")
    assert agent.decision_model.prior.config.reader.choices > 0
    question = {"desk": {"type": "choice", "instructions": "Which desk should take this?",
                         "criteria": ["payments", "deliveries", "passwords and sign-in"]}}
    messages = {"I was charged twice for the same invoice, please sort out the money.": "payments",
                "The courier never brought my parcel and tracking has not moved in a week.": "deliveries",
                "I forgot my password and the reset email never arrives, so I cannot log in.": "passwords and sign-in"}
    answers = agent.predict_batch(list(messages), question)
    assert [a["answers"]["desk"]["choice"] for a in answers] == list(messages.values())
    tokens = tokenize_states(agent.tokenizer, list(messages))
    assert len(agent._prior.inputs(tokens, parse_questions(question), 64, 3).pair_row) == 3 * 3
    preset = presets.PRESETS["triage"]()
    parsed = parse_questions({k: v for k, v in preset.items() if v["type"] == "choice"})
    assert len(parsed) and not len(agent._prior.inputs(tokens, parsed, 64, 10).pair_row)


def test_mini_multi_reads_a_users_own_options_in_several_languages_and_no_statement():
    """The shipped mini-multi's reader reads choice options only: a user's own choice over messages in
    English, Spanish, French and German is read (one pair per option and message) and each
    message's right option gains probability over the same checkpoint with the options unread; a
    user's yes/no statement and a preset's choice are not read."""
    from jevlaya_lab import load
    from jevlaya_lab.decisions import presets

    agent = load("mini-multi", device="cpu")
    model = agent.decision_model
    config = model.prior.config
    assert config.reader is not None and config.reader.blend is None and config.reader.choices > 0
    question = {"desk": {"type": "choice", "instructions": "Which desk should take this?",
                         "criteria": ["payments", "deliveries", "passwords and sign-in"]}}
    messages = {"I was charged twice for the same invoice, please sort out the money.": "payments",
                "The courier never brought my parcel and tracking has not moved in a week.": "deliveries",
                "Me cobraron dos veces la misma factura, devuélvanme el dinero.": "payments",
                "Le livreur n'a jamais apporté mon colis.": "deliveries",
                "Ich habe mein Passwort vergessen und kann mich nicht anmelden.": "passwords and sign-in"}
    read = agent.predict_batch(list(messages), question)
    model.prior.config = config.with_choice_weight(0.0)
    try:
        unread = agent.predict_batch(list(messages), question)
    finally:
        model.prior.config = config
    assert [a["answers"]["desk"]["choice"] for a in read] == list(messages.values())
    for gold, with_reader, without in zip(messages.values(), read, unread):
        assert with_reader["answers"]["desk"]["probabilities"][gold] > without["answers"]["desk"]["probabilities"][gold]
    tokens = tokenize_states(agent.tokenizer, list(messages))
    assert len(agent._prior.inputs(tokens, parse_questions(question), 64, 3).pair_row) == 3 * len(messages)
    statement = parse_questions({"thanks": {"type": "noul", "instructions": "The customer says thank you."}})
    assert not len(agent._prior.inputs(tokens, statement, 64, 2).pair_row)
    preset = presets.PRESETS["triage"]()
    parsed = parse_questions({k: v for k, v in preset.items() if v["type"] == "choice"})
    assert len(parsed) and not len(agent._prior.inputs(tokens, parsed, 64, 10).pair_row)


def test_the_reader_tuning_bench_reads_the_agents_own_pairs_and_its_split_forward_is_the_readers(tmp_path):
    """``bench/adapt_reader_tuning.py`` trains a copy of the reader on the frozen lower layers' output,
    computed once: its pairs must be the ones the Agent reads (none for a statement near the
    training texts), the reader's split forward (``lower`` then ``read_from``) its plain one, and its
    tuning must fit the labels."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import adapt_reader_tuning as bench

    parts = _reader_parts()
    agent = Agent(save_checkpoint(tmp_path / "ck", *parts))
    model, tokenizer = agent.decision_model, parts.tokenizer
    texts = ["please refund me", "the app crashes at login", "hi", "my invoice is wrong"]
    (known,) = parse_questions({"known": {"type": "noul", "instructions": KNOWN}})
    assert bench.read_pairs(agent, known, texts) is None
    (new,) = parse_questions({"new": {"type": "noul", "instructions": UNSEEN}})
    ids, types, mask = bench.read_pairs(agent, new, texts)
    with torch.no_grad():
        hidden = model.reader.lower(model.encoder, ids, types, mask)
        split = model.reader.read_from(hidden, mask)
    plain = [_plain_reader_logit(model.encoder, model.reader, tokenizer, UNSEEN, t) for t in texts]
    assert split.tolist() == pytest.approx(plain, abs=1e-5)
    yes = torch.tensor([1.0, 0.0, 0.0, 1.0])
    tuned = bench.tune(model.reader, hidden, mask, yes, lr=3e-3, steps=30, seed=0)
    with torch.no_grad():
        after = tuned.read_from(hidden, mask)
    assert ((after > 0).float() == yes).all(), after
    assert torch.equal(split, model.reader.read_from(hidden, mask).detach())  # the copy was tuned
    biases = bench.tune(model.reader, hidden, mask, yes, lr=3e-2, steps=30, seed=0, part="bias")
    moved = {name for (name, p), q in zip(biases.named_parameters(), model.reader.parameters()) if not torch.equal(p, q)}
    assert moved and all(n.startswith("out.") or n.endswith("bias") or "LayerNorm" in n for n in moved), moved
    assert any(n.endswith("dense.bias") for n in moved), moved
