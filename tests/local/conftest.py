"""Fixtures for the local-model tests: tiny models and servers that are always stopped.

The server tests run against both backends: a test that uses ``server`` or ``start_server()``
without naming its models runs once with the tiny transformers models and once with SmolLM2 on
llama.cpp under the same names (``tiny-0``, ``tiny-1``, 8 tokens by default, fewer than its
shortest greeting, so answers end by length as the tiny models' do), unless it is
marked ``transformers_only`` (it compares text with a tiny model's, or needs a torch model) or
``no_model`` (its requests never reach a model: routing, JSON parsing, connection handling, the
same code whichever backend serves, so a second run would prove nothing more).
Without llama-cpp-python the llama.cpp runs fail, saying to run ``make setup``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from jevlaya_lab.local import Server, serve, tiny_chat_model
from jevlaya_lab.local.loading import SMOLLM2_QUANTIZATION, llama_cpp_available, smollm2_gguf

USER = [{"role": "user", "content": "hello there"}]
BACKENDS = ("transformers", "llama.cpp")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "transformers_only: run the server test with the tiny transformers models only")
    config.addinivalue_line("markers", "no_model: the server test's requests never reach a model; run it on one backend")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        only = any(metafunc.definition.get_closest_marker(m) is not None for m in ("transformers_only", "no_model"))
        metafunc.parametrize("backend", ["transformers"] if only else list(BACKENDS), indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    chosen = getattr(request, "param", "transformers")
    if chosen == "llama.cpp" and not llama_cpp_available():
        pytest.fail("llama-cpp-python is not installed: run 'make setup' (it builds and caches the wheel)")
    return str(chosen)


@functools.lru_cache(maxsize=None)
def llama_pair() -> tuple[Any, Any]:
    """SmolLM2 on llama.cpp as ``tiny-0`` and ``tiny-1``, with the weights ``smollm2()`` reads
    (loaded once: ~0.3 s, 145 MB of Q8_0 weights and three engines' caches of ~47 MB each)."""
    from jevlaya_lab.local.llama_model import LlamaChatModel

    return tuple(LlamaChatModel(smollm2_gguf(), name=f"tiny-{i}", default_max_tokens=8, context_length=2048,
                                quantization=SMOLLM2_QUANTIZATION)
                 for i in range(2))  # type: ignore[return-value]


def default_models(backend: str) -> list[Any]:
    return list(llama_pair()) if backend == "llama.cpp" else [tiny_chat_model(0), tiny_chat_model(1)]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from two threads on a shared 2-core machine; other areas keep theirs."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def start_server(backend: str) -> Iterator[Callable[..., Server]]:
    """``start_server(models, **serve_kwargs)``; every server started is stopped at teardown.
    Without ``models``: ``tiny-0`` and ``tiny-1`` of the test's backend."""
    started: list[Server] = []

    def start(models: Any = None, **kwargs: Any) -> Server:
        server = serve(models if models is not None else default_models(backend), **kwargs)
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
