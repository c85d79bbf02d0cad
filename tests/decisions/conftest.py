"""Shared fixtures of the decision tests: tiny real checkpoints built from a config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jevlaya_lab.decisions.testing import make_tiny_checkpoint

torch.set_num_threads(1)

QUESTIONS = {
    "intent": {
        "type": "choice",
        "instructions": "What does the user want?",
        "criteria": {"refund": "money back", "bug": "something is broken", "other": ""},
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgent is it?",
        "criteria": ["not urgent", "somewhat urgent", "very urgent"],
    },
    "spam": {"type": "noul", "instructions": "The message is spam."},
}

STATES = [
    "I want a refund for my order, it is late",
    {"subject": "login error", "body": "the app crashes when I log in"},
    [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "how can I help?"},
     {"role": "user", "content": "my invoice is wrong"}],
]


@pytest.fixture(scope="session")
def tiny_checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny checkpoint directory (seed 0), built once per session; treat it as read-only."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)


@pytest.fixture(scope="session")
def tiny_agent(tiny_checkpoint_dir: Path):
    """An Agent over the tiny checkpoint without hooks; tests must not install hooks on it."""
    from jevlaya_lab.decisions.agent import Agent

    return Agent(tiny_checkpoint_dir, model_id="tiny")


@pytest.fixture
def agent(tiny_checkpoint_dir: Path):
    """A fresh Agent over the tiny checkpoint (id ``"tiny"``); tests may install hooks on it."""
    from jevlaya_lab.decisions.agent import Agent

    return Agent(tiny_checkpoint_dir, model_id="tiny")


@pytest.fixture
def forwards(agent) -> list:
    """One entry per chunk of rows ``agent``'s DecisionModel really read (a torch forward hook).

    A chunk runs one forward pass per length group of its rows; the passes of one chunk share
    its ``usage`` list, so consecutive passes over the same list count once."""
    calls: list = []
    last: list = [None]

    def seen(module, args, output) -> None:
        if args[0].usage is not last[0]:
            last[0] = args[0].usage
            calls.append(1)

    handle = agent.decision_model.register_forward_hook(seen)
    yield calls
    handle.remove()


@pytest.fixture
def questions() -> dict:
    import copy

    return copy.deepcopy(QUESTIONS)


@pytest.fixture
def states() -> list:
    import copy

    return copy.deepcopy(STATES)
