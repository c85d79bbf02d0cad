"""What a frozen checkpoint says about labelled states: the features a few-shot fit reads.

:func:`base_features` runs the Agent's own forward pass (its chunking, prior and reader, without
any adaptation) and returns each question's log-probabilities in caller order with the states'
pooled vectors; :func:`state_vectors` pools states for a checkpoint whose forward pass does not
(no similarity prior). :mod:`jevlaya_lab.decisions.adapt_fit` fits on these, and
:class:`~jevlaya_lab.decisions.adaptation.Adaptation` reads them again when it answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from jevlaya_lab.decisions.open_questions import answering
from jevlaya_lab.decisions.prior_inputs import pool_rows
from jevlaya_lab.decisions.questions import Question

Agent = Any
"""An :class:`~jevlaya_lab.decisions.agent.Agent` (not imported: the Agent imports the adapt modules)."""

LOG_FLOOR = -30.0
"""Base log-probabilities are floored here, so a saturated zero-shot answer stays finite to fit."""


def base_features(agent: Agent, states: Sequence[Any], parsed: tuple[Question, ...], *, vectors: bool = True,
                  parts: Sequence[Agent] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per question ``[n, k]`` log-probabilities (caller order, at the agent's temperatures) that
    the agent's checkpoint gives ``states`` without any adaptation, and per question the ``[n, d]``
    pooled state vectors (None unless ``vectors``). With an open part (:mod:`.open_questions`) each
    question's features come from the part that answers it: its own temperatures and its own
    encoder's vectors, which is what a correction reads when the adapted Agent answers. ``parts``:
    :func:`~.open_questions.answering` of ``parsed``, when the caller has it already."""
    parts = answering(agent, parsed) if parts is None else parts
    found: dict[Question, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for part in {id(p): p for p in parts}.values():
        questions = tuple(q for q, p in zip(parsed, parts) if p is part)
        lps, pooled = _head_features(part, states, questions, vectors=vectors)
        found.update({q: (lp, pooled) for q, lp in zip(questions, lps)})
    lps = [found[q][0] for q in parsed]
    if not vectors:
        return lps, None
    return lps, [v for q in parsed if (v := found[q][1]) is not None]  # each head pooled its states


def _head_features(agent: Agent, states: Sequence[Any], parsed: tuple[Question, ...],
                   *, vectors: bool = True) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """:func:`base_features` of one head (the agent's own, never routed): the vectors are one
    ``[n, d]`` tensor for all its questions."""
    from jevlaya_lab.decisions.encoding import tokenize_states

    max_len, head_max_len = agent._budgets()
    tokens = tokenize_states(agent._rows, list(states))
    per_question: list[list[torch.Tensor]] = [[] for _ in parsed]
    pooled: list[torch.Tensor] = []
    for _, batch, prior in agent._chunks(tokens, parsed, max_len, head_max_len):
        out = agent._forward(batch, prior)
        if out.state_vectors is not None:  # the prior's own pooled states: no second pass
            pooled.append(out.state_vectors.float().cpu())
        logits = out.option_logits.float().cpu()
        for j, q in enumerate(parsed):
            rows = logits[j::len(parsed), :q.n_options]
            temperature = agent.temperatures.get(q.type, q.n_options)
            lp = torch.log_softmax(rows / temperature, dim=-1).clamp_min(LOG_FLOOR)
            per_question[j].append(caller_order(q, lp))
    lps = [torch.cat(parts).double() for parts in per_question]
    if not vectors:
        return lps, None
    return lps, (torch.cat(pooled) if pooled else state_vectors(agent, tokens, max_len)).double()


def caller_order(q: Question, slot_values: torch.Tensor) -> torch.Tensor:
    """``[n, k]`` slot-order values -> caller order (``option_order[slot]`` is the caller index)."""
    out = torch.empty_like(slot_values)
    out[:, list(q.option_order)] = slot_values
    return out


def state_vectors(agent: Agent, tokens: Sequence[Any], max_len: int) -> torch.Tensor:
    """``[n, d]`` unit mean-pooled ``[CLS] state [SEP]`` vectors of tokenised states, for a
    checkpoint without a similarity prior (with one, the forward pass returns the prior's own:
    :attr:`DecisionOutput.state_vectors <jevlaya_lab.decisions.model.DecisionOutput.state_vectors>`)."""
    assert agent._prior is None, "a checkpoint with a prior pools its states in its forward pass"
    rows = agent._rows
    wrapped = [[rows.cls_id, *s.ids[:max(0, max_len - 2)], rows.sep_id] for s in tokens]
    return pool_rows(agent.decision_model, wrapped, rows.pad_id)
