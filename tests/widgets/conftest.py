"""Fixtures for the widget tests: real tiny decision checkpoints, a real Router, a real local
OpenAI-compatible server with tiny chat models on 127.0.0.1 and Brokers (sync and async) over
it."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from jevlaya_lab import Agent, Router
from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.local import serve, tiny_chat_model

torch.set_num_threads(1)
CHAT_MODELS = ("a", "b", "c")
XSS = "<img src=x onerror=alert(1)><script>alert(2)</script>"
CHROMIUM = "/usr/bin/chromium"  # Debian's; never a downloaded browser
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
needs_chromium = pytest.mark.chromium


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that needs the browser fails without it, as the PostgreSQL tests fail without the
    server's binaries: the tutorials run on the fast parameters only in JupyterLab here, so a skip
    would hide that they never ran."""
    if item.get_closest_marker("chromium") is not None and not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is not installed: apt-get install -y chromium (.ci/run installs it)",
                    pytrace=False)


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
def healthy(server: Any) -> Iterator[Any]:
    """The local server with no fault on any model, before and after the test."""
    for name in CHAT_MODELS:
        server.set_fault(name, None)
    yield server
    for name in CHAT_MODELS:
        server.set_fault(name, None)


def local_models(server: Any, names: tuple[str, ...]) -> list[LLMConfig]:
    return [LLMConfig(name=n, base_url=server.base_url, model=n) for n in names]


@pytest.fixture
def broker(healthy: Any, tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """``broker("a", "b")``: a Broker over exactly those local models, healthy at the start."""
    made: list[Broker] = []

    def make(*names: str) -> Broker:
        b = Broker(tmp_path / f"journal{len(made)}.db", models=local_models(healthy, names),
                   catalog=[])
        made.append(b)
        return b
    yield make
    for b in made:
        b.close()


@pytest.fixture
def async_broker(healthy: Any, tmp_path: Path) -> Callable[..., AsyncBroker]:
    """``async with async_broker("a", "b") as b:`` inside ``asyncio.run``: an AsyncBroker over
    exactly those local models (it belongs to the loop it first runs on, so the test closes
    it there)."""
    made = itertools.count()

    def make(*names: str) -> AsyncBroker:
        return AsyncBroker(tmp_path / f"async_journal{next(made)}.db",
                           models=local_models(healthy, names), catalog=[])
    return make


@pytest.fixture
def page() -> Iterator[Any]:
    """A page of headless Debian Chromium driven by playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
                                    headless=True)
        try:
            yield browser.new_page(viewport={"width": 1100, "height": 1400})
        finally:
            browser.close()
