"""Open questions (decisions.open_questions): a checkpoint's own head answers the questions it was
trained on, its open part every other one, in one call, through save, load and few-shot adaptation."""

from __future__ import annotations

import json

import pytest
import torch

from jevlaya_lab.decisions import bundled
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import load_checkpoint, save_checkpoint
from jevlaya_lab.decisions.errors import CheckpointError
from jevlaya_lab.decisions.open_questions import OPEN_KEY, OPEN_PREFIX
from jevlaya_lab.decisions.questions import parse_questions
from jevlaya_lab.decisions.testing import (
    OPEN_ANCHORS,
    fixed_prior_parts,
    make_tiny_parts,
    tiny_open_part,
    tiny_open_parts,
)

KNOWN = OPEN_ANCHORS[0]
UNSEEN = "The writer attaches a photograph."
PRIOR = {"rank": 0, "reference": 3, "anchors": 2, "fallback": [1.5, 0.25, 0.0]}
STATES = ["my invoice is wrong and i want my money back please", "thanks, all good now",
          "the package is late again", "hello"]
QUESTIONS = {
    "known": {"type": "noul", "instructions": KNOWN},
    "new": {"type": "noul", "instructions": UNSEEN},
    "route": {"type": "choice", "instructions": "Where does it go?", "criteria": [KNOWN, "refund"]},
    "mood": {"type": "choice", "instructions": "How does the writer feel?", "criteria": ["happy", "angry", "calm"]},
}
OWN, OPEN = ("known", "route"), ("new", "mood")


def _own():
    """The checkpoint's own head alone: its anchors are KNOWN and "refund", so UNSEEN and the moods are far."""
    return fixed_prior_parts(PRIOR, anchors=OPEN_ANCHORS, unseen=(UNSEEN, "happy", "angry", "calm"))


def _with_open(tmp_path):
    return save_checkpoint(tmp_path / "both", *tiny_open_parts())


def _answers(agent, questions, states=STATES):
    return agent.predict_batch(states, questions)


def _p(answer):
    """A yes/no answer's probability, or a choice's probabilities in option order."""
    return [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())


def test_each_question_is_answered_by_the_part_it_belongs_to_in_one_call(tmp_path):
    """The presets' words (a statement equal to an anchor, a choice of anchor texts) read the own
    head, exactly as the checkpoint without an open part; the rest read the open part exactly as it
    answers alone; one result per state, in the caller's question order, usage summed."""
    path = _with_open(tmp_path)
    alone_own = Agent(save_checkpoint(tmp_path / "own", *_own()))
    alone_open = Agent(save_checkpoint(tmp_path / "open", *tiny_open_part()))
    agent = Agent(path)
    assert agent._open is not None
    own, opened = agent._open.split(parse_questions(QUESTIONS))
    assert [q.id for q in own] == list(OWN) and [q.id for q in opened] == list(OPEN)

    both = _answers(agent, QUESTIONS)
    expected_own = _answers(alone_own, {k: QUESTIONS[k] for k in OWN})
    expected_open = _answers(alone_open, {k: QUESTIONS[k] for k in OPEN})
    for result, a, b in zip(both, expected_own, expected_open):
        assert list(result["answers"]) == list(QUESTIONS)
        for qid in OWN:  # the own head's answers as they were, the open part's marked as its
            assert result["answers"][qid] == a["answers"][qid] and "part" not in a["answers"][qid]
        for qid in OPEN:
            assert result["answers"][qid] == {**b["answers"][qid], "part": "open"}
        assert result["usage"]["input_tokens"] == a["usage"]["input_tokens"] + b["usage"]["input_tokens"]
    # the open part differs from the own head on the open questions: the route matters
    own_on_open = _answers(alone_own, {k: QUESTIONS[k] for k in OPEN})
    assert any(_p(x["answers"]["new"]) != _p(y["answers"]["new"]) for x, y in zip(own_on_open, both))
    # a call with presets only runs the own head alone, and one with open questions only the open part
    for qid, alone, mark in (("known", alone_own, {}), ("new", alone_open, {"part": "open"})):
        for x, y in zip(_answers(agent, {qid: QUESTIONS[qid]}), _answers(alone, {qid: QUESTIONS[qid]})):
            assert (x["answers"][qid], x["usage"], x["model"]) == ({**y["answers"][qid], **mark}, y["usage"],
                                                                   agent.model_id)


def test_the_open_part_survives_save_and_load_with_its_tensors_and_config(tmp_path):
    path = _with_open(tmp_path)
    config = json.loads((path / "rl_agent_config.json").read_text())
    assert config[OPEN_KEY]["temperature"] == [0.7, 1.0, 1.3]
    model, _, _ = load_checkpoint(path)
    part = tiny_open_part().model
    for name, tensor in part.state_dict().items():
        assert torch.equal(model.open_model.state_dict()[name], tensor), name
    agent = Agent(path)
    again = Agent(agent.save(tmp_path / "again"))
    assert [r["answers"] for r in _answers(again, QUESTIONS)] == [r["answers"] for r in _answers(agent, QUESTIONS)]


def test_adapt_fits_each_question_on_the_part_that_answers_it(tmp_path):
    """A few-shot correction of an open question is fitted on the open part's outputs and applied to
    them (and an own question's on the own head's): the adapted Agent answers as adapting each part
    alone does, and keeps doing so after save and load."""
    agent = Agent(_with_open(tmp_path))
    labels = [(s, {"new": i % 2 == 0, "known": i % 3 == 0, "mood": ["happy", "angry", "calm"][i % 3]})
              for i, s in enumerate(STATES * 2)]
    questions = {k: QUESTIONS[k] for k in ("new", "known", "mood")}
    adapted = agent.adapt(labels, questions, method="temperature")
    def only(qids):
        return [(s, {k: v for k, v in answers.items() if k in qids}) for s, answers in labels]

    alone_open = Agent(save_checkpoint(tmp_path / "open", *tiny_open_part())).adapt(
        only({"new", "mood"}), {k: questions[k] for k in ("new", "mood")}, method="temperature")
    alone_own = Agent(save_checkpoint(tmp_path / "own", *_own())).adapt(
        only({"known"}), {"known": questions["known"]}, method="temperature")
    got = _answers(adapted, questions)
    for result, b, a in zip(got, _answers(alone_open, {k: questions[k] for k in ("new", "mood")}),
                            _answers(alone_own, {"known": questions["known"]})):
        for qid in ("new", "mood"):
            assert _p(result["answers"][qid]) == pytest.approx(_p(b["answers"][qid]), abs=2e-4)
        assert _p(result["answers"]["known"]) == pytest.approx(_p(a["answers"]["known"]), abs=2e-4)
    # the corrections changed the open answers, and they survive a save and load
    assert [r["answers"] for r in got] != [r["answers"] for r in _answers(agent, questions)]
    reloaded = Agent(adapted.save(tmp_path / "adapted"))
    for x, y in zip(_answers(reloaded, questions), got):
        for qid in questions:
            assert _p(x["answers"][qid]) == pytest.approx(_p(y["answers"][qid]), abs=2e-4)


def test_an_open_part_that_names_its_question_types_leaves_the_others_to_the_own_head(tmp_path):
    """``"question_types": ["noul"]``: the far statement still reads the open part, the far choice the
    own head (as the checkpoint without an open part answers it); ``"part": "open"`` still sends the
    choice to the open part."""
    parts = tiny_open_parts()
    parts.config.extra[OPEN_KEY]["question_types"] = ["noul"]
    agent = Agent(save_checkpoint(tmp_path / "noul", *parts))
    own, opened = agent._open.split(parse_questions(QUESTIONS))
    assert [q.id for q in own] == ["known", "route", "mood"] and [q.id for q in opened] == ["new"]
    alone_own = Agent(save_checkpoint(tmp_path / "own", *_own()))
    alone_open = Agent(save_checkpoint(tmp_path / "open", *tiny_open_part()))
    for result, a, b in zip(_answers(agent, QUESTIONS), _answers(alone_own, QUESTIONS), _answers(alone_open, QUESTIONS)):
        assert result["answers"]["mood"] == a["answers"]["mood"]
        assert result["answers"]["new"] == {**b["answers"]["new"], "part": "open"}
    forced = {"mood": {**QUESTIONS["mood"], "part": "open"}}
    for result, b in zip(_answers(agent, forced), _answers(alone_open, forced)):
        assert result["answers"]["mood"] == {**b["answers"]["mood"], "part": "open"}
    assert json.loads((agent.save(tmp_path / "again") / "rl_agent_config.json").read_text())[OPEN_KEY][
        "question_types"] == ["noul"]


def test_an_adapted_choice_reads_the_open_part_its_adapted_types_name(tmp_path):
    """``"question_types": ["noul"], "adapted_types": ["noul", "choice"]``: zero-shot, the far choice
    reads the own head; adapted, it is fitted on and answered by the open part, exactly as adapting
    the open part alone does, through save and load; a far choice that was not adapted stays with the
    own head, and an adaptation that names no part (written before the key) is routed as before."""
    parts = tiny_open_parts()
    parts.config.extra[OPEN_KEY].update(question_types=["noul"], adapted_types=["noul", "choice"])
    agent = Agent(save_checkpoint(tmp_path / "noul", *parts))
    questions = {k: QUESTIONS[k] for k in ("new", "mood")}
    assert [r["answers"]["mood"].get("part") for r in _answers(agent, questions)] == [None] * len(STATES)
    labels = [(s, {"new": i % 2 == 0, "mood": ["happy", "angry", "calm"][i % 3]}) for i, s in enumerate(STATES * 2)]
    def only(qid):
        return [(s, {qid: answers[qid]}) for s, answers in labels]

    adapted = agent.adapt(only("mood"), {"mood": questions["mood"]}, method="temperature")
    stored = adapted.config.extra["adaptation"]["questions"]
    assert [(e["id"], e["part"]) for e in stored] == [("mood", "open")]
    report = adapted.adaptation_report  # the notebook's table says which head was fitted
    assert report["mood"].part == "open" and report.rows()[0]["part"] == "open"
    assert "open part" in repr(report) and "<td style='padding:0 .6em'>open</td>" in report._repr_html_()
    alone_open = Agent(save_checkpoint(tmp_path / "open", *tiny_open_part())).adapt(
        only("mood"), {"mood": questions["mood"]}, method="temperature")
    got = _answers(adapted, questions)
    for result, b in zip(got, _answers(alone_open, {"mood": questions["mood"]})):
        assert result["answers"]["mood"]["part"] == "open"
        assert _p(result["answers"]["mood"]) == pytest.approx(_p(b["answers"]["mood"]), abs=2e-4)
    reloaded = Agent(adapted.save(tmp_path / "adapted"))
    for x, y in zip(_answers(reloaded, questions), got):
        assert x["answers"]["mood"]["part"] == "open"
        assert _p(x["answers"]["mood"]) == pytest.approx(_p(y["answers"]["mood"]), abs=2e-4)
    # adapting only the statement leaves the far choice with the own head
    only_new = agent.adapt(only("new"), {"new": questions["new"]}, method="temperature")
    assert all(r["answers"]["mood"].get("part") is None for r in _answers(only_new, questions))
    # an entry without "part" (an older adaptation) does not move its question
    config = json.loads((adapted.save(tmp_path / "older") / "rl_agent_config.json").read_text())
    for entry in config["adaptation"]["questions"]:
        del entry["part"]
    (tmp_path / "older" / "rl_agent_config.json").write_text(json.dumps(config))
    older = Agent(tmp_path / "older")
    assert all(r["answers"]["mood"].get("part") is None for r in _answers(older, questions))


@pytest.mark.parametrize("types, adapted", [(["noul"], "noul"), (["noul"], ["choice"]), (None, ["noul"]),
                                            (["noul"], ["noul", "maybe"])])
def test_adapted_types_that_drop_a_question_type_or_name_none_are_refused(tmp_path, types, adapted):
    own = _own()
    opened = {**tiny_open_part().config.to_dict(), "adapted_types": adapted}
    if types is not None:
        opened["question_types"] = types
    own.config.extra[OPEN_KEY] = opened
    with pytest.raises(CheckpointError, match=rf"{OPEN_KEY}: adapted_types = .* is invalid; use a list of "
                                              r".* that holds every type of question_types"):
        load_checkpoint(save_checkpoint(tmp_path / "bad", *own))


@pytest.mark.parametrize("value, words", [
    ([1, 2], "use an object"),
    ({"head_layers": -1}, "head_layers"),
    ({OPEN_KEY: {}}, "of its own"),
])
def test_a_malformed_open_part_is_refused_naming_the_key(tmp_path, value, words):
    own = _own()
    own.config.extra[OPEN_KEY] = value
    path = save_checkpoint(tmp_path / "bad", *own)
    with pytest.raises(CheckpointError, match=OPEN_KEY) as caught:
        load_checkpoint(path)
    assert words in str(caught.value)


@pytest.mark.parametrize("types", [[], ["yes"], "noul"])
def test_an_open_part_whose_question_types_are_not_a_list_of_types_is_refused(tmp_path, types):
    own = _own()
    own.config.extra[OPEN_KEY] = {**tiny_open_part().config.to_dict(), "question_types": types}
    with pytest.raises(CheckpointError, match=rf"{OPEN_KEY}: question_types = .* is invalid; use a non-empty list"):
        load_checkpoint(save_checkpoint(tmp_path / "bad", *own))


def test_an_open_part_needs_a_similarity_prior_to_route_by(tmp_path):
    plain = make_tiny_parts(seed=1)
    plain.config.extra[OPEN_KEY] = tiny_open_part().config.to_dict()
    path = save_checkpoint(tmp_path / "plain", *plain)
    with pytest.raises(CheckpointError, match="similarity_prior"):
        load_checkpoint(path)


def test_a_network_and_config_that_disagree_about_the_part_are_refused():
    own = _own()
    own.config.extra[OPEN_KEY] = tiny_open_part().config.to_dict()
    with pytest.raises(ValueError, match="open_model"):
        Agent(own)


def test_bundled_assembly_adds_an_open_folder_as_the_open_part(tmp_path, monkeypatch):
    """heads/<name>/open/ is a head of its own: assembled under open_model. over its own copy of the
    wheel's encoder (here the shipped mini-en head again, with a change of one embedding row), its
    config nested as open_questions; presets read the own head, an unseen statement the open part."""
    from safetensors.torch import load_file, save_file

    from jevlaya_lab.decisions import encoder_delta

    heads = tmp_path / "heads" / "mini-en"
    (heads / bundled.OPEN_DIR).mkdir(parents=True)
    shipped = bundled.head_dir("mini-en")
    for file in ("head.safetensors", "config.json", "calibration.json"):
        (heads / file).write_bytes((shipped / file).read_bytes())
        (heads / bundled.OPEN_DIR / file).write_bytes((shipped / file).read_bytes())
    trained = load_file(shipped / "head.safetensors")
    row = torch.zeros(1, 384, dtype=torch.float16)
    row[0, 0] = 0.5
    trained[f"{encoder_delta.PREFIX}embeddings.word_embeddings.weight.rows"] = row
    trained[f"{encoder_delta.PREFIX}embeddings.word_embeddings.weight.index"] = torch.tensor([2000])
    save_file(trained, heads / bundled.OPEN_DIR / "head.safetensors")
    staging = tmp_path / "assembled"
    staging.mkdir()
    bundled._assemble("mini-en", heads, staging)

    tensors = load_file(staging / "model.safetensors")
    word = "encoder.embeddings.word_embeddings.weight"
    assert torch.equal(tensors[OPEN_PREFIX + word][2000] - tensors[word][2000], row[0].float())
    assert torch.equal(tensors[OPEN_PREFIX + word][:2000], tensors[word][:2000])
    assert not any(k.startswith((encoder_delta.PREFIX, OPEN_PREFIX + encoder_delta.PREFIX)) for k in tensors)
    config = json.loads((staging / "rl_agent_config.json").read_text())
    assert config[OPEN_KEY] == json.loads((shipped / "config.json").read_text())
    agent = Agent(staging)
    own, opened = agent._open.split(parse_questions({
        "spam": {"type": "noul", "instructions": json.loads(json.dumps(_preset_statement()))},
        "mine": {"type": "noul", "instructions": "The writer mentions a birthday party next weekend."}}))
    assert [q.id for q in own] == ["spam"] and [q.id for q in opened] == ["mine"]
    # loaded, the open part holds the one row it moved over the own encoder's table (shared_embedding)
    table = agent.decision_model.open_model.encoder.get_input_embeddings()
    assert table.index.tolist() == [2000] and table.base is agent.decision_model.encoder.get_input_embeddings()


def _preset_statement() -> str:
    from jevlaya_lab.decisions.presets import PRESETS

    return next(q["instructions"] for preset in PRESETS.values() for q in preset().values() if q["type"] == "noul")


def test_train_open_reads_and_writes_the_open_part_of_a_bundled_checkpoint(tmp_path, capsys, monkeypatch):
    """``jevlaya-lab train --name mini-en --open --fallback-only`` refits the fallback of mini-en's open
    part (here on the hand-written messages alone, to keep it short) and writes that part's head: its
    tensors (the encoder change among them) unchanged, its config with the new fallback; the own head is
    not read. A checkpoint without an open part is refused with the command that trains one."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions.prior import PRIOR_KEY
    from jevlaya_lab.decisions.training import cli as train_cli

    opened = bundled.head_dir("mini-en") / bundled.OPEN_DIR
    out = tmp_path / "open-head"
    args = ["--name", "mini-en", "--open", "--fallback-only", "--datasets", "", "--written", "en",
            "--language-references", "0", "--out", str(out)]
    assert train_cli.main(args) == 0
    shipped, written = load_file(opened / "head.safetensors"), load_file(out / "head.safetensors")
    assert written.keys() == shipped.keys() and all(torch.equal(written[k], v) for k, v in shipped.items())
    assert any(k.startswith("encoder_delta.") for k in written)
    fallback = json.loads((out / "config.json").read_text())[PRIOR_KEY]["fallback"]
    assert fallback != json.loads((opened / "config.json").read_text())[PRIOR_KEY]["fallback"]
    assert (out / "calibration.json").read_bytes() == (opened / "calibration.json").read_bytes()
    bare = tmp_path / "heads" / "mini-en"  # both bundled checkpoints ship an open part: mini-en's own head alone
    bare.mkdir(parents=True)
    for file in ("head.safetensors", "config.json", "calibration.json"):
        (bare / file).write_bytes((bundled.head_dir("mini-en") / file).read_bytes())
    monkeypatch.setattr(bundled, "HEADS_DIR", tmp_path / "heads")
    with pytest.raises(SystemExit, match="mini-en has no open part; train one first with --name mini-en --open"):
        train_cli.main(["--name", "mini-en", "--open", "--fallback-only", "--datasets", "", "--written", "en",
                        "--out", str(tmp_path / "nothing")])


@pytest.mark.public_datasets
def test_train_open_trains_and_refits_the_open_parts_reader(tmp_path, capsys):
    """``--open --reader-only`` and ``--open --reader-refit`` (the second of the open part's two
    documented commands) read and write the open part: on a tiny budget the new head keeps every tensor
    of the shipped open head but its reader (the encoder change among them) and carries a new one-layer
    reader in fp16; a refit keeps all of its tensors, reader included, and refits the blend and the
    choice weight in its config, and drops the shipped line (it was fit over the old blend), saying so.
    The own head is not written."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions.prior import PRIOR_KEY
    from jevlaya_lab.decisions.training import cli as train_cli

    opened = bundled.head_dir("mini-en") / bundled.OPEN_DIR
    own_before = (bundled.head_dir("mini-en") / "head.safetensors").stat().st_mtime_ns
    shipped = load_file(opened / "head.safetensors")
    out = tmp_path / "open-reader"
    assert train_cli.main(["--name", "mini-en", "--open", "--reader-only", "--reader-layers", "1", "--reader-steps",
                           "2", "--reader-blend-rows", "64", "--out", str(out)]) == 0
    written = load_file(out / "head.safetensors")
    kept = {k: v for k, v in shipped.items() if not k.startswith("reader.")}
    assert any(k.startswith("encoder_delta.") for k in kept)
    assert all(torch.equal(written[k], v) for k, v in kept.items())
    reader = {k: v for k, v in written.items() if k.startswith("reader.")}
    assert {k.split(".")[2] for k in reader if k.startswith("reader.layers.")} == {"0"}
    assert {v.dtype for v in reader.values()} == {torch.float16}
    assert json.loads((out / "config.json").read_text())[PRIOR_KEY]["reader"]["layers"] == 1
    refit = tmp_path / "open-refit"
    assert train_cli.main(["--name", "mini-en", "--open", "--reader-refit", "--reader-blend-rows", "128",
                           "--out", str(refit)]) == 0
    rewritten = load_file(refit / "head.safetensors")
    assert rewritten.keys() == shipped.keys() and all(torch.equal(rewritten[k], v) for k, v in shipped.items())
    config = json.loads((refit / "config.json").read_text())[PRIOR_KEY]["reader"]
    before = json.loads((opened / "config.json").read_text())[PRIOR_KEY]["reader"]
    assert config["layers"] == before["layers"] == 3 and len(config["blend"]) == 3 and config["choices"] > 0
    assert config["blend"] != before["blend"]  # fit on 128 rows instead of 4000
    assert "line" in before and "line" not in config and "reference" not in config
    notice = capsys.readouterr().err
    assert "is not kept; fit it again on the new head with bench/statement_lines.py --fit-line" in notice
    assert (bundled.head_dir("mini-en") / "head.safetensors").stat().st_mtime_ns == own_before


def test_a_notebook_shows_which_part_answered(tmp_path):
    """The answers card names the open part beside an open question's type, and nothing beside the
    own head's (the answers view draws the same text: tests/widgets/test_widgets_in_chromium.py)."""
    from jevlaya_lab.display import answer_rows, answers_html

    result = _answers(Agent(_with_open(tmp_path)), QUESTIONS)[0]
    rows = {r["question"]: r for r in answer_rows(result)}
    assert {q: r["part"] for q, r in rows.items()} == {"known": None, "new": "open", "route": None, "mood": "open"}
    html = answers_html(result)
    assert "<i>(noul · open part)</i>" in html and "<i>(choice · open part)</i>" in html
    assert "<i>(noul)</i>" in html and "<i>(choice)</i>" in html


def test_a_questions_part_key_sends_it_to_that_head(tmp_path):
    """``"part": "open"`` / ``"own"`` overrides the texts' route; on a checkpoint without an open part
    the key changes nothing; a correction fitted under the key is kept apart from one without it; any
    other value is refused, naming the key and the fix."""
    from jevlaya_lab.decisions.adaptation import question_key
    from jevlaya_lab.decisions.errors import QuestionError

    agent = Agent(_with_open(tmp_path))
    alone_own = Agent(save_checkpoint(tmp_path / "own", *_own()))
    alone_open = Agent(save_checkpoint(tmp_path / "open", *tiny_open_part()))
    forced = {"known": {**QUESTIONS["known"], "part": "open"}, "new": {**QUESTIONS["new"], "part": "own"}}
    own, opened = agent._open.split(parse_questions(forced))
    assert [q.id for q in own] == ["new"] and [q.id for q in opened] == ["known"]
    expected_open = _answers(alone_open, {"known": QUESTIONS["known"]})
    expected_own = _answers(alone_own, {"new": QUESTIONS["new"]})
    for result, o, w in zip(_answers(agent, forced), expected_open, expected_own):
        assert result["answers"]["known"] == {**o["answers"]["known"], "part": "open"}
        assert result["answers"]["new"] == w["answers"]["new"]
    plain = [r["answers"]["new"] for r in _answers(alone_own, {"new": {**QUESTIONS["new"], "part": "open"}})]
    assert plain == [r["answers"]["new"] for r in expected_own]
    (keyed,), (unkeyed,) = parse_questions({"new": forced["new"]}), parse_questions({"new": QUESTIONS["new"]})
    assert question_key(keyed) != question_key(unkeyed)
    with pytest.raises(QuestionError, match="part must be 'own' or 'open', got str 'mine'; write 'part': 'own'"):
        parse_questions({"x": {**QUESTIONS["new"], "part": "mine"}})


def test_the_shipped_mini_multi_reads_a_users_statement_with_its_open_part_and_a_choice_with_its_own_head():
    """mini-multi's open part answers statements only (its config's question_types): a user's own
    statement, in English or French, is answered by it; a user's own choice stays with the own head
    until it is adapted (its adapted_types); the part's token table holds only the rows its tuning
    moved over the own encoder's."""
    from jevlaya_lab import load

    agent = load("mini-multi", device="cpu")
    questions = {
        "leaving": {"type": "noul", "instructions": "The customer threatens to cancel the subscription."},
        "remboursement": {"type": "noul", "instructions": "Le client demande à être remboursé."},
        "desk": {"type": "choice", "instructions": "Which desk handles this?",
                 "criteria": ["payments", "shipping", "accounts", "product"]},
    }
    own, opened = agent._open.split(parse_questions(questions))
    assert [q.id for q in own] == ["desk"] and [q.id for q in opened] == ["leaving", "remboursement"]
    (result,) = agent.predict_batch(["Je veux être remboursé, sinon j'annule mon abonnement."], questions)
    assert [answer.get("part") for answer in result["answers"].values()] == ["open", "open", None]
    table = agent.decision_model.open_model.encoder.get_input_embeddings()
    assert 0 < len(table.index) <= 3000 and table.base is agent.decision_model.encoder.get_input_embeddings()
    # once adapted (its config's adapted_types), the user's choice is fitted on and answered by the open part
    labelled = [("My card payment was taken twice.", "payments"), ("The parcel never arrived.", "shipping"),
                ("I cannot log in to my account.", "accounts"), ("The app crashes when I open it.", "product"),
                ("Refund the double charge please.", "payments"), ("Tracking says delivered, nothing here.", "shipping"),
                ("Reset my password, it is locked.", "accounts"), ("The export button does nothing.", "product")]
    adapted = agent.adapt([(text, {"desk": desk}) for text, desk in labelled], {"desk": questions["desk"]})
    assert [e["part"] for e in adapted.config.extra["adaptation"]["questions"]] == ["open"]
    (result,) = adapted.predict_batch(["Where is my parcel? It is a week late."], questions)
    assert [answer.get("part") for answer in result["answers"].values()] == ["open", "open", "open"]
    assert result["answers"]["desk"]["choice"] == "shipping"
