"""Fixtures for the local-model tests: tiny models and servers that are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from jevlaya_lab.local import Server, serve, tiny_chat_model

USER = [{"role": "user", "content": "hello there"}]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from two threads on a shared 2-core machine; other areas keep theirs."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """``start_server(models, **serve_kwargs)``; every server started is stopped at teardown."""
    started: list[Server] = []

    def start(models: Any = None, **kwargs: Any) -> Server:
        server = serve(models if models is not None else [tiny_chat_model(0), tiny_chat_model(1)], **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    """A server with ``tiny-0`` and ``tiny-1`` and no faults."""
    return start_server()


def chat_body(model: str = "tiny-0", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": USER, **extra}
