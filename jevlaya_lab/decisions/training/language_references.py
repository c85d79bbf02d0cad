"""Reference states by language, for a multilingual checkpoint's unseen statements.

What they change at prediction time is in :mod:`jevlaya_lab.decisions.prior` ("Reference states by
language"). Here they are drawn: the hand-written training messages of the groups given (the
training command passes the checkpoint's groups but ``en``: English states keep reading the
checkpoint's own reference states, which are mostly English), told apart by
:func:`jevlaya_lab.decisions.detect.detect` (the same reading the prior gives a state at prediction
time, so a block holds what a state of that language looks like to it), up to ``per_language`` per
language in a seeded draw. A message whose language is undecided is left out,
and so is a language with fewer than :data:`~jevlaya_lab.decisions.prior.MIN_LANGUAGE_BLOCK`
messages. ``jevlaya-lab train --language-references N`` (``mini-multi``: 300) does this before the
fallback is fit, so the fallback is fit on the z-scores it will read.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import torch

from jevlaya_lab.decisions.encoding import row_tokenizer, tokenize_states
from jevlaya_lab.decisions.model import DecisionModel
from jevlaya_lab.decisions.prior import MIN_LANGUAGE_BLOCK, PRIOR_KEY
from jevlaya_lab.decisions.prior_inputs import PriorBuilder
from jevlaya_lab.decisions.training.written import load_written

__all__ = ["draw_language_references", "set_language_references"]


def draw_language_references(model: DecisionModel, tokenizer: Any, groups: Sequence[str], *, per_language: int,
                             seed: int = 0, max_len: int = 256) -> tuple[torch.Tensor, tuple[tuple[str, int], ...]]:
    """``(unit vectors [m, d], ((language, count), ...))``: the blocks, in language-code order."""
    from jevlaya_lab.decisions.detect import detect

    if isinstance(per_language, bool) or not isinstance(per_language, int) or per_language < MIN_LANGUAGE_BLOCK:
        raise ValueError(f"per_language={per_language!r}: must be an int >= {MIN_LANGUAGE_BLOCK} "
                         "(the smallest block kept)")
    by_language: dict[str, set[str]] = {}
    for written in load_written(tuple(groups)):
        language = detect(written.text)["language"]
        if language:
            by_language.setdefault(language, set()).add(written.text)
    rng = random.Random(seed)
    blocks: list[tuple[str, int]] = []
    texts: list[str] = []
    for language in sorted(by_language):
        drawn = sorted(by_language[language])
        rng.shuffle(drawn)
        drawn = drawn[:per_language]
        if len(drawn) >= MIN_LANGUAGE_BLOCK:
            blocks.append((language, len(drawn)))
            texts += drawn
    if not blocks:
        raise ValueError(f"no language has {MIN_LANGUAGE_BLOCK} hand-written messages in groups {list(groups)}; "
                         "pass --written with the groups to draw from, or --language-references 0")
    rows = row_tokenizer(tokenizer)
    vectors = PriorBuilder(model, rows).state_vectors(tokenize_states(rows, texts), max_len)
    return vectors, tuple(blocks)


def set_language_references(model: DecisionModel, config: dict[str, Any], vectors: torch.Tensor,
                            blocks: tuple[tuple[str, int], ...]) -> None:
    """Use the blocks in ``model``'s prior and record them in the checkpoint ``config``."""
    prior = model.prior
    assert prior is not None
    reference: torch.Tensor | None = prior.reference  # type: ignore[assignment]  # a registered buffer
    if reference is None:
        raise ValueError("language blocks refine the reference states: this prior has none (train it with --reference N)")
    prior.config = dataclasses.replace(prior.config, reference_languages=blocks)
    prior.language_reference = vectors.to(reference.device, reference.dtype)
    config[PRIOR_KEY] = prior.config.to_value()
