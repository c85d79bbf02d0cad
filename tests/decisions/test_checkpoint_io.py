"""Checkpoint directories: strict safetensors loading, sources, errors."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from jevlaya_lab.decisions.checkpoint import (
    CheckpointConfig,
    CheckpointError,
    CheckpointNotFoundError,
    load_checkpoint,
    save_checkpoint,
)
from jevlaya_lab.decisions.weights import write_safetensors
from jevlaya_lab.decisions.encoding import encode_requests
from jevlaya_lab.decisions.model import DecisionModel
from jevlaya_lab.decisions.testing import make_tiny_checkpoint, make_tiny_parts


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return make_tiny_checkpoint(tmp_path / "ckpt", seed=3)


def test_tiny_checkpoint_factory_writes_the_layout_well_under_a_second(tmp_path):
    make_tiny_checkpoint(tmp_path / "warm")  # imports happen on the first call
    started = time.perf_counter()
    path = make_tiny_checkpoint(tmp_path / "c", seed=5)
    assert time.perf_counter() - started < 1.0
    for rel in ("rl_agent_config.json", "model.safetensors", "tokenizer", "encoder/config.json"):
        assert (path / rel).exists(), rel


def test_tiny_checkpoint_is_seeded(tmp_path):
    a = load_file(make_tiny_checkpoint(tmp_path / "a", seed=1) / "model.safetensors")
    b = load_file(make_tiny_checkpoint(tmp_path / "b", seed=1) / "model.safetensors")
    c = load_file(make_tiny_checkpoint(tmp_path / "c", seed=2) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["scorer.3.weight"], c["scorer.3.weight"])


def test_save_then_load_gives_identical_weights_tokenizer_and_logits(tmp_path, questions):
    model, tokenizer, config = make_tiny_parts(seed=7)
    path = save_checkpoint(tmp_path / "rt", model, tokenizer, config)
    loaded, tok2, config2 = load_checkpoint(path)
    assert isinstance(loaded, DecisionModel) and not loaded.training
    assert config2 == config
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    batch = encode_requests(tokenizer, ["hello there"], questions, max_len=96, head_max_len=64)
    batch2 = encode_requests(tok2, ["hello there"], questions, max_len=96, head_max_len=64)
    assert torch.equal(batch.input_ids, batch2.input_ids)
    with torch.inference_mode():
        torch.testing.assert_close(model(batch).option_logits, loaded(batch2).option_logits)


def test_weights_are_safetensors_only_pickles_are_refused(ckpt):
    (ckpt / "model.safetensors").rename(ckpt / "pytorch_model.bin")
    with pytest.raises(CheckpointNotFoundError, match="model.safetensors is missing.*never loaded"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("rel", ["rl_agent_config.json", "encoder/config.json", "tokenizer"])
def test_missing_files_name_the_file(ckpt, rel):
    target = ckpt / rel
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(CheckpointNotFoundError, match=rel.split("/")[-1]):
        load_checkpoint(ckpt)


def test_missing_tensor_group_names_the_tensors(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if not k.startswith("scorer.")}, ckpt / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensors \['scorer\.0\.bias'"):
        load_checkpoint(ckpt)


def test_shape_mismatch_names_the_tensor(ckpt):
    config = json.loads((ckpt / "rl_agent_config.json").read_text())
    config["act_costs"] = [1.0, 2.0, 3.0]
    (ckpt / "rl_agent_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"tensor act_head\.2\.(weight|bias) has shape \(2(, 256)?,?\) but the config gives \(4"):
        load_checkpoint(ckpt)


def test_unexpected_tensors_are_an_error(ckpt):
    config = json.loads((ckpt / "rl_agent_config.json").read_text())
    config["head_layers"] = 0
    (ckpt / "rl_agent_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"unexpected tensors \['head\.layers\.0"):
        load_checkpoint(ckpt)


def test_pooler_and_legacy_position_ids_in_the_file_are_tolerated(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    tensors["encoder.embeddings.position_ids"] = torch.arange(128)[None]
    save_file(tensors, ckpt / "model.safetensors")
    model, _, _ = load_checkpoint(ckpt)
    assert model.encoder.pooler is None


@pytest.mark.parametrize(("key", "value"), [("head_layers", -1), ("max_len", "512"),
                                              ("act_costs", "cheap"), ("amp_dtype", 16),
                                              ("temperature", [1.0, 1.0]), ("head_activation", "tanh"),
                                              ("option_layout", "diagonal")])
def test_bad_config_values_name_the_key_and_value(ckpt, key, value):
    config = json.loads((ckpt / "rl_agent_config.json").read_text())
    config[key] = value
    (ckpt / "rl_agent_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=re.escape(f"{key} = {value!r} is invalid")):
        load_checkpoint(ckpt)


def test_unknown_config_keys_survive_a_round_trip(tmp_path):
    config = CheckpointConfig.from_dict({"head_layers": 1, "act_costs": [1.0], "trained_on": "x"})
    assert config.extra == {"trained_on": "x"}
    assert config.to_dict()["trained_on"] == "x"
    model, tok, _ = make_tiny_parts()
    save_checkpoint(tmp_path / "k", model, tok, config)
    assert json.loads((tmp_path / "k" / "rl_agent_config.json").read_text())["trained_on"] == "x"


def test_bundle_subfolder_source(tmp_path):
    make_tiny_checkpoint(tmp_path / "bundle" / "english", seed=1)
    model, _, config = load_checkpoint((str(tmp_path / "bundle"), "english"))
    assert config.head_layers == 1 and isinstance(model, DecisionModel)


def test_hub_id_offline_fails_fast_naming_the_local_alternatives(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    started = time.perf_counter()
    with pytest.raises(CheckpointNotFoundError) as info:
        load_checkpoint("some-org/laya-checkpoint")
    assert time.perf_counter() - started < 5
    message = str(info.value)
    assert "'some-org/laya-checkpoint'" in message and "HF_HUB_OFFLINE" in message
    assert "mini-en" in message and "directory" in message


def test_hub_repo_with_subfolder_offline_names_the_subfolder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    with pytest.raises(CheckpointNotFoundError, match="subfolder 'english'"):
        load_checkpoint(("some-org/laya-bundle", "english"))


def test_a_path_that_is_neither_dir_nor_hub_id_is_not_found(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint directory"):
        load_checkpoint(str(tmp_path / "nope" / "deeper" / "x"))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(CheckpointNotFoundError, match="is a file"):
        load_checkpoint(tmp_path / "file.txt")


def test_source_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="source must be"):
        load_checkpoint(42)
    with pytest.raises(TypeError, match=r"\(directory_or_repo, subfolder\)"):
        load_checkpoint(("a", "b", "c"))


def test_registered_names_and_aliases_of_the_default_registry_resolve(monkeypatch, tiny_checkpoint_dir):
    from jevlaya_lab.decisions import registry

    monkeypatch.setitem(registry.DEFAULT_MODELS, "tiny-test",
                        {"source": str(tiny_checkpoint_dir), "aliases": ("tt",)})
    model, _, config = load_checkpoint("TT")  # aliases match case-insensitively
    assert isinstance(model, DecisionModel) and config.head_layers == 1


def test_unknown_name_lists_the_bundled_alternatives():
    with pytest.raises(CheckpointNotFoundError, match=r"'english' \(alias 'en', 'mini-en'\)"):
        load_checkpoint("englsh")


def test_half_precision_weights_load_into_a_float32_model(ckpt, questions):
    from jevlaya_lab.decisions.agent import Agent

    tensors = load_file(ckpt / "model.safetensors")
    save_file({k: v.half() if v.is_floating_point() else v for k, v in tensors.items()},
              ckpt / "model.safetensors")
    model, tokenizer, config = load_checkpoint(ckpt)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    result = Agent((model, tokenizer, config)).predict("hello", questions)
    assert set(result["answers"]) == set(questions)


# ---------------------------------------------------------------- the keys Laya 0.4.15 reads or writes
def test_a_laya_config_with_an_act_costs_mapping_loads_and_round_trips(ckpt, tmp_path, caplog):
    config = json.loads((ckpt / "rl_agent_config.json").read_text())
    config.update(act_costs={"escalate": 0.5}, cost_wrong_act=1.0, amp_dtype="bf16",
                  option_layout="sequential", training={"epochs": 4, "seed": 0}, made_by="someone")
    (ckpt / "rl_agent_config.json").write_text(json.dumps(config))
    with caplog.at_level("DEBUG", logger="jevlaya_lab.decisions"):
        model, tok, loaded = load_checkpoint(ckpt)
    assert "made_by" in caplog.text  # unknown keys: a debug log, never an error
    assert loaded.n_act == model.n_act == 2  # len(act_costs) + 1, as in Laya
    assert loaded.autocast_dtype == "bfloat16" and loaded.extra == {"made_by": "someone"}
    save_checkpoint(tmp_path / "again", model, tok, loaded)
    written = json.loads((tmp_path / "again" / "rl_agent_config.json").read_text())
    for key in ("act_costs", "cost_wrong_act", "amp_dtype", "option_layout", "training", "made_by"):
        assert written[key] == config[key], key


def test_amp_dtype_reads_as_laya_reads_it():
    read = {value: CheckpointConfig(amp_dtype=value).autocast_dtype
            for value in (None, "fp16", "bf16", "bfloat16", "float32", "whatever")}
    assert read == {None: "float16", "fp16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16",
                    "float32": "float16", "whatever": "float16"}


def test_the_parallel_option_layout_is_refused_with_the_reason(ckpt):
    config = json.loads((ckpt / "rl_agent_config.json").read_text())
    (ckpt / "rl_agent_config.json").write_text(json.dumps({**config, "option_layout": "parallel"}))
    with pytest.raises(CheckpointError, match="option_layout = 'parallel' is invalid; the parallel"):
        load_checkpoint(ckpt)


def test_head_activation_is_a_declared_key_relu_by_default(tmp_path):
    relu = make_tiny_parts(head_layers=1)
    assert relu.config.head_activation == "relu" and relu.model.head.layers[0].activation_relu_or_gelu == 1
    model, tok, config = relu
    config.head_activation = "gelu"
    gelu = DecisionModel(model.encoder, head_layers=1, n_act=2, activation="gelu")
    gelu.load_state_dict(model.state_dict())
    path = save_checkpoint(tmp_path / "g", gelu, tok, config)
    assert json.loads((path / "rl_agent_config.json").read_text())["head_activation"] == "gelu"
    loaded = load_checkpoint(path).model
    assert loaded.activation == "gelu" and loaded.head.layers[0].activation_relu_or_gelu == 2
    batch = encode_requests(tok, ["hello there"], {"q": {"type": "noul", "instructions": "hi"}},
                            max_len=64, head_max_len=32)
    with torch.inference_mode():
        same = torch.allclose(loaded(batch).option_logits, gelu.eval()(batch).option_logits)
        differs = not torch.allclose(model(batch).option_logits, gelu(batch).option_logits)
    assert same and differs


def test_bundled_heads_declare_the_activation_they_were_trained_with():
    """The trainer writes the activation of the model it trained (the Laya default, relu)."""
    from jevlaya_lab.decisions.bundled import BUNDLED, HEADS_DIR

    configs = sorted(HEADS_DIR.glob("*/config.json"))
    assert [c.parent.name for c in configs] == sorted(BUNDLED)  # an empty glob must not pass
    for config in configs:
        assert json.loads(config.read_text())["head_activation"] == "relu", config


def test_transformers5_rope_fields_map_to_the_4x_attributes():
    from jevlaya_lab.decisions.checkpoint import rope_fields_for_4x

    assert rope_fields_for_4x({"rope_theta": 10000.0}) == {}
    assert rope_fields_for_4x({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}) == {
        "rope_theta": 5e5}
    assert rope_fields_for_4x({"rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                   "rope_theta": 1e4}}) == {
        "rope_theta": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    modernbert = {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
    assert rope_fields_for_4x(modernbert) == {"global_rope_theta": 160000.0, "local_rope_theta": 10000.0}


# ---------------------------------------------------------------- laya's loading keywords
def test_subfolder_and_expected_sha256_as_laya(tmp_path):
    import hashlib

    from jevlaya_lab.decisions.agent import load

    make_tiny_checkpoint(tmp_path / "bundle" / "inner", seed=2)
    weights = tmp_path / "bundle" / "inner" / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    agent = load(tmp_path / "bundle", subfolder="inner", expected_sha256={"model.safetensors": digest})
    assert agent.model_id.endswith("bundle/inner")
    with pytest.raises(CheckpointError, match=f"SHA-256 is {digest}, expected 0+; the file is not"):
        load(tmp_path / "bundle", subfolder="inner", expected_sha256={"model.safetensors": "0" * 64})
    with pytest.raises(CheckpointNotFoundError, match="expected_sha256 names 'nope.bin'"):
        load_checkpoint((tmp_path / "bundle", "inner"), expected_sha256={"nope.bin": "0" * 64})
    with pytest.raises(TypeError, match="expected_sha256 must be a dict"):
        load_checkpoint(tmp_path / "bundle" / "inner", expected_sha256=digest)


def test_router_register_keeps_laya_load_options_out_of_reprs(tmp_path):
    import hashlib

    from jevlaya_lab.decisions.router import Router

    make_tiny_checkpoint(tmp_path / "bundle" / "inner", seed=2)
    digest = hashlib.sha256((tmp_path / "bundle" / "inner" / "model.safetensors").read_bytes()).hexdigest()
    router = Router({"tiny": tmp_path / "bundle" / "inner"}, device="cpu")
    entry = router.register("pinned", str(tmp_path / "bundle"), subfolder="inner", token="hf_secret_token",
                            expected_sha256={"model.safetensors": digest})
    assert entry.source == (str(tmp_path / "bundle"), "inner") and "hf_secret_token" not in repr(entry)
    assert router.load("pinned").decision_model is not None
    router.register("tampered", str(tmp_path / "bundle"), subfolder="inner",
                    expected_sha256={"model.safetensors": "0" * 64})
    with pytest.raises(CheckpointError, match="SHA-256"):
        router.load("tampered")


def test_loading_leaves_no_meta_tensor_and_keeps_unsaved_buffers(ckpt):
    """Weights are built empty (meta) and replaced from the file; buffers the file does not hold
    (BERT's position ids) are built for real."""
    model, _, _ = load_checkpoint(ckpt)
    tensors = [*model.parameters(), *model.buffers()]
    assert not any(t.is_meta for t in tensors) and all(torch.isfinite(t.float()).all() for t in tensors)
    position_ids = model.encoder.embeddings.position_ids
    assert torch.equal(position_ids[0], torch.arange(position_ids.shape[-1]))


def test_concurrent_loads_in_threads_give_identical_finite_weights_and_leave_other_models_alone(tmp_path):
    """Six threads load one checkpoint while two others build tiny models: every load equals the
    file, every model built meanwhile is initialised and finite, and models built afterwards
    equal the same seeds built before (the empty-weight mode of a load is thread-local; a
    process-wide patch of torch.nn.init once left later models with NaN weights)."""
    import threading

    path = make_tiny_checkpoint(tmp_path / "ckpt", seed=5, hidden_size=64, num_layers=2)
    expected = load_file(str(path / "model.safetensors"))
    alone = {seed: make_tiny_parts(seed=seed).model.state_dict() for seed in (1, 2)}
    loaded, built, errors = [], [], []
    start = threading.Barrier(8)

    def load() -> None:
        try:
            start.wait()
            for _ in range(3):
                loaded.append(load_checkpoint(path).model.state_dict())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def build(seed: int) -> None:
        try:
            start.wait()
            for _ in range(6):
                built.append((seed, make_tiny_parts(seed=seed).model.state_dict()))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(6)]
    threads += [threading.Thread(target=build, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(loaded) == 18 and len(built) == 12
    for state in loaded:
        for name, tensor in expected.items():
            if name in state:
                assert torch.equal(state[name], tensor), name
        assert all(not t.is_meta and torch.isfinite(t.float()).all() for t in state.values())
    for _, state in built:  # torch's one RNG interleaves the draws of concurrent builds
        for name, tensor in state.items():
            assert not tensor.is_meta and torch.isfinite(tensor.float()).all(), name
            if name.endswith("weight") and tensor.dim() == 2:
                assert tensor.float().std() > 0, name  # initialised, not left empty
    for seed in (1, 2):  # built after the loads, alone: exactly the seeded weights
        for name, tensor in make_tiny_parts(seed=seed).model.state_dict().items():
            assert torch.equal(tensor, alone[seed][name]), (seed, name)


def test_write_safetensors_streams_a_file_safetensors_reads_back_exactly(tmp_path):
    tensors = {"w": torch.randn(3, 4), "ids": torch.arange(5), "half": torch.randn(2, 2).half(),
               "flags": torch.tensor([True, False]), "empty": torch.zeros(0, 3),
               "bf": torch.randn(4).bfloat16(), "transposed": torch.randn(4, 3).t()}
    write_safetensors(tensors, tmp_path / "x.safetensors", {"format": "pt"})
    back = load_file(tmp_path / "x.safetensors")
    assert back.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    with pytest.raises(CheckpointError, match="complex64"):
        write_safetensors({"c": torch.zeros(2, dtype=torch.complex64)}, tmp_path / "c.safetensors", {})
