"""Contrastive encoder tuning (``training.encoder_tuning``) on a tiny encoder: each variant trains
what it says, and training pulls an utterance toward its own option text."""

from __future__ import annotations

import copy

import pytest
import torch

from jevlaya_lab.decisions.testing import make_tiny_parts
from jevlaya_lab.decisions.training import encoder_tuning as tuning

TOPICS = {
    "pay": ("pay: money and a bill", ["pay my bill", "the bill is wrong", "money for the bill", "i paid twice"]),
    "log": ("log: a login to the app", ["i can not log in", "the app login fails", "login to the app", "app is down"]),
}


def _pairs() -> list[tuple[str, str, str, str]]:
    return [("toy", key, text, option) for key, (option, texts) in TOPICS.items() for text in texts]


def _margin(states: tuning.Pooler, options: tuning.Pooler) -> float:
    """Mean cosine of each utterance to its own option minus to the other one."""
    texts = [text for _, (_, ts) in TOPICS.items() for text in ts]
    own = torch.tensor([i for i, (_, ts) in enumerate(TOPICS.values()) for _ in ts])
    cos = states.states(texts) @ options.options([o for o, _ in TOPICS.values()]).T
    return (cos.gather(1, own[:, None]) - cos.gather(1, 1 - own[:, None])).mean().item()


@pytest.mark.parametrize("variant", tuning.VARIANTS)
def test_each_variant_trains_its_own_part_and_pulls_utterances_to_their_option(variant):
    parts = make_tiny_parts(seed=3, num_layers=3)
    base = parts.model.encoder
    base.requires_grad_(False)
    encoder = copy.deepcopy(base)
    untrained = tuning.Pooler(base, parts.tokenizer)
    before = _margin(untrained, untrained)
    frozen_before = [p.clone() for p in base.parameters()]
    stats = tuning.tune(encoder, parts.tokenizer, _pairs() * 16, variant=variant, seed=0, lr=1e-2, batch_size=8,
                       scale=20.0, max_seconds=60, frozen=base, log=lambda *a, **k: None)
    assert stats["steps"] == stats["planned_steps"] == 16 and not stats["stopped_by_time"]
    assert all(torch.equal(p, q) for p, q in zip(base.parameters(), frozen_before))  # the base is never trained
    moved = {name.split(".")[0] + "." + name.split(".")[1] if name.startswith("encoder.") else name.split(".")[0]
             for (name, p), q in zip(encoder.named_parameters(), base.parameters()) if not torch.equal(p, q)}
    if variant in ("top2", "layers"):
        assert moved == {"encoder.layer"} and all(
            torch.equal(p, q) for p, q in zip(encoder.embeddings.parameters(), base.embeddings.parameters()))
    else:
        assert "embeddings" in moved
    first_layer_moved = not all(torch.equal(p, q) for p, q in zip(encoder.encoder.layer[0].parameters(),
                                                                  base.encoder.layer[0].parameters()))
    assert first_layer_moved == (variant != "top2")
    assert not any(p.requires_grad for p in encoder.parameters()) and not encoder.training
    tuned = tuning.Pooler(encoder, parts.tokenizer)
    states = untrained if variant == "options" else tuned  # the options variant keeps every state vector
    assert _margin(states, tuned) > before + 0.1, (before, _margin(states, tuned))


def test_keep_holds_the_kept_texts_near_their_untuned_vectors_while_the_pairs_still_pull():
    """Feature distillation (``tune(keep=...)``): the same run with the written-like texts kept moves
    them less than without, and the pairs' margin still grows; a keep with nothing in it is refused."""
    parts = make_tiny_parts(seed=3, num_layers=3)
    base = parts.model.encoder
    base.requires_grad_(False)
    kept_states = [{"message": "the invoice is late and my manager is angry"}, {"message": "win a free prize now"},
                   {"message": "please reset my password before the audit"}, "spam spam buy now"]
    kept_options = ["The message is spam.", "urgent: needs an answer today"]
    untrained = tuning.Pooler(base, parts.tokenizer)
    before = _margin(untrained, untrained)
    old = torch.cat([untrained.states(kept_states), untrained.options(kept_options)])
    drift, margins = {}, {}
    for weight in (0.0, 50.0):
        encoder = copy.deepcopy(base)
        keep = {"states": kept_states, "options": kept_options, "weight": weight, "batch": 6}
        stats = tuning.tune(encoder, parts.tokenizer, _pairs() * 16, seed=0, lr=1e-2, batch_size=8, keep=keep,
                            log=lambda *a, **k: None)
        tuned = tuning.Pooler(encoder, parts.tokenizer)
        new = torch.cat([tuned.states(kept_states), tuned.options(kept_options)])
        drift[weight] = (1 - (new * old).sum(-1)).mean().item()
        assert stats["kept_texts"] == 6 and stats["keep_drift"] == pytest.approx(drift[weight], abs=1e-3)
        margins[weight] = _margin(tuned, tuned)
    assert drift[50.0] < drift[0.0] / 2, drift
    assert margins[50.0] > before + 0.05, (before, margins)
    with pytest.raises(ValueError, match="keep: no states and no options"):
        tuning.tune(copy.deepcopy(base), parts.tokenizer, _pairs(), keep={"states": [], "options": [], "weight": 1.0,
                                                                         "batch": 4}, log=lambda *a, **k: None)
