"""Training of the bundled checkpoints: generator, metrics, temperature fit, end-to-end run."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from dataclasses import replace

import pytest
import torch

from jevlaya_lab.decisions import presets
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import load_checkpoint
from jevlaya_lab.decisions.questions import parse_question
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.decisions.training import cli as train_cli
from jevlaya_lab.decisions.training import metrics
from jevlaya_lab.decisions.training.synthetic import generate, gold_index
from jevlaya_lab.decisions.training.temperature import fit_temperatures
from jevlaya_lab.decisions.training.trainer import FALLBACK_HUBNESS, TrainConfig, export_head, gate_for, train

# ------------------------------------------------------------------ generator


def test_generator_is_seeded_same_seed_same_data():
    assert generate(200, seed=7) == generate(200, seed=7)
    assert generate(200, seed=7) != generate(200, seed=8)


def test_generator_noul_statements_are_true_and_false_in_equal_measure_per_task():
    counts = Counter((e.task, bool(e.gold)) for e in generate(4000, seed=3) if e.question["type"] == "noul")
    tasks = {task for task, _ in counts}
    assert len(tasks) >= 6
    for task in tasks:
        assert abs(counts[(task, True)] - counts[(task, False)]) <= 1, task


def test_generator_option_counts_span_2_to_20_and_orders_are_shuffled():
    examples = generate(4000, seed=1)
    ks = {len(e.question["criteria"]) for e in examples if e.question["type"] == "choice"}
    assert min(ks) == 2 and max(ks) == 20
    intent_orders = {tuple(e.question["criteria"]) for e in examples if e.task == "triage.intent"}
    assert len(intent_orders) > 20


def test_generator_covers_every_preset_question_and_generic_tasks():
    tasks = {e.task for e in generate(3000, seed=2)}
    for name, factory in presets.PRESETS.items():
        assert {f"{name}.{qid}" for qid in factory()} <= tasks
    assert {"generic.topic", "generic.topic_noul", "generic.emotion", "generic.urgency"} <= tasks


def test_generated_questions_are_valid_and_gold_points_at_an_option():
    for i, e in enumerate(generate(1500, seed=4)):
        q = parse_question(f"q{i}", e.question)
        assert 0 <= gold_index(e) < len(q.labels)


def test_generator_rejects_bad_arguments_with_the_field_named():
    with pytest.raises(ValueError, match="n=-1"):
        generate(-1)
    with pytest.raises(ValueError, match="generic_share=2"):
        generate(5, generic_share=2)
    with pytest.raises(ValueError, match="multilingual_share=-0.5"):
        generate(5, multilingual_share=-0.5)


def test_multilingual_share_writes_triage_states_in_the_13_languages_with_valid_golds():
    from jevlaya_lab.decisions.detect import detect
    from jevlaya_lab.decisions.training import bank_multi

    examples = generate(3000, seed=5, generic_share=0.0, multilingual_share=1.0)
    foreign = [e for e in examples if e.task.startswith("triage_ml.")]
    assert not any(e.task.startswith("triage.") for e in examples), "every triage state is foreign at share 1"
    assert {e.task for e in foreign} == {f"triage_ml.{qid}" for qid in presets.triage_questions()}
    texts = {e.state["message"] if isinstance(e.state, dict) else e.state for e in foreign}
    languages = {detect(t)["language"] for t in texts}
    assert len(set(bank_multi.LANGUAGES) & languages) >= 10, languages
    for i, e in enumerate(foreign[:400]):
        assert 0 <= gold_index(e) < len(parse_question(f"q{i}", e.question).labels)


def test_match_rows_restate_the_gold_description_and_only_it():
    rows = generate(400, seed=9, match_share=1.0)
    assert {e.task for e in rows} == {"generic.match"}
    for i, e in enumerate(rows):
        q = parse_question(f"q{i}", e.question)
        assert 0 <= gold_index(e) < len(q.labels)
        if isinstance(e.question["criteria"], dict):
            text = (e.state["message"] if isinstance(e.state, dict) else e.state).lower()
            gold_words = set(e.question["criteria"][e.gold].lower().replace(",", " ").split())
            assert any(w in text for w in gold_words), (text, e.gold)


def test_multilingual_share_zero_leaves_the_english_data_unchanged():
    assert generate(500, seed=6, generic_share=0.15) == generate(500, seed=6, generic_share=0.15,
                                                               multilingual_share=0.0)


# ------------------------------------------------------------------ metrics and temperatures


def test_ece_matches_a_hand_computed_value():
    probs = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    golds = [0, 1, 1, 0]
    # bins: 0.9 -> bin 9 (hit), 0.8 -> bin 8 (miss), 0.7 -> bin 7 (hit), 0.6 -> bin 6 (hit)
    expected = (abs(0.9 - 1) + abs(0.8 - 0) + abs(0.7 - 1) + abs(0.6 - 1)) / 4
    assert metrics.expected_calibration_error(probs, golds) == pytest.approx(expected)
    assert metrics.accuracy(probs, golds) == 0.75


def test_calibrated_ece_is_what_sampling_alone_gives():
    rng = random.Random(3)
    probs = [[p, 1 - p] for p in (rng.uniform(0.5, 1.0) for _ in range(40))]
    reference = metrics.calibrated_ece(probs)
    # golds drawn from the probabilities themselves: a calibrated model, whose ECE on 40 rows is
    # still far from 0 and close to the reference
    draws = [metrics.expected_calibration_error(probs, [0 if rng.random() < p[0] else 1 for p in probs])
             for _ in range(300)]
    assert 0.05 < reference < 0.2
    assert statistics.mean(draws) == pytest.approx(reference, abs=0.01)
    # the reference shrinks with more rows, and an overconfident model stands out above it
    many = probs * 25
    assert metrics.calibrated_ece(many, draws=50) < reference / 3
    always_wrong = metrics.expected_calibration_error(probs, [1] * len(probs))
    assert always_wrong > reference + 0.3
    assert metrics.calibrated_ece(probs) == reference  # seeded: reports are reproducible
    with pytest.raises(ValueError, match="probs"):
        metrics.expected_calibration_error([[0.5, 0.5]], [])


def test_score_mae_uses_the_expected_level():
    assert metrics.mean_absolute_error([[0.0, 0.5, 0.5]], [2]) == pytest.approx(0.5)


def test_temperature_fit_recovers_a_known_overconfidence():
    rng = random.Random(0)
    logits, golds, types = [], [], []
    for _ in range(600):
        true = torch.tensor([rng.gauss(0, 1.5) for _ in range(4)])
        gold = int(torch.multinomial(torch.softmax(true, -1), 1))
        logits.append(true * 2.5)  # the model is 2.5x too sharp
        golds.append(gold)
        types.append("choice")
    fit = fit_temperatures(logits, golds, types)
    assert fit.temperature[0] == pytest.approx(2.5, rel=0.25)
    assert fit.temperature[1:] == [1.0, 1.0]  # no rows: left at 1
    assert "choice:3-5" in fit.temperature_by_options
    assert fit.report["choice"]["nll_after"] < fit.report["choice"]["nll_before"]


def test_temperature_fit_checks_lengths():
    with pytest.raises(ValueError, match="one entry per held-out row"):
        fit_temperatures([torch.zeros(2)], [0, 1], ["noul"])


def test_train_config_rejects_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="steps=0"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="lr=2"):
        TrainConfig(lr=2)
    with pytest.raises(ValueError, match="datasets='clinc,hwu64'"):
        TrainConfig(datasets="clinc,hwu64")
    with pytest.raises(ValueError, match="gate_quantile=1.5"):
        TrainConfig(gate_quantile=1.5)
    with pytest.raises(ValueError, match="label_aliases=1.5"):
        TrainConfig(label_aliases=1.5)


# ------------------------------------------------------------------ end to end on a tiny budget

WORDS = "refund order bill password login crash slow price plan cancel delivery package email phone".split()


def _tiny_datasets(root):
    """The three datasets' file formats with a few made-up utterances under real intent labels."""
    from jevlaya_lab.decisions.training.intents import load_intents

    intents = load_intents()
    rng = random.Random(0)
    labels = {d: sorted(i.intent for i in intents.values() if i.dataset == d)[:4] for d in ("clinc150", "banking77", "hwu64")}

    def rows(dataset, n):
        return [[" ".join(rng.sample(WORDS, 4)), rng.choice(labels[dataset])] for _ in range(n)]

    (root / "clinc150").mkdir(parents=True)
    (root / "clinc150" / "data_full.json").write_text(json.dumps(
        {"train": rows("clinc150", 20), "val": rows("clinc150", 5), "test": rows("clinc150", 8), "oos_train": []}))
    (root / "banking77").mkdir()
    for split, n in (("train", 20), ("test", 8)):
        lines = ["text,category"] + [f"{t},{label}" for t, label in rows("banking77", n)]
        (root / "banking77" / f"{split}.csv").write_text("\n".join(lines) + "\n")
    (root / "hwu64").mkdir()
    for split, n in (("train", 20), ("test", 8)):
        examples = [{"text": t, "intent": label, "entities": []} for t, label in rows("hwu64", n)]
        (root / "hwu64" / f"{split}_kfold1.json").write_text(json.dumps({"rasa_nlu_data": {"common_examples": examples}}))
    return root


TINY = dict(dataset_rows=60, n_synthetic=40, n_heldout_synthetic=30, steps=6, batch_size=16, threads=1,
            max_len=96, head_max_len=64, rank=4)


def test_training_runs_end_to_end_on_a_tiny_budget_and_the_result_loads_in_an_agent(tmp_path):
    source = make_tiny_checkpoint(tmp_path / "tiny", seed=1)
    data = _tiny_datasets(tmp_path / "data")
    encoder, tokenizer, encoder_id = train_cli.load_encoder(str(source))
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    cfg = TrainConfig(**TINY, data_dir=str(data))
    result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: None)
    after = result.model.encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the encoder stays frozen
    prior = result.model.prior
    assert prior is not None and prior.state_proj.abs().sum() > 0  # the correction was trained
    assert result.config["similarity_prior"]["joint_head"] is False
    assert result.config["similarity_prior"]["anchors"] == len(prior.anchors) > 0
    assert tuple(result.config["similarity_prior"]["gate"]) == gate_for(prior.anchors, cfg.gate_quantile)
    stricter = train(encoder, tokenizer, replace(cfg, gate_quantile=0.95), encoder_id=encoder_id, log=lambda m: None)
    assert stricter.config["similarity_prior"]["gate"][0] > result.config["similarity_prior"]["gate"][0]
    assert torch.equal(result.model.scorer[-1].weight, torch.zeros_like(result.model.scorer[-1].weight))
    assert all(0.5 <= t <= 5.0 for t in result.config["temperature"])
    assert {t.split(".")[0] for t in result.heldout} >= {"clinc150", "banking77", "hwu64", "triage"}
    assert all(0.0 <= row["accuracy"] <= 1.0 for row in result.heldout.values())

    again = train(*train_cli.load_encoder(str(source))[:2], cfg, log=lambda m: None)
    assert torch.equal(again.model.prior.state_proj, prior.state_proj)  # seeded: step for step the same

    head = export_head(result, tmp_path / "head")
    from safetensors.torch import load_file

    shipped = load_file(head / "head.safetensors")
    assert {"prior.scale", "prior.bias", "prior.state_proj", "prior.option_proj", "prior.anchors"} <= set(shipped)
    assert not any(k.startswith("encoder.") for k in shipped)
    assert "tuned_encoder" not in json.loads((head / "calibration.json").read_text())  # nothing was tuned

    agent = Agent(str(_save(result, tmp_path)))
    out = agent.predict({"message": "I want a refund now"}, presets.triage_questions())
    assert set(out["answers"]) == {"intent", "sentiment", "is_urgent", "priority"}
    assert math.isclose(sum(out["answers"]["intent"]["probabilities"].values()), 1.0, abs_tol=1e-3)


def test_alias_option_texts_train_but_are_never_anchors(tmp_path):
    """label_aliases: rows naming options as a user might train the correction against options
    whose gate is shut, so the alias texts must stay out of the anchors (and out of the gate's
    placement); every other training text is an anchor, as without aliases."""
    from jevlaya_lab.decisions.prior_inputs import option_texts
    from jevlaya_lab.decisions.training.trainer import _examples, _parse, run_split
    from jevlaya_lab.decisions.training.written import is_alias_text

    source = make_tiny_checkpoint(tmp_path / "tiny", seed=1)
    encoder, tokenizer, encoder_id = train_cli.load_encoder(str(source))
    cfg = TrainConfig(**{**TINY, "steps": 2}, datasets="", written="en", written_copies=1, label_aliases=0.5)
    texts = {t for ex in _examples(cfg, run_split(cfg), lambda m: None)[0]
             for t in option_texts(_parse(ex)) if t is not None}
    aliases = {t for t in texts if is_alias_text(t)}
    assert len(aliases) > 20 and "tech support" in {t.partition(": ")[0] for t in aliases}
    result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: None)
    anchors = result.model.prior.anchors
    assert result.config["similarity_prior"]["anchors"] == len(anchors) == len(texts) - len(aliases)
    assert tuple(result.config["similarity_prior"]["gate"]) == gate_for(anchors, cfg.gate_quantile)
    plain = train(encoder, tokenizer, replace(cfg, label_aliases=0.0), encoder_id=encoder_id, log=lambda m: None)
    plain_cfg = replace(cfg, label_aliases=0.0)
    assert not any(is_alias_text(t) for ex in _examples(plain_cfg, run_split(plain_cfg), lambda m: None)[0]
                   for t in option_texts(_parse(ex)) if t is not None)
    assert plain.config["similarity_prior"]["anchors"] > 0


def _save(result, tmp_path):
    from jevlaya_lab.decisions.checkpoint import CheckpointConfig, save_checkpoint

    return save_checkpoint(tmp_path / "trained", result.model, result.tokenizer,
                           CheckpointConfig.from_dict(result.config))


def test_train_command_writes_a_loadable_checkpoint(tmp_path, capsys):
    source = make_tiny_checkpoint(tmp_path / "tiny", seed=2)
    data = _tiny_datasets(tmp_path / "data")
    args = ["--encoder", str(source), "--out", str(tmp_path / "out"), "--data-dir", str(data),
            "--datasets", "clinc150,hwu64"]
    for key, value in TINY.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    args += ["--lr", "1e-3", "--time-budget", "600", "--pool-cache", str(tmp_path / "pool")]  # every float option parses
    args += ["--written", "multi", "--language-references", "25"]  # reference states by language, then the fallback
    assert train_cli.main(args) == 0
    from jevlaya_lab.decisions.training.trainer import load_memo

    memo = load_memo(tmp_path / "pool")  # pooled vectors kept for the next run over this encoder
    assert len(memo) > 50 and all(abs(float(v.norm()) - 1.0) < 1e-4 for v in memo.values())
    model, _, config = load_checkpoint(tmp_path / "out")
    assert config.act_costs == [1.0] and config.head_layers == 0 and model.prior is not None
    scale, bias, hubness = model.prior.config.fallback  # the unseen-statement fallback was fit and written
    assert hubness == FALLBACK_HUBNESS and math.isfinite(scale) and math.isfinite(bias)
    blocks = dict(model.prior.config.reference_languages)
    assert len(blocks) >= 5 and set(blocks.values()) == {25} and "en" not in blocks
    assert model.prior.language_reference.shape == (25 * len(blocks), model.hidden_size)
    recorded = json.loads((tmp_path / "out" / "head" / "calibration.json").read_text())["train_config"]
    assert (recorded["datasets"], recorded["lr"], recorded["time_budget"]) == ("clinc150,hwu64", 1e-3, 600.0)
    assert "checkpoint ->" in capsys.readouterr().out


def test_a_missing_dataset_folder_names_the_path_and_the_option(tmp_path, capsys):
    source = make_tiny_checkpoint(tmp_path / "tiny", seed=2)
    args = ["--encoder", str(source), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "nowhere"),
            "--steps", "1"]
    assert train_cli.main(args) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "nowhere") in err and "--data-dir" in err


def test_language_references_without_a_multilingual_group_name_the_fix_before_any_work(capsys):
    assert train_cli.main(["--name", "mini-en", "--fallback-only", "--language-references", "300"]) == 1
    err = capsys.readouterr().err
    assert "--written 'en' has none" in err and "--written en,multi" in err and "--language-references 0" in err


def test_synthetic_evaluation_scores_each_example_against_its_own_option_order(tmp_path):
    """evaluate_examples batches examples that share a question; the same labels in another order
    are another question, or the gold indices would point at the wrong options."""
    from jevlaya_lab.decisions.training import evaluation

    agent = Agent(str(make_tiny_checkpoint(tmp_path / "tiny", seed=3)))
    examples = [e for e in generate(400, seed=11) if e.question["type"] == "choice"][:60]
    report = evaluation.evaluate_examples(agent, examples)
    for task in {e.task for e in examples}:
        mine = [e for e in examples if e.task == task]
        right = sum(agent.predict(e.state, {"q": e.question})["answers"]["q"]["choice"] == e.gold for e in mine)
        assert report["questions"][task]["accuracy"] == pytest.approx(right / len(mine), abs=1e-3), task


def test_the_gold_state_report_carries_each_questions_ece_reference(tmp_path):
    """Hand-written states are few per question, so each question's row carries the ECE a
    calibrated model would show on as many states, computed from the Agent's own probabilities."""
    from jevlaya_lab.decisions.training import evaluation

    agent = Agent(str(make_tiny_checkpoint(tmp_path / "tiny", seed=3)))
    texts = ["refund me now", "the app crashes", "great service, thanks", "how do I export?"] * 3
    states = [evaluation.GoldState("triage", {"message": t}, {"is_urgent": i % 2 == 0, "intent": "billing"})
              for i, t in enumerate(texts)]
    report = evaluation.evaluate_gold_states(agent, states)
    questions = presets.PRESETS["triage"]()
    for qid in ("is_urgent", "intent"):
        row = report["questions"][f"triage.{qid}"]
        answers = agent.predict_batch([s.state for s in states], questions)
        probs = [evaluation._probs(r["answers"][qid]) for r in answers]
        assert row["n"] == len(states)
        assert row["ece_if_calibrated"] == pytest.approx(metrics.calibrated_ece(probs), abs=1e-4)
    assert "ece_if_calibrated" not in report["types"]["noul"]


def test_the_gate_sits_at_the_same_place_in_each_encoders_own_cosine_scale():
    """An encoder that puts every text near every other (as multilingual-e5-small does: unrelated
    texts at ~0.9) gets a higher, sharper gate than one whose cosines spread widely; each threshold
    is the same quantile of the anchors' nearest-other-anchor cosines."""
    from jevlaya_lab.decisions.training.trainer import GATE_QUANTILE

    generator = torch.Generator().manual_seed(0)
    spread = torch.nn.functional.normalize(torch.randn(400, 32, generator=generator), dim=-1)
    common = torch.nn.functional.normalize(torch.randn(32, generator=generator), dim=0)
    compressed = torch.nn.functional.normalize(spread + 3.0 * common, dim=-1)
    for anchors in (spread, compressed):
        threshold, sharpness = gate_for(anchors)
        cosines = anchors @ anchors.T
        cosines.fill_diagonal_(-1.0)
        nearest = cosines.max(dim=1).values
        # the threshold is rounded to 0.001, which moves a few of the squeezed cosines across it
        assert (nearest < threshold).float().mean().item() == pytest.approx(GATE_QUANTILE, abs=0.025)
    (low, soft), (high, sharp) = gate_for(spread), gate_for(compressed)
    assert high > low + 0.2 and sharp > 2 * soft


def test_tune_encoder_moves_the_encoder_on_pairs_no_later_fit_reads_and_ships_what_moved(tmp_path, capsys):
    """``tune_encoder``: the encoder is tuned on intent pairs before the head trains, never on the
    utterances the run holds out (temperatures, act head) nor on the intents the statement reader
    holds out (its blend); the exported head carries exactly the moved encoder tensors in fp16, and
    the saved checkpoint answers with the tuned encoder."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions.training.intents import READER_HOLD_OUT, split_intents
    from jevlaya_lab.decisions.training.reader import ReaderTraining
    from jevlaya_lab.decisions.training.trainer import _drawn_utterances, encoder_pairs, run_split

    with pytest.raises(ValueError, match="tune_encoder=-1"):
        TrainConfig(tune_encoder=-1)
    with pytest.raises(ValueError, match="tune_encoder=5: the encoder is tuned on the datasets"):
        TrainConfig(tune_encoder=5, datasets="")
    source = make_tiny_checkpoint(tmp_path / "tiny", seed=1)
    data = _tiny_datasets(tmp_path / "data")
    cfg = TrainConfig(**TINY, data_dir=str(data), tune_encoder=40)
    split = run_split(cfg)
    pairs = encoder_pairs(cfg, split)
    held, kept = _drawn_utterances(cfg, random.Random(cfg.seed), split.train_splits)  # the same seeded draw, directly
    assert [u.text for u in split.held_utterances] == [u.text for u in held]
    _, reader_held = split_intents(ReaderTraining.hold_out, cfg.seed)
    assert ReaderTraining.hold_out == READER_HOLD_OUT
    assert len(pairs) == 40 and held and kept
    assert not {p[2] for p in pairs} & {u.text for u in held}
    assert not {p[1] for p in pairs} & set(reader_held)
    assert {p[0] for p in pairs} == {"clinc150", "banking77", "hwu64"}

    encoder, tokenizer, encoder_id = train_cli.load_encoder(str(source))
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: None)
    assert all(torch.equal(v, before[k]) for k, v in encoder.state_dict().items())  # the caller's is untouched
    tuned = result.model.encoder.state_dict()
    delta = result.tuned_encoder["delta"]
    moved = {k[len("encoder_delta."):].rsplit(".", 1)[0] if k.startswith("encoder_delta.") else k[len("encoder."):]
             for k in delta}
    assert moved == {k for k in before if not torch.equal(before[k], tuned[k])}
    assert any(k.startswith("embeddings.") for k in moved) and any(k.startswith("encoder.layer.") for k in moved)
    assert result.tuned_encoder["steps"] > 0 and "contrastively tuned on 40" in result.config["encoder"]
    # the head trained over exactly the encoder the delta gives once assembled over the wheel's
    from jevlaya_lab.decisions import encoder_delta

    rebuilt = dict(before)
    encoder_delta.apply(rebuilt, delta, prefix="")
    assert all(torch.equal(rebuilt[k], tuned[k]) for k in tuned)
    shipped = load_file(export_head(result, tmp_path / "head") / "head.safetensors")
    encoder_tensors = {k for k in shipped if k.startswith(("encoder.", "encoder_delta."))}
    assert encoder_tensors == set(delta) and all(torch.equal(shipped[k], delta[k]) for k in delta)
    assert all(shipped[k].dtype == torch.float16 for k in encoder_tensors
               if k.startswith("encoder_delta.") and not k.endswith(".index"))
    calibration = json.loads((tmp_path / "head" / "calibration.json").read_text())
    assert calibration["tuned_encoder"]["pairs"] == 40 and "delta" not in calibration["tuned_encoder"]
    model, _, _ = load_checkpoint(_save(result, tmp_path))
    assert all(torch.equal(v, tuned[k]) for k, v in model.encoder.state_dict().items())

    args = ["--encoder", str(source), "--data-dir", str(data), "--tune-encoder", "40", "--pool-cache",
            str(tmp_path / "pool"), "--out", str(tmp_path / "out")]
    assert train_cli.main(args) == 1
    assert "--pool-cache" in capsys.readouterr().err


def test_tune_keep_holds_the_runs_training_written_states_and_their_statements(tmp_path):
    """``tune_keep``: the tuning holds in place the written states the run trains on (wrapped as its
    rows wrap them) and their questions' option texts, never the written states it holds out; the run
    reports how far they drifted. Without tuning or written rows the option is refused."""
    from jevlaya_lab.decisions.training.trainer import _drawn_utterances, _written_split, keep_texts, run_split

    with pytest.raises(ValueError, match="tune_keep=-1"):
        TrainConfig(tune_keep=-1)
    with pytest.raises(ValueError, match="tune_keep=1.0: it holds the written training rows"):
        TrainConfig(tune_keep=1.0, written="en")
    with pytest.raises(ValueError, match="tune_keep=1.0: it holds the written training rows"):
        TrainConfig(tune_keep=1.0, tune_encoder=5)
    source = make_tiny_checkpoint(tmp_path / "tiny", seed=1)
    data = _tiny_datasets(tmp_path / "data")
    cfg = TrainConfig(**{**TINY, "n_synthetic": 0}, data_dir=str(data), tune_encoder=40, tune_keep=5.0,
                      written="en", written_copies=1)
    states, options = keep_texts(cfg, run_split(cfg))
    rng = random.Random(cfg.seed)
    _drawn_utterances(cfg, rng, run_split(cfg).train_splits)
    held, trained = _written_split(cfg, rng)
    shown = " ".join(json.dumps(s, ensure_ascii=False) for s in states)
    assert len(states) == len(trained) and held
    assert all(json.dumps(w.text, ensure_ascii=False)[1:-1] in shown for w in trained[:50])
    assert not any(json.dumps(w.text, ensure_ascii=False)[1:-1] in shown for w in held)
    assert any("spam" in o.lower() for o in options) and len(options) > 20

    encoder, tokenizer, encoder_id = train_cli.load_encoder(str(source))
    result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: None)
    tuned = result.tuned_encoder
    assert tuned["kept_texts"] == len(states) + len(options) and 0 < tuned["keep_drift"] < 1
