"""Fixtures: one real local OpenAI-compatible server with tiny transformers models on
127.0.0.1, and brokers whose pool is exactly the models a test names."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig
from jevlaya_lab.local import serve, tiny_chat_model

torch.set_num_threads(1)
MODELS = ("a", "b", "c", "d")


@pytest.fixture(scope="session")
def server() -> Iterator[Any]:
    models = {name: tiny_chat_model(seed=i, name=name) for i, name in enumerate(MODELS)}
    with serve(models) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_faults(server: Any) -> Iterator[None]:
    """Every test starts with healthy models."""
    for name in MODELS:
        server.set_fault(name, None)
    yield
    for name in MODELS:
        server.set_fault(name, None)


def entries(server: Any, *names: str, **overrides: Any) -> list[LLMConfig]:
    return [LLMConfig(name=n, base_url=server.base_url, model=n, **overrides) for n in names]


@pytest.fixture
def cfg(server: Any) -> Callable[..., list[LLMConfig]]:
    """``cfg("a", "b", parallel=1)``: registry entries for models of the local server."""
    return lambda *names, **overrides: entries(server, *names, **overrides)


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens (transport errors)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
def abroker(server: Any, db: Path) -> Callable[..., AsyncBroker]:
    """``abroker("a", "b", **kwargs)``: an AsyncBroker over exactly those local models."""
    def make(*names: str, models: list[Any] | None = None, **kwargs: Any) -> AsyncBroker:
        kwargs.setdefault("catalog", [])
        return AsyncBroker(db, models=models if models is not None else entries(server, *names),
                           **kwargs)
    return make


@pytest.fixture
def broker(server: Any, db: Path) -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(*names: str, models: list[Any] | None = None, **kwargs: Any) -> Broker:
        kwargs.setdefault("catalog", [])
        b = Broker(db, models=models if models is not None else entries(server, *names), **kwargs)
        made.append(b)
        return b
    yield make
    for b in made:
        b.close()

