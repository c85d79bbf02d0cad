"""No "Loading weights" bars when our code loads a model, and the user's bar setting survives."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub.utils import are_progress_bars_disabled
from huggingface_hub.utils import disable_progress_bars as hub_disable
from transformers.utils import logging as hf_logging

from jevlaya_lab._quiet import quiet_loading

# Loads a tiny decision checkpoint through the Agent and a tiny chat model through
# load_chat_model, then (as a control that the bar would show) the user's own from_pretrained.
LOADS = """
import sys
from pathlib import Path
from transformers.utils import logging as hf_logging
if sys.argv[2] == "off":
    hf_logging.disable_progress_bar()
from transformers import AutoModelForCausalLM
from jevlaya_lab import Agent
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.local.loading import load_chat_model
root = Path(sys.argv[1])
agent = Agent(make_tiny_checkpoint(root / "ckpt"))
chat = load_chat_model(root / "chat")
print("ENABLED AFTER OUR LOADS:", hf_logging.is_progress_bar_enabled(), flush=True)
print("=== USER CALL ===", file=sys.stderr, flush=True)
AutoModelForCausalLM.from_pretrained(root / "chat")
print("ENABLED AT END:", hf_logging.is_progress_bar_enabled(), flush=True)
"""


@pytest.fixture
def chat_dir(tmp_path: Path) -> Path:
    from jevlaya_lab.local.tiny import tiny_chat_model

    chat = tiny_chat_model()
    with quiet_loading():
        chat.model.save_pretrained(tmp_path / "chat")
    chat.tokenizer.save_pretrained(tmp_path / "chat")
    return tmp_path


@pytest.fixture
def bars_enabled() -> Iterator[None]:
    """Start each in-process test with bars on, and leave them on for the next test."""
    hf_logging.enable_progress_bar()
    yield
    hf_logging.enable_progress_bar()


def run_loads(root: Path, bars: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", LOADS, str(root), bars], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_agent_and_load_chat_model_draw_no_loading_weights_bar(chat_dir: Path) -> None:
    out, err = run_loads(chat_dir, "on")
    ours, user = err.split("=== USER CALL ===")
    assert "Loading weights" not in ours and "Loading weights" not in out
    assert "ENABLED AFTER OUR LOADS: True" in out and "ENABLED AT END: True" in out
    # The user kept their bars: their own from_pretrained still draws one.
    assert "Loading weights" in user


def test_bars_the_user_disabled_stay_disabled(chat_dir: Path) -> None:
    out, err = run_loads(chat_dir, "off")
    assert "Loading weights" not in err + out
    assert "ENABLED AFTER OUR LOADS: False" in out and "ENABLED AT END: False" in out


def test_nested_blocks_restore_only_when_the_outermost_ends(bars_enabled: None) -> None:
    with quiet_loading():
        assert not hf_logging.is_progress_bar_enabled()
        with quiet_loading():
            assert not hf_logging.is_progress_bar_enabled()
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()


def test_state_is_restored_when_the_load_raises(bars_enabled: None) -> None:
    with pytest.raises(OSError), quiet_loading():
        raise OSError("no such model")
    assert hf_logging.is_progress_bar_enabled()


def test_concurrent_loads_in_threads_restore_the_bars_once_all_are_done(bars_enabled: None) -> None:
    inside = threading.Barrier(4)
    seen: list[bool] = []

    def load() -> None:
        with quiet_loading():
            inside.wait(timeout=10)  # all four blocks are open at once
            seen.append(hf_logging.is_progress_bar_enabled())
            inside.wait(timeout=10)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert seen == [False] * 4
    assert hf_logging.is_progress_bar_enabled()


def test_huggingface_hub_group_settings_survive(bars_enabled: None) -> None:
    hub_disable("jevlaya-test.group")
    try:
        with quiet_loading():
            pass
        assert are_progress_bars_disabled("jevlaya-test.group")
        assert not are_progress_bars_disabled()
        assert hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()


def test_quiet_loading_leaves_disabled_bars_alone() -> None:
    hf_logging.disable_progress_bar()
    try:
        with quiet_loading():
            assert not hf_logging.is_progress_bar_enabled()
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
