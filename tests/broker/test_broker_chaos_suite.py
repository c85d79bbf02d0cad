"""The short variant of ``bench/chaos.py``: its mixed part with 330 calls (every kind: asks,
streams, races, streams closed before their lanes start or after one delta, dropped streams,
prompts with a lone surrogate, a provider whose error messages are not strings and which echoes
the key in its headers) at concurrency 16, logged at DEBUG through the root logger, then the
suite's own checks: 0 slots left taken, 0 hung, 0 undocumented exceptions, every request
journaled (extra rows only superseded/cancelled lanes), 0 rows lost or duplicated, no run of 6+
key characters in the journal files, errors or DEBUG logs, and at least 30 % of the attempts
faulted."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import torch

CHAOS = Path(__file__).parents[2] / "bench" / "chaos.py"


def _chaos():
    spec = importlib.util.spec_from_file_location("chaos_bench", CHAOS)
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_the_chaos_suite_short_run_holds_every_check(tmp_path) -> None:
    torch.set_num_threads(1)
    chaos = _chaos()
    mixed = asyncio.run(chaos.mixed(330, 16, tmp_path))
    assert chaos.violations({"mixed": mixed}) == [], mixed
    assert mixed["hung"] == 0 and mixed["slots_in_use_after"] == 0
    assert mixed["errors"].get("PromptError") == 330 // len(chaos.KINDS)  # every unencodable call
    assert mixed["outcomes"].get("answer", 0) > 100
    assert mixed["key_echoes_in_logs_checked_chars"] > 100_000  # DEBUG logs were really captured
