"""``quiet_loading()``: no transformers progress bars while our code loads a model.

transformers 5 draws a tqdm "Loading weights" bar on every ``from_pretrained`` (and "Writing
model shards" on ``save_pretrained``), which clutters notebooks and logs with noise the user did
not ask for. transformers offers no per-call switch, only the process-wide
``transformers.utils.logging.disable_progress_bar`` / ``enable_progress_bar`` pair, so this
context manager turns the bars off for the duration of the block and puts back exactly what
was there before:

- Bars the user already disabled stay disabled; we never turn on what we did not turn off.
- ``disable_progress_bar`` also resets huggingface_hub's progress-bar settings; those are saved
  on entry and restored on exit, so per-group hub settings survive.
- Threads may load at the same time: a lock and a depth counter make the first block to enter
  save and disable, and the last one to leave restore. While any block runs, transformers bars
  are off in every thread (the switch is process-wide).
- A user who changes the setting from another thread while a load runs may see it overwritten
  by the restore when the load ends.

transformers is imported on first use only, so importing this module stays cheap.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_depth = 0
# What the outermost block found: (transformers bars were enabled, hub settings) or None.
_saved: tuple[bool, dict[str, bool] | None] | None = None


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' progress bars inside the block, then restore the previous state."""
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _depth, _saved
    from transformers.utils import logging as hf_logging

    with _lock:
        if _depth == 0:
            enabled = hf_logging.is_progress_bar_enabled()
            _saved = (enabled, _hub_states() if enabled else None)
            if enabled:
                hf_logging.disable_progress_bar()
        _depth += 1


def _leave() -> None:
    global _depth, _saved
    from transformers.utils import logging as hf_logging

    with _lock:
        _depth -= 1
        if _depth == 0 and _saved is not None:
            enabled, hub = _saved
            _saved = None
            if enabled:
                hf_logging.enable_progress_bar()
                _restore_hub_states(hub)


def _hub_states() -> dict[str, bool] | None:
    """A copy of huggingface_hub's per-group progress-bar settings (None if it has none)."""
    states = _hub_state_table()
    return None if states is None else dict(states)


def _restore_hub_states(saved: dict[str, bool] | None) -> None:
    states = _hub_state_table()
    if states is not None and saved is not None:
        states.clear()
        states.update(saved)


def _hub_state_table() -> dict[str, Any] | None:
    try:  # the submodule itself: ``huggingface_hub.utils.tqdm`` the attribute is a class
        hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")
    except ImportError:  # pragma: no cover - transformers always installs huggingface_hub
        return None
    states = getattr(hub_tqdm, "progress_bar_states", None)
    return states if isinstance(states, dict) else None
