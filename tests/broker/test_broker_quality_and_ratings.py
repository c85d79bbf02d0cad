"""Learned quality per (model, operation), demotion, ratings, the learned wait bound."""

from __future__ import annotations

import pytest

from jevlaya_lab.broker import Broker
from jevlaya_lab.broker.errors import NoLLMAvailableError
from jevlaya_lab.local import FaultProfile


def test_low_ratings_change_the_chosen_model(broker) -> None:
    b = broker("a", "b")
    first = b.ask("hello", operation="write")
    assert first.llm_name == "a"  # equal priors: registry order
    first.record_quality(0.0)
    assert b.ask("hello", operation="write").llm_name == "b"
    assert b.ask("hello", operation="other").llm_name == "a"  # per (model, operation)


def test_prior_weight_is_blended_with_host_ratings(broker, cfg) -> None:
    b = broker(models=[*cfg("a", weight=0.9), *cfg("b", weight=0.5)])
    assert b.ask("x").llm_name == "a"
    b.record_quality(0.0, call_id=b.calls(limit=1)[0]["call_id"])  # the newest call
    assert b.ask("x").llm_name == "a"  # one bad rating does not beat a strong prior
    for _ in range(4):
        b.record_quality(0.0, call_id=b.ask("x").call_id)
    assert b.ask("x").llm_name == "b"
    assert b.stats()["a"]["ratings"] == 5 and b.stats()["a"]["mean_rating"] == 0.0


def test_demotion_after_enough_bad_ratings_beats_priority(broker, cfg) -> None:
    b = broker(models=[*cfg("a", weight=1.0), *cfg("b", weight=0.0)])
    for _ in range(9):
        b.ask("x", operation="op").record_quality(0.0)
    # priority of a is still (5*1.0 + 0) / 14 = 0.36 > 0.0 but not yet demoted (9 ratings)
    assert b.ask("x", operation="op").llm_name == "a"
    b.calls()  # flush
    b.record_quality(0.0, call_id=b.calls(limit=1)[0]["call_id"])  # the newest call
    assert b.snapshot()["a"]["demoted_for"] == ["op"]
    assert b.ask("x", operation="op").llm_name == "b"


def test_ratings_persist_in_the_journal_and_seed_the_next_broker(server, db, cfg) -> None:
    with Broker(db, models=cfg("a", "b"), catalog=[]) as b:
        b.ask("x").record_quality(0.0)
        assert len(b.ratings()) == 1
    with Broker(db, models=cfg("a", "b"), catalog=[]) as b:
        assert b.ask("x").llm_name == "b"


def test_record_quality_by_trace_id_and_its_errors(broker, server) -> None:
    b = broker("a", "b")
    result = b.ask("x", trace_id="trace-1")
    b.record_quality(1.0, trace_id="trace-1")
    assert b.ratings()[0]["call_id"] == result.call_id
    with pytest.raises(ValueError, match="exactly one of"):
        b.record_quality(1.0)
    with pytest.raises(ValueError, match="no journaled answer"):
        b.record_quality(1.0, call_id="nope")
    for bad in (1.5, -0.1, float("nan"), "good", True):
        with pytest.raises(ValueError, match="score="):
            result.record_quality(bad)
    server.set_fault("a", FaultProfile(latency=0.3))
    b.ask("x", trace_id="trace-2", fastest_of=2)
    b.calls()
    # two answers may share a trace (a race lane that lost is superseded, not ok): still one ok
    b.record_quality(0.5, trace_id="trace-2")
    with pytest.raises(ValueError, match="0 successful answers"):
        b.record_quality(0.5, trace_id="no-such-trace")


def test_a_missed_wait_is_remembered_and_cools_a_silent_model(broker, server) -> None:
    server.set_fault("a", FaultProfile(latency=1.0))
    b = broker("a", "b")
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("x", wait=0.3)
    assert info.value.reason == "timeout"
    snap = b.snapshot()["a"]
    assert snap["missed_waits"] == [0.3] and snap["cooldown_until"] is not None
    assert b.ask("x", wait=0.3).llm_name == "b"


def test_optimize_false_ranks_by_registry_order_only(broker) -> None:
    b = broker("a", "b", optimize=False)
    b.ask("x").record_quality(0.0)
    assert b.ask("x").llm_name == "a"
