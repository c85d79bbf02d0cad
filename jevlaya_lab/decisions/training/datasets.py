"""Read the public intent datasets (CLINC150, BANKING77, HWU64) from a directory at run time.

The utterances are never copied into this repository: training and ``bench/quality.py`` read
them from ``--data-dir`` (default: ``$JEVLAYA_DATA_DIR``, else ``../shared/datasets`` beside the
checkout when it exists). Each dataset yields a ``train`` and a ``test`` list of
:class:`Utterance`; CLINC150's validation split joins its train split and its out-of-scope rows
are left out (they have no intent to describe).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

from jevlaya_lab.decisions.errors import DatasetError

__all__ = ["DATASETS", "DatasetError", "Utterance", "default_data_dir", "load_dataset"]

DATASETS: tuple[str, ...] = ("clinc150", "banking77", "hwu64")


@dataclass(frozen=True, slots=True)
class Utterance:
    text: str
    intent: str  # "<dataset>/<label>", the key of :func:`.intents.load_intents`


def default_data_dir() -> Path | None:
    """``$JEVLAYA_DATA_DIR``, else ``shared/datasets`` next to the repository checkout, else None."""
    env = os.environ.get("JEVLAYA_DATA_DIR")
    if env:
        return Path(env).expanduser()
    for parent in Path(__file__).resolve().parents:
        candidate = parent.parent / "shared" / "datasets"
        if (candidate / "clinc150").is_dir():
            return candidate
    return None


def _read(path: Path) -> object:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            if path.suffix == ".csv":
                return list(csv.DictReader(handle))
            return json.load(handle)
    except FileNotFoundError:
        raise DatasetError(f"{path} is missing; pass --data-dir pointing at a folder with clinc150/, "
                           "banking77/ and hwu64/ as described in the README") from None
    except (OSError, ValueError, csv.Error) as exc:
        raise DatasetError(f"{path} cannot be read ({exc}); restore the file from its public source") from None


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> dict[str, list[Utterance]]:
    """``{"train": [...], "test": [...]}`` for one of :data:`DATASETS`."""
    if name not in DATASETS:
        raise ValueError(f"dataset={name!r} is unknown; use one of {', '.join(DATASETS)}")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if root is None:
        raise DatasetError("no dataset folder found; pass --data-dir (or set JEVLAYA_DATA_DIR) to a "
                           "folder with clinc150/, banking77/ and hwu64/")
    folder = root / name

    def rows(pairs: list) -> list[Utterance]:
        return [Utterance(str(text), f"{name}/{label}") for text, label in pairs]

    if name == "clinc150":
        data = _read(folder / "data_full.json")
        assert isinstance(data, dict)
        return {"train": rows(data["train"] + data["val"]), "test": rows(data["test"])}
    if name == "banking77":
        out = {}
        for split in ("train", "test"):
            records = _read(folder / f"{split}.csv")
            assert isinstance(records, list)
            out[split] = rows([(r["text"], r["category"]) for r in records])
        return out
    out = {}
    for split in ("train", "test"):
        data = _read(folder / f"{split}_kfold1.json")  # hwu64
        examples = data["rasa_nlu_data"]["common_examples"]  # type: ignore[index]
        out[split] = rows([(e["text"], e["intent"]) for e in examples])
    return out
