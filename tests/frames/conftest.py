"""Fixtures of the table-run tests: tiny real checkpoints on disk and a small table of tickets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from jevlaya_lab.decisions.testing import make_tiny_checkpoint

torch.set_num_threads(1)

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the user want?",
               "criteria": {"refund": "money back", "bug": "something is broken", "other": ""}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "somewhat urgent", "very urgent"]},
    "spam": {"type": "noul", "instructions": "The message is spam."},
}

TEXTS = [
    "I want a refund for my order, it is late",
    "the app crashes when I log in",
    "hello, my invoice is wrong",
    "win a free cruise now, click here",
    "where is my parcel? it was due on monday",
    "please cancel my subscription",
    "the export button does nothing",
]


@pytest.fixture
def questions():
    """A function returning a fresh copy of the three test questions (choice, score, yes/no)."""
    import copy

    return lambda: copy.deepcopy(QUESTIONS)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("frames-tiny") / "ckpt", seed=0)


@pytest.fixture(scope="session")
def tiny_dir_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("frames-tiny-b") / "ckpt", seed=1)


@pytest.fixture
def tickets() -> pd.DataFrame:
    """Seven tickets indexed by ticket id (not 0..n), with a second text column."""
    return pd.DataFrame({"body": TEXTS, "subject": [t.split()[0] for t in TEXTS]},
                        index=pd.Index([f"T-{100 + i}" for i in range(len(TEXTS))], name="ticket"))
