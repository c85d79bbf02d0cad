"""The DecisionModel's module layout and forward pass (spec §2 "Module layout")."""

from __future__ import annotations

import math

import pytest
import torch

from jevlaya_lab.decisions.encoding import encode_requests
from jevlaya_lab.decisions.model import MASKED_LOGIT, DecisionModel, option_features
from jevlaya_lab.decisions.testing import make_tiny_parts


@pytest.fixture(scope="module")
def parts():
    return make_tiny_parts(seed=0, hidden_size=128, num_heads=2, head_layers=2, act_costs=(1.0, 2.0))


def test_tensor_names_match_the_laya_layout(parts):
    names = set(parts.model.state_dict())
    for name in [
        "type_emb.weight",
        "head.layers.0.self_attn.in_proj_weight",
        "head.layers.0.self_attn.out_proj.weight",
        "head.layers.1.linear1.weight",
        "head.layers.1.linear2.bias",
        "head.layers.1.norm1.weight",
        "head.layers.1.norm2.bias",
        "scorer.0.weight", "scorer.1.weight", "scorer.3.weight", "scorer.3.bias",
        "act_head.0.weight", "act_head.2.weight",
        "temperature",
        "encoder.embeddings.word_embeddings.weight",
    ]:
        assert name in names, name
    assert not any(n.startswith("head.norm") for n in names)


def test_shapes_follow_hidden_size_heads_and_act_costs(parts):
    model = parts.model
    d = 128
    assert model.head.layers[0].self_attn.num_heads == max(1, d // 64) == 2
    assert model.head.layers[0].linear1.out_features == 4 * d
    assert model.head.layers[0].norm_first is True
    assert model.type_emb.weight.shape == (3, d)
    assert model.act_head[0].in_features == d + 4 and model.act_head[0].out_features == 256
    assert model.n_act == 3  # len(act_costs) + 1
    assert model.temperature.shape == (3,)


def test_forward_returns_one_logit_per_option_with_padding_masked(parts, questions):
    batch = encode_requests(parts.tokenizer, ["hello", "a refund please"], questions,
                            max_len=96, head_max_len=64)
    with torch.inference_mode():
        out = parts.model(batch)
    assert out.option_logits.shape == (6, 3)
    assert out.act_logits.shape == (6, 3)
    noul_rows = out.option_logits[[2, 5]]
    assert (noul_rows[:, 2] == MASKED_LOGIT).all()
    assert torch.isfinite(out.option_logits).all()


def test_padding_does_not_change_a_rows_logits(parts, questions):
    with torch.inference_mode():
        alone = parts.model(encode_requests(parts.tokenizer, ["hi"], questions, max_len=96,
                                            head_max_len=64))
        padded = parts.model(encode_requests(parts.tokenizer, ["hi", "word " * 40], questions,
                                             max_len=96, head_max_len=64))
    torch.testing.assert_close(alone.option_logits, padded.option_logits[:3], atol=1e-4, rtol=1e-4)


def test_act_features_top1_margin_normalised_entropy_and_k():
    logits = torch.tensor([[0.0, 0.0, MASKED_LOGIT], [5.0, MASKED_LOGIT, MASKED_LOGIT]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    feats = option_features(logits, mask)
    torch.testing.assert_close(feats[0], torch.tensor([0.5, 0.0, 1.0, 2 / 255]))
    torch.testing.assert_close(feats[1], torch.tensor([1.0, 1.0, 0.0, 1 / 255]))
    assert math.isclose(feats[0, 2].item(), 1.0)


def test_bad_head_arguments_raise_value_error(parts):
    with pytest.raises(ValueError, match="head_layers"):
        DecisionModel(parts.model.encoder, head_layers=-1, n_act=2)
    with pytest.raises(ValueError, match="n_act"):
        DecisionModel(parts.model.encoder, head_layers=1, n_act=0)


def test_act_features_have_finite_gradients_at_masked_option_slots():
    """Training the act head through option_features must not produce NaN (masked slots are p=0)."""
    import torch

    from jevlaya_lab.decisions.model import option_features

    logits = torch.tensor([[2.0, 1.0, -1e4, -1e4], [0.5, 0.1, 0.3, -1e4]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    features = option_features(logits, mask)
    features.sum().backward()
    assert torch.isfinite(features).all() and torch.isfinite(logits.grad).all()
    probs = torch.softmax(logits.detach(), dim=-1) * mask
    expected = -(probs[1, :3] * probs[1, :3].log()).sum() / torch.log(torch.tensor(3.0))
    assert abs(features[1, 2].item() - expected.item()) < 1e-5
