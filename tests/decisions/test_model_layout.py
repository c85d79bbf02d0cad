"""The DecisionModel's module layout and forward pass."""

from __future__ import annotations

import math

import pytest
import torch

from jevlaya_lab.decisions.encoding import encode_requests, length_groups
from jevlaya_lab.decisions.model import MASKED_LOGIT, DecisionModel, last_layer_at, option_features
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


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_last_layer_at_the_read_positions_equals_the_whole_layer_there(norm_first, activation):
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.1, activation=activation,
                                             batch_first=True, norm_first=norm_first).eval()
    hidden = torch.randn(3, 9, 32)
    padding = torch.arange(9)[None, :] >= torch.tensor([9, 6, 4])[:, None]
    positions = torch.tensor([[0, 2, 5], [0, 1, 3], [0, 3, 0]])
    with torch.inference_mode():
        whole = layer(hidden, src_key_padding_mask=padding)
        picked = last_layer_at(layer, hidden, positions, padding)
    expected = torch.gather(whole, 1, positions[:, :, None].expand(-1, -1, 32))
    torch.testing.assert_close(picked, expected, atol=1e-5, rtol=1e-5)


def test_eval_forward_reading_only_markers_matches_the_full_head(parts, questions):
    """Eval mode runs the last head layer at the read positions only; the reference here runs
    the stock head over every position and reads the same positions afterwards."""
    batch = encode_requests(parts.tokenizer, ["hello", "a refund please " * 5], questions,
                            max_len=96, head_max_len=64)
    model = parts.model.eval()
    with torch.inference_mode():
        pruned = model(batch)
        hidden = model.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        hidden = model.head(hidden + model.type_emb(batch.type_ids)[:, None, :],
                            src_key_padding_mask=batch.attention_mask == 0)
        markers = torch.gather(hidden, 1, batch.option_positions[:, :, None].expand(-1, -1, hidden.shape[-1]))
        logits = model.scorer(markers).squeeze(-1).masked_fill(~batch.option_mask, MASKED_LOGIT)
        act = model.act_head(torch.cat([hidden[:, 0], option_features(logits, batch.option_mask)], dim=-1))
    torch.testing.assert_close(pruned.option_logits, logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(pruned.act_logits, act, atol=1e-4, rtol=1e-4)


def test_length_groups_cover_every_row_once_with_little_padding():
    lengths = torch.tensor([70, 40, 71, 45, 69, 100, 41])
    groups = length_groups(lengths, slack=0.1)
    assert sorted(torch.cat(groups).tolist()) == list(range(7))
    assert [sorted(lengths[g].tolist()) for g in groups] == [[100], [69, 70, 71], [41, 45], [40]]
    for g in groups:
        longest = int(lengths[g].max())
        assert all(longest - n <= 0.1 * longest for n in lengths[g].tolist())
    assert [g.tolist() for g in length_groups(torch.tensor([5, 5, 5]))] == [[0, 1, 2]]


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
