"""``wait=None`` on a pool where every model answers 429 is bounded and says so: the call sends
at most ``max_attempts_per_model`` requests to each model, waits between them only for the
cooldowns the providers asked for (Retry-After, doubling), so its queueing is at most
``models x Retry-After x (2**(max_attempts_per_model - 1) - 1)``; every wait is logged with
its bound, and the final error says how long the call waited."""

from __future__ import annotations

import logging
import time

import pytest

from jevlaya_lab import NoLLMAvailableError
from jevlaya_lab.local import FaultProfile

RETRY_AFTER = 0.25


def test_wait_none_on_an_all_429_pool_ends_within_the_retry_after_bound(
        broker, server, caplog) -> None:
    for name in ("a", "b"):
        server.set_fault(name, FaultProfile(status=429, retry_after=RETRY_AFTER))
    b = broker("a", "b")
    per_model = 3
    bound = 2 * RETRY_AFTER * (2 ** (per_model - 1) - 1)  # 2 models: 0.25 + 0.5 each
    caplog.set_level(logging.INFO, logger="jevlaya_lab.broker")
    start = time.monotonic()
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("x", wait=None, max_attempts_per_model=per_model, parallel_recovery=False)
    elapsed = time.monotonic() - start
    assert elapsed < bound + 1.5, elapsed  # + the time of the six 429 answers themselves
    assert "max_attempts_per_model=3 reached" in str(info.value)
    assert "waited" in str(info.value) and "for cooling models" in str(info.value)
    rows = b.calls()
    assert len(rows) == 2 * per_model
    assert {r["status"] for r in rows} == {"rate_limited"}
    waits = [r.getMessage() for r in caplog.records if "waits" in r.getMessage()]
    assert waits and all("wait=None: bounded by max_attempts=10" in w for w in waits)
