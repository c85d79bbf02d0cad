"""The decision network: a transformers encoder plus a small head that scores option markers.

The module layout (and so every tensor name) follows the public Laya checkpoint
layout, so their checkpoints load strictly: ``encoder``, ``type_emb``, ``head``
(stock ``nn.TransformerEncoder``), ``scorer``, ``act_head`` and the ``temperature`` buffer.
Only the forward pass lives here; temperatures and answers are applied in
:mod:`jevlaya_lab.decisions.calibration` and :mod:`jevlaya_lab.decisions.agent`. A checkpoint
that declares a ``similarity_prior`` also gets a ``prior`` module (:mod:`.prior`) whose logits
are added to the scorer's (and, when the prior declares a ``reader``, a ``reader`` module,
:mod:`.statement_reader`, for unseen yes/no statements and choice options); without it the forward pass is the Laya
one, unchanged.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from jevlaya_lab.decisions.prior import PriorConfig, SimilarityPrior, mean_pool
from jevlaya_lab.decisions.prior_inputs import PriorInputs
from jevlaya_lab.decisions.statement_reader import StatementReader

MASKED_LOGIT = -1e4
N_TYPES = 3
ACT_HIDDEN = 256
ACT_FEATURES = 4


class DecisionOutput(NamedTuple):
    """Raw outputs of one forward pass."""

    option_logits: torch.Tensor
    """``[rows, max_k]`` one logit per option slot; padded slots are ``-1e4``."""
    act_logits: torch.Tensor
    """``[rows, n_act]``; ``softmax(...)[:, 0]`` is the act probability."""
    state_vectors: torch.Tensor | None = None
    """``[states, d]`` the unit pooled state vectors the similarity prior read, in the order of
    :attr:`PriorInputs.state_ids <jevlaya_lab.decisions.prior_inputs.PriorInputs.state_ids>`; None
    for a model without a prior. Few-shot corrections read them instead of pooling again."""


def option_features(option_logits: torch.Tensor, option_mask: torch.Tensor) -> torch.Tensor:
    """The act head's four confidence features of the untempered option softmax.

    top-1 p, top-1 - top-2 (0 for top-2 with one option), entropy / ln k (k at least 2), k / 255.
    """
    probs = torch.softmax(option_logits.float(), dim=-1) * option_mask
    k = option_mask.sum(dim=-1).float()
    top = torch.topk(probs, k=min(2, probs.shape[-1]), dim=-1).values
    top1 = top[:, 0]
    top2 = top[:, 1] if top.shape[-1] > 1 else torch.zeros_like(top1)
    # p·log p with log clamped: 0 at masked slots in the forward pass *and* a finite gradient
    # there (xlogy's gradient at 0 is -inf, which turns into NaN when training the act head)
    entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(dim=-1)
    norm_entropy = entropy / torch.log(k.clamp(min=2.0))
    return torch.stack([top1, top1 - top2, norm_entropy, k / 255.0], dim=-1)


def last_layer_at(layer: nn.TransformerEncoderLayer, hidden: torch.Tensor, positions: torch.Tensor,
                  padding: torch.Tensor) -> torch.Tensor:
    """``layer(hidden)`` at ``positions`` only (``[rows, p]`` indices), in eval mode.

    Every position still serves as a key and value, but queries, the attention output and the
    feed-forward are computed for the ``p`` positions read afterwards (the option markers and
    the first token) instead of the whole row: the same numbers as the full layer, at about a
    tenth of its cost for rows of ~70 tokens. Dropout is left out, as in eval mode.
    """
    index = positions[:, :, None].expand(-1, -1, hidden.shape[-1])
    picked = torch.gather(hidden, 1, index)
    attend = layer.self_attn
    if layer.norm_first:
        normed = layer.norm1(hidden)
        x = picked + attend(torch.gather(normed, 1, index), normed, normed, key_padding_mask=padding,
                            need_weights=False)[0]
        out: torch.Tensor = x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))
        return out
    x = layer.norm1(picked + attend(picked, hidden, hidden, key_padding_mask=padding, need_weights=False)[0])
    out = layer.norm2(x + layer.linear2(layer.activation(layer.linear1(x))))
    return out


class DecisionModel(nn.Module):
    """Encoder + typed head: one logit per option marker and an act distribution per row.

    ``encoder`` is any transformers base model returning ``last_hidden_state``; the head has
    ``head_layers`` pre-norm transformer layers with ``max(1, d // 64)`` heads and a ``4d``
    feed-forward, and ``n_act = len(act_costs) + 1`` act logits. ``activation`` is the head
    layers' feed-forward activation: ``"relu"`` (torch's default, what Laya checkpoints use) or
    ``"gelu"`` (what the bundled heads were trained with); the config key ``head_activation``.
    ``open_model`` is a checkpoint's open part (:mod:`.open_questions`), or None.
    """

    def __init__(self, encoder: nn.Module, *, head_layers: int, n_act: int,
                 activation: str = "relu", prior: PriorConfig | None = None,
                 open_model: DecisionModel | None = None) -> None:
        super().__init__()
        if isinstance(head_layers, bool) or not isinstance(head_layers, int) or head_layers < 0:
            raise ValueError(f"head_layers must be an int >= 0, got {head_layers!r}")
        if isinstance(n_act, bool) or not isinstance(n_act, int) or n_act < 1:
            raise ValueError(f"n_act must be an int >= 1 (len(act_costs) + 1), got {n_act!r}")
        config: Any = encoder.config  # a transformers config (nn.Module types attributes as tensors)
        d = int(config.hidden_size)
        self.activation = activation
        self.encoder = encoder
        self.type_emb = nn.Embedding(N_TYPES, d)
        layer = nn.TransformerEncoderLayer(
            d_model=d, nhead=max(1, d // 64), dim_feedforward=4 * d, activation=activation,
            batch_first=True, norm_first=True,
        )
        self.head = nn.TransformerEncoder(layer, num_layers=head_layers, enable_nested_tensor=False)
        self.scorer = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))
        self.act_head = nn.Sequential(
            nn.Linear(d + ACT_FEATURES, ACT_HIDDEN), nn.GELU(), nn.Linear(ACT_HIDDEN, n_act)
        )
        self.register_buffer("temperature", torch.ones(N_TYPES))
        self.prior = SimilarityPrior(d, prior) if prior is not None else None
        self.reader = (StatementReader(encoder, prior.reader)
                       if prior is not None and prior.reader is not None else None)
        self.open_model = open_model
        """The open part, which answers the questions this head was not trained on
        (:mod:`.open_questions`; its tensors are ``open_model.*``); None without one. The forward
        pass never reads it: the Agent routes each question to one of the two."""

    @property
    def hidden_size(self) -> int:
        return self.type_emb.embedding_dim

    @property
    def head_layers(self) -> int:
        return len(self.head.layers)

    @property
    def n_act(self) -> int:
        last: Any = self.act_head[-1]
        return int(last.out_features)

    def pool(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Unit mean-pooled encoder vectors of whole texts (the similarity prior's view)."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return mean_pool(hidden, attention_mask)

    def forward(self, batch: Any, prior: PriorInputs | None = None) -> DecisionOutput:
        """Score a batch with ``input_ids``, ``attention_mask``, ``type_ids``,
        ``option_positions`` and ``option_mask`` (an :class:`~jevlaya_lab.decisions.encoding.EncodedBatch`).

        ``prior`` is required exactly when the model has a similarity prior."""
        if (prior is None) != (self.prior is None):
            raise ValueError("this model " + ("has a similarity prior: pass its PriorInputs"
                                              if prior is None else "has no similarity prior: pass prior=None"))
        if self.prior is not None and prior is not None and not self.prior.config.joint_head:
            return self._prior_only(batch, prior)
        attention_mask = batch.attention_mask
        hidden = self.encoder(input_ids=batch.input_ids, attention_mask=attention_mask).last_hidden_state
        hidden = hidden + self.type_emb(batch.type_ids)[:, None, :].to(hidden.dtype)
        # the scorer reads the option markers and the act head the first position, nothing else
        read = torch.cat([torch.zeros_like(batch.option_positions[:, :1]), batch.option_positions], dim=1)
        if self.head_layers and not self.training:
            padding = attention_mask == 0
            for layer in self.head.layers[:-1]:
                hidden = layer(hidden, src_key_padding_mask=padding)
            hidden = last_layer_at(self.head.layers[-1], hidden, read, padding)
        else:
            if self.head_layers:
                hidden = self.head(hidden, src_key_padding_mask=attention_mask == 0)
            hidden = torch.gather(hidden, 1, read[:, :, None].expand(-1, -1, hidden.shape[-1]))
        markers = hidden[:, 1:]
        logits = self.scorer(markers).squeeze(-1).float()
        pooled = None
        if self.prior is not None and prior is not None:
            prior_logits, pooled = self._prior_logits(batch, prior)
            logits = logits + prior_logits
        logits = logits.masked_fill(~batch.option_mask, MASKED_LOGIT)
        features = option_features(logits, batch.option_mask).to(hidden.dtype)
        act_logits = self.act_head(torch.cat([hidden[:, 0], features], dim=-1)).float()
        return DecisionOutput(logits, act_logits, pooled)

    def _prior_logits(self, batch: Any, prior: PriorInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """The prior's ``[rows, max_k]`` logits and the ``[states, d]`` pooled states it read."""
        assert self.prior is not None
        pooled = self.pool(prior.state_ids, prior.state_mask)
        states = pooled[prior.row_state]
        read = None
        if self.reader is not None and len(prior.pair_row):
            read = (prior.pair_row, prior.pair_slot,
                    self.reader(self.encoder, prior.pair_ids, prior.pair_types, prior.pair_mask),
                    prior.pair_center, prior.pair_spread)
        logits: torch.Tensor = self.prior(states, prior.option_vectors, batch.type_ids, prior.true_slot,
                                          prior.gate, (prior.center, prior.spread), read,
                                          (prior.local_center, prior.local_spread))
        return logits, pooled

    def _prior_only(self, batch: Any, prior: PriorInputs) -> DecisionOutput:
        """``joint_head: false``: the prior's logits, the act head on a zero first-position vector."""
        logits, pooled = self._prior_logits(batch, prior)
        logits = logits.masked_fill(~batch.option_mask, MASKED_LOGIT)
        features = option_features(logits, batch.option_mask)
        first = torch.zeros((logits.shape[0], self.hidden_size), dtype=features.dtype, device=features.device)
        return DecisionOutput(logits, self.act_head(torch.cat([first, features], dim=-1)).float(), pooled)


def parameter_count(model: nn.Module) -> int:
    """Number of parameters, for reprs and benchmarks."""
    return sum(p.numel() for p in model.parameters())
