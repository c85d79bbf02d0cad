"""Contrastive tuning of the sentence encoder before a head is trained on it (``TrainConfig.tune_encoder``).

The similarity prior answers a choice whose labels are far from the training texts with the
cosine between the pooled state and each option's text, so on a user's own labels a checkpoint is
only as good as the encoder's vectors. Tuning moves those vectors: an utterance is pulled toward the
text of its own intent's option and pushed from the other options in its batch.

- Pairs ``(utterance, option text of its intent)`` from the train splits of the training datasets:
  a seeded draw of ``n`` pairs, one epoch. The option text is the one the prior embeds for a choice
  option (``prior_inputs.option_texts``: ``"label: description"``) with one of the intent's training
  descriptions, or the bare label for :data:`BARE_SHARE` of the pairs (users write bare names
  too). Intents' held-out descriptions (``eval_description``) are never used.
- Texts are tokenised and mean-pooled exactly as the prior pools them (:class:`Pooler`), so the
  tuned vectors are the ones a checkpoint reads.
- Loss: symmetric multiple-negatives ranking (in-batch softmax over cosines x :data:`SCALE`, both
  ways). A batch is drawn from one dataset (its negatives are near ones); another pair of the same
  intent in the batch is masked out, not counted as a negative.
- AdamW at :data:`LR` with 10 % linear warm-up then linear decay, dropout on.
- Optionally (:class:`Keep`, ``TrainConfig.tune_keep``), texts that must not move are held near their
  untuned vectors by a distillation term: the intent pairs alone reshape the whole space, and the
  presets' yes/no answers, trained over the moved vectors of their written messages, fell.

Variants (:data:`VARIANTS`): ``all`` moves every weight (embeddings included); ``layers`` every
transformer layer but not the embeddings (half the tensors to ship); ``top2`` the last two layers;
``options`` a copy that embeds option texts only, beside states through the untrained encoder (every
state vector stays as it was). ``bench/encoder_tuning.py`` measures each one left one dataset out.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["BARE_SHARE", "BATCH", "LR", "SCALE", "VARIANTS", "Keep", "Pooler", "batches", "choice_texts", "option_variants",
           "set_trainable", "training_pairs", "tune"]

VARIANTS = ("all", "layers", "top2", "options")
LR = 2e-5
BATCH = 32
SCALE = 20.0
BARE_SHARE = 0.2
MAX_LEN = 128

Pair = tuple[str, str, str, str]
"""``(dataset, intent key, utterance, option text)``."""


class Pooler:
    """Unit mean-pooled vectors of texts through one encoder, tokenised as the prior tokenises
    (``PriorBuilder`` rows: the same cls/sep wrapping and cut, the same pooling and ``prefix``)."""

    def __init__(self, encoder: Any, tokenizer: Any, prefix: str = "") -> None:
        from jevlaya_lab.decisions.encoding import row_tokenizer
        from jevlaya_lab.decisions.model import DecisionModel
        from jevlaya_lab.decisions.prior import PriorConfig
        from jevlaya_lab.decisions.prior_inputs import PriorBuilder

        self.tokenizer = tokenizer
        self.rows = row_tokenizer(tokenizer)
        self.model = DecisionModel(encoder, head_layers=0, n_act=2, prior=PriorConfig(prefix=prefix, joint_head=False))
        self.builder = PriorBuilder(self.model, self.rows)

    def states(self, texts: list[str], max_len: int = 512) -> torch.Tensor:
        """Vectors of ``texts`` as states (what the Agent pools), no gradient."""
        from jevlaya_lab.decisions.encoding import tokenize_states

        return self.builder.state_vectors(tokenize_states(self.rows, texts), max_len)

    def options(self, texts: list[str]) -> torch.Tensor:
        """Vectors of option texts, no gradient."""
        return self.builder.vectors(texts)

    def state_rows(self, texts: list[Any], max_len: int) -> list[list[int]]:
        """Token rows of states (texts or any state the Agent takes), as the prior pools them."""
        from jevlaya_lab.decisions.encoding import tokenize_states

        return self.builder.state_rows(tokenize_states(self.rows, texts), max_len)

    def option_rows(self, texts: list[str], max_len: int) -> list[list[int]]:
        """Token rows of option texts, as the prior pools them."""
        return self.builder.text_rows(texts, max_len)

    def pool_with_grad(self, rows: list[list[int]]) -> torch.Tensor:
        """``[n, d]`` unit vectors of prepared token rows, through the autograd graph."""
        from jevlaya_lab.decisions.prior_inputs import pad_rows

        ids, mask = pad_rows(rows, self.rows.pad_id)
        return self.model.pool(ids, mask)


def choice_texts(criteria: Any) -> list[str]:
    """The prior's option texts for a choice question with ``criteria`` (dict or list)."""
    from jevlaya_lab.decisions.prior_inputs import option_texts
    from jevlaya_lab.decisions.questions import parse_questions

    return [t or "" for t in option_texts(parse_questions(
        {"q": {"type": "choice", "instructions": "What does the user want?", "criteria": criteria}})[0])]


def option_variants(intents: dict[str, Any], datasets: Sequence[str]) -> dict[str, list[str]]:
    """Per intent key of ``datasets``: its training option texts, one per training description, then
    the bare label last (never the held-out description)."""
    from jevlaya_lab.decisions.training.real_data import intent_label

    out: dict[str, list[str]] = {}
    for name in datasets:
        keys = [k for k, i in sorted(intents.items()) if i.dataset == name]
        if not keys:
            continue
        labels = [intent_label(intents[k]) for k in keys]
        per_desc = [choice_texts({lab: intents[k].descriptions[d] for lab, k in zip(labels, keys)})
                    for d in range(len(intents[keys[0]].descriptions))]
        bare = choice_texts(labels)
        for j, key in enumerate(keys):
            out[key] = [texts[j] for texts in per_desc] + [bare[j]]
    return out


def training_pairs(data: dict[str, Any], intents: dict[str, Any], datasets: Sequence[str], n: int, seed: int,
                   bare_share: float = BARE_SHARE) -> list[Pair]:
    """``n`` pairs drawn (seeded, without replacement, in proportion to each dataset's train size)
    from the train splits of ``datasets``, over the utterances of ``intents`` only."""
    rng = random.Random(seed)
    texts = option_variants(intents, datasets)
    pool = [(name, u.intent, u.text) for name in datasets for u in data[name]["train"] if u.intent in texts]
    picked = rng.sample(pool, min(n, len(pool)))
    out = []
    for name, key, text in picked:
        variants = texts[key]
        option = variants[-1] if rng.random() < bare_share else rng.choice(variants[:-1])
        out.append((name, key, text, option))
    return out


def batches(pairs: Sequence[Pair], size: int, seed: int) -> list[list[Pair]]:
    """Single-dataset batches of ``size`` (the last of each dataset may be smaller), shuffled."""
    rng = random.Random(seed + 1)
    out = []
    for name in sorted({p[0] for p in pairs}):
        mine = [p for p in pairs if p[0] == name]
        rng.shuffle(mine)
        out += [mine[i:i + size] for i in range(0, len(mine), size) if len(mine[i:i + size]) > 1]
    rng.shuffle(out)
    return out


def set_trainable(encoder: Any, variant: str) -> list[torch.nn.Parameter]:
    """Freeze what ``variant`` keeps and return the parameters it trains."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; use one of {', '.join(VARIANTS)}")
    encoder.requires_grad_(variant in ("all", "options"))
    if variant in ("layers", "top2"):
        for layer in encoder.encoder.layer[-2:] if variant == "top2" else encoder.encoder.layer:
            layer.requires_grad_(True)
    if getattr(encoder, "pooler", None) is not None:  # never read by mean pooling
        encoder.pooler.requires_grad_(False)
    return [p for p in encoder.parameters() if p.requires_grad]


class Keep:
    """Texts whose vectors tuning holds near their untuned ones: ``states`` pooled as states (any
    state the Agent takes) and ``options`` as option texts. Each step adds ``weight`` x the mean
    ``1 - cos(tuned, untuned)`` over ``batch`` of them drawn at random (feature distillation), so the
    intent pairs move the space while what the presets read (their written messages and their
    statements) stays where the head learnt it."""

    def __init__(self, pooler: Pooler, states: Sequence[Any], options: Sequence[str], *, weight: float,
                 batch: int, max_len: int, seed: int) -> None:
        if weight < 0 or batch < 1:
            raise ValueError(f"keep weight={weight!r}, batch={batch!r}: the weight must be >= 0 and the batch >= 1")
        self.rows = pooler.state_rows(list(states), max_len) + pooler.option_rows(list(options), max_len)
        if not self.rows:
            raise ValueError("keep: no states and no options to hold in place; pass some, or no Keep")
        self.pooler, self.weight, self.batch = pooler, weight, batch
        self.rng = random.Random(seed + 2)
        self.targets = self._pool_all()

    def _pool_all(self) -> torch.Tensor:
        """Every kept text's vector now, in chunks of 64, no gradient."""
        with torch.no_grad():
            return torch.cat([self.pooler.pool_with_grad(self.rows[i:i + 64]) for i in range(0, len(self.rows), 64)])

    def loss(self) -> torch.Tensor:
        picked = self.rng.sample(range(len(self.rows)), min(self.batch, len(self.rows)))
        now = self.pooler.pool_with_grad([self.rows[i] for i in picked])
        return self.weight * (1 - (now * self.targets[picked]).sum(-1)).mean()

    def drift(self) -> float:
        """Mean ``1 - cos`` of every kept text now against before tuning."""
        return float((1 - (self._pool_all() * self.targets).sum(-1)).mean())


def tune(encoder: Any, tokenizer: Any, pairs: Sequence[Pair], *, variant: str = "all", seed: int = 0, lr: float = LR,
         batch_size: int = BATCH, scale: float = SCALE, max_seconds: float | None = None, max_len: int = MAX_LEN,
         prefix: str = "", frozen: Any = None, keep: dict[str, Any] | None = None,
         log: Callable[..., None] = print) -> dict[str, Any]:
    """Tune ``encoder`` in place on ``pairs`` (one epoch, or until ``max_seconds``); it is left in
    eval mode with no parameter requiring a gradient. Returns the run's statistics, ``trained``
    the names of the parameters it trained (AdamW's weight decay moves every one of them). With
    ``variant="options"`` the utterances go through ``frozen`` (the untrained encoder, no gradient).
    ``keep`` (the arguments of :class:`Keep`: ``states``, ``options``, ``weight``, ``batch``) holds
    those texts' vectors near their untuned ones; the statistics then carry their ``keep_drift``."""
    if variant == "options" and frozen is None:
        raise ValueError("variant='options' embeds the states with the untrained encoder: pass it as frozen=")
    torch.manual_seed(seed)
    pooler = Pooler(encoder, tokenizer, prefix)
    if keep is not None:
        encoder.eval()
        kept: Keep | None = Keep(pooler, max_len=max_len, seed=seed, **keep)
    else:
        kept = None
    states_pooler = Pooler(frozen, tokenizer, prefix) if variant == "options" else pooler
    params = set_trainable(encoder, variant)
    plan = batches(pairs, batch_size, seed)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    warm = max(1, len(plan) // 10)

    def rate(step: int) -> float:
        return (step + 1) / warm if step < warm else max(0.0, (len(plan) - step) / max(1, len(plan) - warm))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    encoder.train()
    started = time.perf_counter()
    losses: list[float] = []
    steps = 0
    stopped_by_time = False
    for batch in plan:
        if max_seconds is not None and time.perf_counter() - started > max_seconds:
            stopped_by_time = True
            break
        keys = [p[1] for p in batch]
        with torch.set_grad_enabled(states_pooler is pooler):
            u = states_pooler.pool_with_grad(states_pooler.state_rows([p[2] for p in batch], max_len))
        o = pooler.pool_with_grad(pooler.option_rows([p[3] for p in batch], max_len))
        logits = scale * (u @ o.T)
        same = torch.tensor([[a == b for b in keys] for a in keys])
        same.fill_diagonal_(False)
        logits = logits.masked_fill(same, float("-inf"))
        target = torch.arange(len(batch))
        loss = (torch.nn.functional.cross_entropy(logits, target)
                + torch.nn.functional.cross_entropy(logits.T, target)) / 2
        if kept is not None:
            loss = loss + kept.loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        steps += 1
        if steps % 50 == 0:
            elapsed = time.perf_counter() - started
            log(f"    encoder step {steps}/{len(plan)} loss {statistics.mean(losses[-50:]):.3f} "
                f"{steps / elapsed:.2f} steps/s", flush=True)
    seconds = time.perf_counter() - started
    names = {id(p): name for name, p in encoder.named_parameters()}
    encoder.eval()
    encoder.requires_grad_(False)
    drift = {} if kept is None else {"keep_drift": round(kept.drift(), 5), "kept_texts": len(kept.rows)}
    return {**drift, "variant": variant, "trained": sorted(names[id(p)] for p in params), "steps": steps, "planned_steps": len(plan),
            "pairs_seen": sum(len(b) for b in plan[:steps]), "seconds": round(seconds, 1),
            "minutes": round(seconds / 60, 2), "steps_per_s": round(steps / seconds, 3) if seconds else 0.0,
            "stopped_by_time": stopped_by_time, "trained_parameters": sum(p.numel() for p in params),
            "loss_first50": round(statistics.mean(losses[:50]), 4) if losses else None,
            "loss_last50": round(statistics.mean(losses[-50:]), 4) if losses else None}
