"""Train a decision head over a mostly frozen encoder, then fit temperatures on a held-out split.

The lower encoder layers stay frozen and their outputs are computed once per row and cached
(fp16); each step then runs only the top ``encoder_layers`` (fine-tuned) and the head. The
forward pass is :class:`DecisionModel`'s own, with the encoder swapped for a replay of the cached
states through the shared top layers, so training and inference cannot drift apart.

Choices measured on this 2-core CPU (and why the defaults are what they are):
- A fully frozen encoder does not work: a probe on the frozen marker vectors stays at chance on
  held-out rows (0.32 with ~0.3 chance), and fresh head layers over frozen states learned nothing
  in 500 steps. Matching an option against the state needs attention that is already trained, so
  the top two encoder layers are fine-tuned and ``head_layers`` defaults to 0 (the Laya layout
  allows it; the head is then the type embedding, scorer and act head).
- The act head learns ``act = the top answer is right`` on its detached input, so
  ``act_probability`` estimates the answer being correct (``act_costs = [1.0]``: one "defer"
  alternative). Gradients through the option-feature entropy are NaN at masked slots.
- Over MiniLM every row type sat at chance for ~1300 steps before learning started: the softmax
  over option markers cancels any state evidence that reaches every marker alike, so only
  option-dependent attention helps, and at first nothing rewards it. ``match_share`` rows (the
  state restates the gold option's description, :func:`.synthetic._match`) end that plateau within
  ~300 steps. multilingual-e5-small leaves the plateau on its own (mini-multi uses 0.2, mini-en 0.7).
  Batches mix row types (length-sorted batches were one type each and learned more slowly).
- ``time_budget`` bounds the optimisation time so a run finishes on a busy machine; the learning
  rate decays over whichever of steps or time runs out first, and the log says when the budget
  cut the run short. Data, order and initialisation are seeded; the number of steps a budget
  allows depends on the machine (mini-en: 2820 steps on one thread, mini-multi: 2989 on two).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from jevlaya_lab.decisions.encoding import encode_requests
from jevlaya_lab.decisions.model import DecisionModel
from jevlaya_lab.decisions.training import metrics
from jevlaya_lab.decisions.training.synthetic import Example, generate, gold_index
from jevlaya_lab.decisions.training.temperature import TemperatureFit, fit_temperatures

__all__ = ["Row", "TrainConfig", "TrainResult", "encode_examples", "predict_rows", "train"]

ACT_COSTS = [1.0]
HELDOUT_SEED_OFFSET = 1_000_003
"""The held-out split is ``generate(seed + HELDOUT_SEED_OFFSET)``; bench/quality.py re-creates it."""
ACT_LOSS_WEIGHT = 0.2


@dataclass
class TrainConfig:
    """Everything that decides a training run; stored next to the trained head."""

    n_train: int = 6000
    n_heldout: int = 1000
    seed: int = 0
    epochs: int = 14
    batch_size: int = 16
    lr: float = 2e-3
    head_layers: int = 0  # fresh head layers start as noise over the encoder states; see module docstring
    encoder_layers: int = 2  # top encoder layers fine-tuned (the rest stay frozen and cached)
    encoder_lr: float = 3e-4
    max_len: int = 256
    head_max_len: int = 192
    threads: int = 2
    time_budget: float | None = 1500.0  # seconds of optimisation; None = run all epochs
    generic_share: float = 0.15
    multilingual_share: float = 0.0  # share of triage states in the 13 languages of bank_multi
    match_share: float = 0.4  # draws whose state restates the gold description (synthetic._match)

    def __post_init__(self) -> None:
        for name in ("n_train", "n_heldout", "epochs", "batch_size", "threads", "max_len", "head_max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be an int >= 1")
        for name in ("lr", "encoder_lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < 1):
                raise ValueError(f"{name}={value!r}: must be a number in (0, 1), e.g. 1e-4")
        if isinstance(self.encoder_layers, bool) or not isinstance(self.encoder_layers, int) or self.encoder_layers < 0:
            raise ValueError(f"encoder_layers={self.encoder_layers!r}: must be an int >= 0")


@dataclass
class Row:
    """One encoded example: token ids, marker positions (slot order), type id and gold slot."""

    ids: torch.Tensor
    positions: torch.Tensor
    type_id: int
    qtype: str
    gold: int  # slot index of the gold option
    caller_order: tuple[int, ...]  # slot -> caller index
    task: str
    hidden: torch.Tensor | None = None


@dataclass
class TrainResult:
    model: DecisionModel
    tokenizer: Any
    config: dict[str, Any]  # rl_agent_config.json content
    fit: TemperatureFit
    heldout: dict[str, dict[str, float]]  # per task: n, accuracy, ece (+ mae), after calibration
    seconds: dict[str, float] = field(default_factory=dict)


def encode_examples(tokenizer: Any, examples: Sequence[Example], *, max_len: int, head_max_len: int) -> list[Row]:
    """Encode each example as one row through the public :func:`encode_requests`."""
    rows = []
    for ex in examples:
        batch = encode_requests(tokenizer, [ex.state], {"q": ex.question}, max_len=max_len, head_max_len=head_max_len)
        q = batch.questions[0]
        n = int(batch.attention_mask[0].sum())
        k = int(batch.option_mask[0].sum())
        rows.append(Row(ids=batch.input_ids[0, :n].clone(), positions=batch.option_positions[0, :k].clone(),
                        type_id=int(batch.type_ids[0]), qtype=q.type, gold=q.option_order.index(gold_index(ex)),
                        caller_order=tuple(q.option_order), task=ex.task))
    return rows


def _padded(rows: Sequence[Row], pad_id: int) -> SimpleNamespace:
    length = max(len(r.ids) for r in rows)
    k = max(len(r.positions) for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    positions = torch.zeros((len(rows), k), dtype=torch.long)
    option_mask = torch.zeros((len(rows), k), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r.ids)] = r.ids
        mask[i, : len(r.ids)] = 1
        positions[i, : len(r.positions)] = r.positions
        option_mask[i, : len(r.positions)] = True
    return SimpleNamespace(input_ids=ids, attention_mask=mask, option_positions=positions, option_mask=option_mask,
                           type_ids=torch.tensor([r.type_id for r in rows], dtype=torch.long))


def _length_batches(rows: Sequence[Row], size: int) -> list[list[int]]:
    """Index batches of similar length (least padding), for the passes that do not learn."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
    return [order[i: i + size] for i in range(0, len(order), size)]


def _mixed_batches(n: int, size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled index batches. Training mixes row types in every batch: length-sorted batches hold
    one question type each (lengths differ by type), which measurably slowed the start of learning."""
    order = list(range(n))
    rng.shuffle(order)
    return [order[i: i + size] for i in range(0, n, size)]


def _layers(encoder: nn.Module) -> nn.ModuleList:
    """The encoder's transformer layers (BERT-style ``encoder.layer``)."""
    try:
        return encoder.encoder.layer
    except AttributeError:
        raise TypeError(f"{type(encoder).__name__} has no encoder.layer list; use encoder_layers=0 "
                        "to train with a fully frozen encoder") from None


class _Replay(nn.Module):
    """Stands in for the encoder during training: cached lower-layer states through the top layers.

    The top layers are the encoder's own modules (shared, not copied), so training updates the
    real encoder in place.
    """

    def __init__(self, encoder: nn.Module, top: int) -> None:
        super().__init__()
        self.config = encoder.config
        self.top = nn.ModuleList(list(_layers(encoder))[len(_layers(encoder)) - top:]) if top else nn.ModuleList()
        self.hidden: torch.Tensor | None = None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        hidden = self.hidden
        if len(self.top):
            from transformers.masking_utils import create_bidirectional_mask

            mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
            for layer in self.top:
                hidden = layer(hidden, mask)
                hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return SimpleNamespace(last_hidden_state=hidden)


def _cache_hidden(encoder: nn.Module, rows: Sequence[Row], pad_id: int, *, top: int, batch_size: int = 64) -> None:
    """Store each row's hidden states below the ``top`` trainable layers (fp16)."""
    encoder.eval()
    with torch.inference_mode():
        for idx in _length_batches(rows, batch_size):
            batch = _padded([rows[i] for i in idx], pad_id)
            out = encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=True)
            hidden = out.hidden_states[len(out.hidden_states) - 1 - top]
            for j, i in enumerate(idx):
                rows[i].hidden = hidden[j, : len(rows[i].ids)].to(torch.float16).clone()


def _replay_batch(rows: Sequence[Row], pad_id: int) -> tuple[SimpleNamespace, torch.Tensor]:
    batch = _padded(rows, pad_id)
    hidden = torch.zeros((len(rows), batch.input_ids.shape[1], rows[0].hidden.shape[-1]))
    for i, r in enumerate(rows):
        hidden[i, : len(r.ids)] = r.hidden.float()
    return batch, hidden


def predict_rows(model: DecisionModel, rows: Sequence[Row], pad_id: int, *, top: int,
                 batch_size: int = 64) -> list[torch.Tensor]:
    """Untempered option logits (slot order, real options only) per cached row."""
    replay, real = _Replay(model.encoder, top), model.encoder
    model.encoder = replay
    out: list[torch.Tensor | None] = [None] * len(rows)
    try:
        model.eval()
        with torch.inference_mode():
            for idx in _length_batches(rows, batch_size):
                batch, replay.hidden = _replay_batch([rows[i] for i in idx], pad_id)
                logits = model(batch).option_logits
                for j, i in enumerate(idx):
                    out[i] = logits[j, : len(rows[i].positions)].clone()
    finally:
        model.encoder = real
    return out  # type: ignore[return-value]


def _train_head(model: DecisionModel, rows: list[Row], pad_id: int, cfg: TrainConfig,
                log: Callable[[str], None]) -> int:
    replay, real = _Replay(model.encoder, cfg.encoder_layers), model.encoder
    model.encoder = replay
    encoder_params = list(replay.top.parameters())
    for p in encoder_params:
        p.requires_grad_(True)
    head_params = [p for name, p in model.named_parameters() if p.requires_grad and not name.startswith("encoder.")]
    params = encoder_params + head_params
    opt = torch.optim.AdamW([{"params": encoder_params, "lr": cfg.encoder_lr}, {"params": head_params, "lr": cfg.lr}],
                            weight_decay=0.01)
    rng = random.Random(cfg.seed)
    total = cfg.epochs * math.ceil(len(rows) / cfg.batch_size)
    start, step = time.perf_counter(), 0

    def progress(s: int) -> float:  # the share of the run done: of its steps or of its time budget
        elapsed = (time.perf_counter() - start) / cfg.time_budget if cfg.time_budget else 0.0
        return max(s / total, elapsed)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * max(0.05, 1 - progress(s)))
    # the act head trains on its detached input (see the module docstring)
    act_input: list[torch.Tensor] = []
    hook = model.act_head.register_forward_hook(lambda _m, args, _out: act_input.append(args[0]))
    try:
        model.train()
        for epoch in range(cfg.epochs):
            seen, loss_sum, hits = 0, 0.0, 0
            for idx in _mixed_batches(len(rows), cfg.batch_size, rng):
                chunk = [rows[i] for i in idx]
                batch, replay.hidden = _replay_batch(chunk, pad_id)
                act_input.clear()
                out = model(batch)
                gold = torch.tensor([r.gold for r in chunk])
                loss = nn.functional.cross_entropy(out.option_logits, gold)
                right = out.option_logits.argmax(-1) == gold
                act_logits = model.act_head(act_input[0].detach())
                loss = loss + ACT_LOSS_WEIGHT * nn.functional.cross_entropy(act_logits, (~right).long())
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                sched.step()
                step += 1
                seen += len(chunk)
                loss_sum += loss.item() * len(chunk)
                hits += int(right.sum())
                if step % 50 == 0:
                    log(f"  step {step}: loss {loss_sum / seen:.4f}, train accuracy {hits / seen:.3f}, "
                        f"{time.perf_counter() - start:.0f}s")
                if cfg.time_budget is not None and time.perf_counter() - start > cfg.time_budget:
                    log(f"time budget of {cfg.time_budget}s reached after {step} steps")
                    return step
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {loss_sum / seen:.4f}, train accuracy {hits / seen:.3f}, "
                f"{time.perf_counter() - start:.0f}s")
    finally:
        hook.remove()
        model.encoder = real
        model.eval()
    return step


def _caller_probs(logits: torch.Tensor, order: Sequence[int], t: float) -> list[float]:
    p = torch.softmax(logits / t, dim=-1).tolist()
    caller = [0.0] * len(p)
    for slot, index in enumerate(order):
        caller[index] = p[slot]
    return caller


def heldout_report(rows: Sequence[Row], logits: Sequence[torch.Tensor], fit: TemperatureFit) -> dict[str, dict[str, float]]:
    """Per task metrics on held-out rows with the fitted temperatures applied."""
    from jevlaya_lab.decisions.calibration import TemperatureTable

    table = TemperatureTable(fit.temperature, fit.temperature_by_options)
    groups: dict[str, tuple[str, list, list]] = {}
    for r, x in zip(rows, logits):
        t = table.get(r.qtype, len(x))
        qtype, probs, golds = groups.setdefault(r.task, (r.qtype, [], []))
        probs.append(_caller_probs(x, r.caller_order, t))
        golds.append(r.caller_order[r.gold])
    return {task: metrics.summarize(qtype, probs, golds) for task, (qtype, probs, golds) in sorted(groups.items())}


def train(encoder: nn.Module, tokenizer: Any, cfg: TrainConfig, *, encoder_id: str = "",
          log: Callable[[str], None] = print) -> TrainResult:
    """Train a fresh head over ``encoder`` (kept frozen) and fit its temperatures."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    shares = {"generic_share": cfg.generic_share, "multilingual_share": cfg.multilingual_share,
              "match_share": cfg.match_share}
    train_rows = encode_examples(tokenizer, generate(cfg.n_train, seed=cfg.seed, **shares),
                                 max_len=cfg.max_len, head_max_len=cfg.head_max_len)
    held_rows = encode_examples(tokenizer, generate(cfg.n_heldout, seed=cfg.seed + HELDOUT_SEED_OFFSET, **shares),
                                max_len=cfg.max_len, head_max_len=cfg.head_max_len)
    seconds["encode"] = time.perf_counter() - t0
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for p in encoder.parameters():
        p.requires_grad_(False)
    t0 = time.perf_counter()
    _cache_hidden(encoder, train_rows + held_rows, pad_id, top=cfg.encoder_layers)
    seconds["cache_encoder"] = time.perf_counter() - t0
    log(f"encoded {len(train_rows)} train / {len(held_rows)} held-out rows in {seconds['encode']:.0f}s, "
        f"cached encoder states in {seconds['cache_encoder']:.0f}s")
    model = DecisionModel(encoder, head_layers=cfg.head_layers, n_act=len(ACT_COSTS) + 1)
    with torch.no_grad():  # start without a type offset: N(0, 1) rows would swamp the encoder states
        model.type_emb.weight.zero_()
    t0 = time.perf_counter()
    steps = _train_head(model, train_rows, pad_id, cfg, log)
    seconds["train"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    logits = predict_rows(model, held_rows, pad_id, top=cfg.encoder_layers)
    golds = [r.gold for r in held_rows]
    fit = fit_temperatures(logits, golds, [r.qtype for r in held_rows])
    model.temperature.copy_(torch.tensor(fit.temperature))
    seconds["calibrate"] = time.perf_counter() - t0
    n_layers = len(_layers(encoder)) if cfg.encoder_layers else 0
    trained_layers = list(range(n_layers - cfg.encoder_layers, n_layers))
    config = {
        "encoder": encoder_id,
        "head_layers": cfg.head_layers,
        "act_costs": list(ACT_COSTS),
        "max_len": cfg.max_len,
        "head_max_len": cfg.head_max_len,
        "temperature": fit.temperature,
        "temperature_by_options": fit.temperature_by_options,
        "trained_encoder_layers": trained_layers,
    }
    report = heldout_report(held_rows, logits, fit)
    for p in model.parameters():
        p.requires_grad_(False)
    return TrainResult(model, tokenizer, config, fit, report, {**seconds, "steps": steps})


def export_head(result: TrainResult, directory: str | Path, *, train_config: TrainConfig | None = None) -> Path:
    """Write only the trained parts (no encoder) plus config and calibration, for shipping."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    trained = tuple(f"encoder.encoder.layer.{i}." for i in result.config.get("trained_encoder_layers", []))
    tensors = {}
    for k, v in result.model.state_dict().items():
        if not k.startswith("encoder."):
            tensors[k] = v.detach().contiguous().clone()
        elif k.startswith(trained):  # fine-tuned encoder layers ship in fp16 to stay small
            tensors[k] = v.detach().to(torch.float16).contiguous().clone()
    save_file(tensors, out / "head.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(result.config, indent=2) + "\n")
    calibration = {"temperatures": result.fit.report, "heldout": result.heldout,
                   "train_config": asdict(train_config) if train_config else None,
                   "seconds": {k: round(v, 1) for k, v in result.seconds.items()}}
    (out / "calibration.json").write_text(json.dumps(calibration, indent=2) + "\n")
    return out
