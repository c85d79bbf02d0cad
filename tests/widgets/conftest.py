"""Fixtures for the widget tests: real tiny decision checkpoints, a real Router, a real local
OpenAI-compatible server with tiny chat models on 127.0.0.1 and Brokers over it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from jevlaya_lab import Agent, Router
from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.local import serve, tiny_chat_model

torch.set_num_threads(1)
CHAT_MODELS = ("a", "b", "c")
XSS = "<img src=x onerror=alert(1)><script>alert(2)</script>"


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {"english": make_tiny_checkpoint(root / "en", seed=0),
            "multilingual": make_tiny_checkpoint(root / "multi", seed=1)}


@pytest.fixture(scope="session")
def agent(checkpoints: dict[str, Path]) -> Agent:
    return Agent(checkpoints["english"], model_id="tiny-en")


@pytest.fixture
def router(checkpoints: dict[str, Path]) -> Iterator[Router]:
    with Router({k: str(v) for k, v in checkpoints.items()}) as r:
        yield r


@pytest.fixture(scope="session")
def server() -> Iterator[Any]:
    models = {n: tiny_chat_model(seed=i, name=n) for i, n in enumerate(CHAT_MODELS)}
    with serve(models) as srv:
        yield srv


@pytest.fixture
def broker(server: Any, tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """``broker("a", "b")``: a Broker over exactly those local models, healthy at the start."""
    for name in CHAT_MODELS:
        server.set_fault(name, None)
    made: list[Broker] = []

    def make(*names: str) -> Broker:
        cfg = [LLMConfig(name=n, base_url=server.base_url, model=n) for n in names]
        b = Broker(tmp_path / f"journal{len(made)}.db", models=cfg, catalog=[])
        made.append(b)
        return b
    yield make
    for b in made:
        b.close()
    for name in CHAT_MODELS:
        server.set_fault(name, None)
