"""The failure classification table, row by row, against the real local server."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from jevlaya_lab.broker import LLMConfig
from jevlaya_lab.broker.errors import (
    InvalidProviderResponseError,
    NoLLMAvailableError,
    ProviderError,
)
from jevlaya_lab.local import FaultProfile


def statuses(rows: list[dict[str, Any]]) -> list[tuple[str, str, int | None]]:
    return [(r["llm_name"], r["status"], r["http_status"]) for r in rows]


def cooling_seconds(snapshot: dict[str, Any], name: str) -> float:
    until = snapshot[name]["cooldown_until"]
    return until.timestamp() - time.time() if until else 0.0


def test_429_with_retry_after_cools_for_retry_after_and_fails_over(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=429, retry_after=30))
    b = broker("a", "b")
    result = b.ask("hello")
    assert result.llm_name == "b" and result.text
    assert statuses(b.calls()[::-1]) == [("a", "rate_limited", 429), ("b", "ok", 200)]
    assert 25 < cooling_seconds(b.snapshot(), "a") <= 30
    assert b.calls()[-1]["cooldown_until"] is not None


def test_429_without_retry_after_cools_60_s(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=429))
    b = broker("a", "b")
    assert b.ask("hello").llm_name == "b"
    assert 55 < cooling_seconds(b.snapshot(), "a") <= 60


def test_503_is_treated_like_a_rate_limit(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=503, retry_after=20))
    b = broker("a", "b")
    assert b.ask("hello").llm_name == "b"
    assert statuses(b.calls())[-1] == ("a", "unavailable", 503)
    assert 15 < cooling_seconds(b.snapshot(), "a") <= 20


def test_cooldown_doubles_per_consecutive_rate_limit_and_resets_on_recovery(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=429, retry_after=0.2))
    b = broker("a", "b")
    for _ in range(3):
        assert b.ask("hello", wait=0).llm_name == "b"
        time.sleep(max(cooling_seconds(b.snapshot(), "a"), 0) + 0.05)  # let a come back
    rows = [r for r in b.calls()[::-1] if r["llm_name"] == "a"]
    lengths = [datetime.fromisoformat(r["cooldown_until"]).timestamp()
               - datetime.fromisoformat(r["called_at"]).timestamp() - r["latency_ms"] / 1000
               for r in rows]
    assert [round(x, 1) for x in lengths] == [0.2, 0.4, 0.8]
    assert b.snapshot()["a"]["consecutive_failures"] == 3
    server.set_fault("a", None)
    # recovered: first in registry order again (alone: with parallel_recovery, its default, a
    # recovering a is raced against b and either may answer first)
    assert b.ask("hello", parallel_recovery=False).llm_name == "a"
    assert b.snapshot()["a"]["consecutive_failures"] == 0


@pytest.mark.parametrize("status", [500, 502])
def test_5xx_cools_60_s_and_fails_over(broker, server, status: int) -> None:
    server.set_fault("a", FaultProfile(status=status))
    b = broker("a", "b")
    assert b.ask("hello").llm_name == "b"
    assert statuses(b.calls())[-1] == ("a", "unavailable", status)
    assert 55 < cooling_seconds(b.snapshot(), "a") <= 60


def test_transport_error_cools_60_s_and_fails_over(broker, cfg, dead_url) -> None:
    dead = LLMConfig(name="dead", base_url=dead_url, model="a")
    b = broker(models=[dead, *cfg("b")])
    assert b.ask("hello").llm_name == "b"
    first = b.calls()[-1]
    assert (first["llm_name"], first["status"], first["http_status"]) == ("dead", "unavailable",
                                                                          None)
    assert "ConnectError" in first["error_detail"]
    assert 55 < cooling_seconds(b.snapshot(), "dead") <= 60


@pytest.mark.parametrize("fault", [FaultProfile(garbage=True), FaultProfile(empty=True)],
                         ids=["garbage", "empty"])
def test_garbage_or_empty_200_cools_60_s_and_fails_over(broker, server, fault) -> None:
    server.set_fault("a", fault)
    b = broker("a", "b")
    assert b.ask("hello").llm_name == "b"
    assert statuses(b.calls())[-1] == ("a", "error", 200)
    assert 55 < cooling_seconds(b.snapshot(), "a") <= 60


def test_garbage_from_the_only_model_raises_no_llm_with_the_provider_error(broker, server) -> None:
    server.set_fault("a", FaultProfile(garbage=True))
    b = broker("a")
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("hello", wait=1)
    assert info.value.reason == "timeout" and info.value.retry_at is not None
    assert isinstance(info.value.errors[0], InvalidProviderResponseError)


def test_other_4xx_excludes_for_the_call_without_cooldown(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=400))
    b = broker("a", "b")
    assert b.ask("hello").llm_name == "b"
    assert statuses(b.calls())[-1] == ("a", "error", 400)
    assert b.snapshot()["a"]["cooldown_until"] is None
    server.set_fault("a", None)
    assert b.ask("hello").llm_name == "a"  # excluded for that call only


def test_when_every_candidate_rejects_the_last_provider_error_is_raised(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=400))
    server.set_fault("b", FaultProfile(status=422))
    b = broker("a", "b")
    with pytest.raises(ProviderError) as info:
        b.ask("hello")
    assert info.value.status == 422 and info.value.llm_name == "b"
    assert not isinstance(info.value, NoLLMAvailableError)


def test_ask_waits_for_a_cooling_model_while_wait_allows(broker, server) -> None:
    b = broker("a")
    server.set_fault("a", FaultProfile(status=429, retry_after=0.3, every=2))
    assert b.ask("one").llm_name == "a"  # call 1 ok
    started = time.monotonic()
    result = b.ask("two", wait=5)  # call 2: 429, cools 0.3 s, then call 3 answers
    assert result.llm_name == "a" and 0.25 < time.monotonic() - started < 3
    assert [r["status"] for r in b.calls()[::-1]] == ["ok", "rate_limited", "ok"]


def test_retry_after_forms_seconds_http_date_and_milliseconds() -> None:
    """Providers say when to come back as seconds, an HTTP date, or (OpenAI) milliseconds."""
    from datetime import UTC, timedelta
    from email.utils import format_datetime

    import httpx

    from jevlaya_lab.broker.http import retry_after

    def answer(**headers: str) -> httpx.Response:
        return httpx.Response(429, headers=headers)

    assert retry_after(answer(**{"retry-after": "7"})) == 7.0
    assert retry_after(answer(**{"retry-after-ms": "250", "retry-after": "7"})) == 0.25
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < retry_after(answer(**{"retry-after": later})) <= 30
    assert retry_after(answer(**{"retry-after": "soon"})) is None
    assert retry_after(answer()) is None


def test_403_drops_the_model_for_that_caller_only_and_fails_over(broker, server) -> None:
    """401/403 -> drop that key for this caller and fail over (no cooldown)."""
    server.set_fault("a", FaultProfile(status=403))
    b = broker("a", "b")
    before = server.request_count("a")
    assert b.ask("hello").llm_name == "b"
    assert statuses(b.calls())[-1] == ("a", "error", 403)
    assert b.snapshot()["a"]["cooldown_until"] is None
    server.set_fault("a", None)
    assert b.ask("hello").llm_name == "b"  # dropped for this caller: a is not asked again
    assert server.request_count("a") == before + 1
    assert b.for_scope("other").ask("hello").llm_name == "a"  # another caller still may


def test_rate_limit_cooldown_doubling_stops_at_one_hour(tmp_path) -> None:
    """429/503 cooldowns double per consecutive failure *up to 1 h*."""
    from jevlaya_lab.broker.http import Failure
    from jevlaya_lab.broker.keys import KeyResolver
    from jevlaya_lab.broker.pool import Caller, Pool
    from jevlaya_lab.broker.quality import Quality
    from jevlaya_lab.journal import open_store

    pool = Pool([LLMConfig(name="m", base_url="http://127.0.0.1:9/v1", model="m")],
                KeyResolver(open_store(tmp_path / "p.db")), Quality())
    lengths = []
    for _ in range(4):
        until = pool.failed("m", Failure("rate_limited", "slow down", 429, 1000.0), Caller())
        lengths.append(round(until - time.time()))
        pool.states["m"].cooldown_until = 0.0  # as if it had come back, and failed again
    assert lengths == [1000, 2000, 3600, 3600]
