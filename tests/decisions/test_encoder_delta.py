"""``encoder_delta``: a tuned encoder as its change of the wheel's — exact where the change fits the
form (rank, rows), the largest part of it where it does not, and refused where it does not fit."""

from __future__ import annotations

import pytest
import torch

from jevlaya_lab.decisions import encoder_delta as ed
from jevlaya_lab.decisions.errors import CheckpointError


def _encoders() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    base = {"layer.w": torch.randn(40, 24, generator=gen), "layer.b": torch.randn(40, generator=gen),
            "embeddings.word.weight": torch.randn(100, 24, generator=gen), "small.w": torch.randn(4, 4, generator=gen)}
    tuned = {k: v.clone() for k, v in base.items()}
    tuned["layer.w"] += 0.1 * torch.randn(40, 3, generator=gen) @ torch.randn(3, 24, generator=gen)
    tuned["layer.b"] += 0.01
    tuned["embeddings.word.weight"][[3, 50, 99]] += 0.2 * torch.randn(3, 24, generator=gen)
    tuned["small.w"] += 0.5
    return base, tuned


def test_a_change_of_rank_r_and_n_moved_rows_is_carried_exactly_up_to_fp16():
    base, tuned = _encoders()
    delta = ed.compress(base, tuned, list(tuned), rank=3, rows=3)
    assert delta["encoder_delta.layer.w.up"].shape == (40, 3) and delta["encoder_delta.layer.w.down"].shape == (3, 24)
    assert delta["encoder_delta.embeddings.word.weight.index"].tolist() == [3, 50, 99]
    assert {"encoder.layer.b", "encoder.small.w"} <= set(delta)  # 1-D, and a matrix too small for rank 3
    assert all(v.dtype == torch.float16 for k, v in delta.items() if k.startswith("encoder_delta.")
               and not k.endswith(".index"))
    assert delta["encoder.layer.b"].dtype == torch.float32  # whole tensors keep their dtype
    assert ed.size_bytes(delta) < sum(v.numel() * 2 for v in tuned.values())
    got = {k: v.clone() for k, v in base.items()}
    ed.apply(got, delta, prefix="")
    for key in tuned:
        assert torch.allclose(got[key], tuned[key], atol=2e-3), key
    shared = dict(base)
    before = base["layer.w"].clone()
    ed.apply(shared, delta, prefix="")
    assert torch.equal(base["layer.w"], before)  # the tensors handed in are never written in place


def test_a_smaller_rank_or_fewer_rows_keeps_the_largest_part_of_the_change():
    base, tuned = _encoders()
    full = tuned["layer.w"] - base["layer.w"]
    got = dict(base)
    ed.apply(got, ed.compress(base, tuned, ["layer.w", "embeddings.word.weight"], rank=1, rows=1), prefix="")
    left = (tuned["layer.w"] - got["layer.w"]).norm()
    assert 0 < left < full.norm()
    moved = (got["embeddings.word.weight"] - base["embeddings.word.weight"]).norm(dim=1)
    change = (tuned["embeddings.word.weight"] - base["embeddings.word.weight"]).norm(dim=1)
    assert moved.nonzero().flatten().tolist() == [int(change.argmax())]


def test_a_delta_that_does_not_fit_its_encoder_is_refused_naming_the_tensor():
    base, tuned = _encoders()
    delta = ed.compress(base, tuned, ["layer.w", "embeddings.word.weight"], rank=3, rows=3)
    with pytest.raises(CheckpointError, match="encoder has no tensor 'x\\."):
        ed.apply(dict(base), delta, prefix="x.")
    bad = {**delta, "encoder_delta.layer.w.down": delta["encoder_delta.layer.w.down"][:, :5]}
    with pytest.raises(CheckpointError, match="layer.w: up .* does not give the shape"):
        ed.apply(dict(base), bad, prefix="")
    bad = {**delta, "encoder_delta.embeddings.word.weight.index": torch.tensor([3, 50, 100])}
    with pytest.raises(CheckpointError, match="do not fit"):
        ed.apply(dict(base), bad, prefix="")
    with pytest.raises(CheckpointError, match="has parts \\['up'\\]"):
        ed.apply(dict(base), {"encoder_delta.layer.w.up": delta["encoder_delta.layer.w.up"]}, prefix="")
    with pytest.raises(CheckpointError, match="must end with one of"):
        ed.apply(dict(base), {"encoder_delta.layer.w.sideways": torch.zeros(1)}, prefix="")
    with pytest.raises(CheckpointError, match="shape \\(3,\\) replaces"):
        ed.apply(dict(base), {"encoder.layer.b": torch.zeros(3)}, prefix="")
    with pytest.raises(ValueError, match="names: 'nope' is not a tensor of both encoders"):
        ed.compress(base, tuned, ["nope"])
