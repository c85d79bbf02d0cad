"""Streaming, rule by rule, from the Broker's seed page (003, "Потоковая выдача" and the sections
after it). Each test names the rule it checks. Models are tiny transformers behind the real local
server; FaultProfiles make them slow, cut, rate-limited or empty."""

from __future__ import annotations

import asyncio
import time

import pytest

from jevlaya_lab.broker import AsyncBroker, LLMConfig
from jevlaya_lab.broker.errors import (
    LLMRequestError,
    LLMTimeoutError,
    NoLLMAvailableError,
    ProviderError,
    StreamInterruptedError,
    StreamReplacementError,
)
from jevlaya_lab.local import FaultProfile


def statuses(rows):
    return [(r["llm_name"], r["status"]) for r in rows]


# -- ordinary streams -------------------------------------------------------------------------

def test_seed_deltas_arrive_as_produced_names_none_until_first_delta_usage_after_end(abroker):
    """Rule: llm_name and call_id are None before the first delta; usage is filled at the end."""
    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", operation="write")
            assert stream.llm_name is None and stream.call_id is None and stream.usage is None
            parts = []
            async for delta in stream:
                parts.append(delta)
                assert stream.llm_name == "a" and stream.call_id is not None
                if len(parts) == 1:
                    assert stream.usage is None
            assert len(parts) > 1 and stream.usage["completion_tokens"] >= 1
            await stream.record_quality(0.9)
            rows = await broker.calls()
            assert statuses(rows) == [("a", "ok")] and rows[0]["first_token_ms"] > 0
            assert (await broker.ratings())[0]["call_id"] == stream.call_id
    asyncio.run(main())


def test_seed_nothing_is_read_ahead_of_the_consumer(abroker):
    """Rule: the next part is requested only when the loop asks for it."""
    async def main() -> None:
        async with abroker("a") as broker:
            stream = broker.stream("write")
            await stream.__anext__()
            await asyncio.sleep(0.3)  # the server has produced everything by now
            assert len(stream._core.final.pieces) == 1
            rest = [d async for d in stream]
            assert len(rest) >= 1
    asyncio.run(main())


@pytest.mark.parametrize("fault,status", [(FaultProfile(status=500), "unavailable"),
                                          (FaultProfile(status=429), "rate_limited"),
                                          (FaultProfile(empty=True), "error")],
                         ids=["error", "rate-limit", "empty-answer"])
def test_seed_failover_before_the_first_delta(abroker, server, fault, status):
    """Rule: before the first part the broker moves on after an error, a rate limit, or an
    answer with neither text nor tool calls."""
    server.set_fault("a", fault)

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write")
            text = "".join([d async for d in stream])
            assert text and stream.llm_name == "b"
            assert statuses(await broker.calls()) == [("b", "ok"), ("a", status)]
    asyncio.run(main())


def test_seed_stream_never_tries_a_model_twice_and_reports_timeout_with_retry_at(abroker,
                                                                                server):
    """Rule: before the first part a stream never calls the same model twice; when those
    models are only blocked for a while it ends with reason="timeout" and retry_at."""
    server.set_fault("a", FaultProfile(status=429, retry_after=0.2))
    server.set_fault("b", FaultProfile(status=429, retry_after=30))
    before = server.request_count("a"), server.request_count("b")

    async def main() -> None:
        async with abroker("a", "b") as broker:
            with pytest.raises(NoLLMAvailableError) as info:
                async for _ in broker.stream("write", wait=10):
                    pass
            assert info.value.reason == "timeout"
            assert 0 < info.value.retry_at.timestamp() - time.time() <= 0.2
    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 2  # did not wait for a to come back, as ask would
    assert (server.request_count("a") - before[0], server.request_count("b") - before[1]) == (1, 1)


def test_seed_no_model_can_serve_when_every_model_rejects(abroker, server):
    """Rule: when no model can serve the request the stream ends at once (not "come back
    later"); when every model rejected it, the caller gets the last provider error, as from
    ask() (as llmbroker does)."""
    server.set_fault("a", FaultProfile(status=400))
    server.set_fault("b", FaultProfile(status=404))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            with pytest.raises(ProviderError) as info:
                async for _ in broker.stream("write"):
                    pass
            assert info.value.status == 404 and info.value.llm_name == "b"
            assert statuses(await broker.calls()) == [("b", "error"), ("a", "error")]
    asyncio.run(main())


def test_seed_timeout_counts_only_models_that_could_serve_this_caller(abroker, server,
                                                                       cfg, monkeypatch):
    """Rule: reason="timeout" with retry_at only when the models *available to this stream*
    are blocked for a while; a model cooling for another scope (whose key this caller lacks)
    does not turn "no model can serve" into "come back later"."""
    monkeypatch.delenv("TEAM_ONLY", raising=False)
    server.set_fault("a", FaultProfile(status=400))
    server.set_fault("b", FaultProfile(status=429, retry_after=30))
    team_model = LLMConfig(name="k", base_url=server.base_url, model="b",
                           api_key_ref="TEAM_ONLY")

    async def main() -> None:
        async with abroker(models=[*cfg("a"), team_model],
                           secrets={"team/TEAM_ONLY": "sk-team-0123456789"}) as broker:
            with pytest.raises(NoLLMAvailableError) as info:  # the team's k: 429, cooling
                async for _ in broker.for_scope("team").stream("write"):
                    pass
            assert info.value.reason == "timeout" and info.value.retry_at is not None
            with pytest.raises(ProviderError) as rejected:  # root: only a, which rejects
                async for _ in broker.stream("write"):
                    pass
            assert rejected.value.status == 400  # not "timeout": k is not this caller's
    asyncio.run(main())


def test_seed_broken_answer_after_first_delta_raises_interrupted_and_parts_stand(abroker,
                                                                                 server):
    """Rule: after the first part the model cannot change; a broken answer raises
    StreamInterruptedError and the parts already received stay with the application."""
    server.set_fault("a", FaultProfile(cut_after=3))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write")
            parts = []
            with pytest.raises(StreamInterruptedError):
                async for delta in stream:
                    parts.append(delta)
            assert len(parts) == 3 and stream.llm_name == "a"
            assert stream.text == "".join(parts)
            rows = await broker.calls()
            assert statuses(rows) == [("a", "unavailable")]  # b was never asked
            await stream.record_quality(0.0)  # a journaled partial answer can be rated
    asyncio.run(main())


# -- races -------------------------------------------------------------------------------------

def test_seed_race_first_complete_answer_wins_and_replacement_is_raised(abroker, server):
    """Rule: with fastest_of > 1 the first *complete* answer wins; if it is not the one shown,
    StreamReplacementError.replacement carries the full answer; parts of different models are
    never joined; several ok rows may share a trace_id."""
    server.set_fault("a", FaultProfile(token_delay=0.08))  # first text at once, finishes late
    server.set_fault("b", FaultProfile(first_token_delay=0.15))  # later text, finishes first

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=1.0)
            shown = []
            with pytest.raises(StreamReplacementError) as info:
                async for delta in stream:
                    shown.append(delta)
            replacement = info.value.replacement
            assert shown and replacement.llm_name == "b" and replacement.text
            assert stream.llm_name == "b" and stream.call_id == replacement.call_id
            assert [d async for d in stream] == []  # the iterator is finished
            other = await stream.another()  # the shown lane, kept running, completes
            assert other.llm_name == "a" and other.text.startswith("".join(shown))
            assert replacement.text != other.text or replacement.call_id != other.call_id
            await stream.record_quality(1.0)
            rows = await broker.calls(status="ok")
            assert len(rows) == 2 and len({r["trace_id"] for r in rows}) == 1
            assert (await broker.ratings())[0]["llm_name"] == "b"
            await replacement.record_quality(0.8)
            # two ok rows share the trace: rating by trace_id cannot tell which was shown
            with pytest.raises(ValueError, match="2 successful answers"):
                await broker.record_quality(0.5, trace_id=stream.trace_id)
    asyncio.run(main())


def test_seed_race_lanes_run_to_completion_whatever_the_reader_does(abroker, server):
    """Rule: every lane keeps working until one completes, independently of reading speed."""
    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=0)
            await stream.__anext__()
            await asyncio.sleep(0.4)  # the application holds the first delta
            rows = await broker.calls()
            assert sorted(statuses(rows)) == [("a", "ok"), ("b", "ok")]
            await stream.aclose()
    asyncio.run(main())


def test_seed_selection_window_waits_for_the_first_ranked_model(abroker, server):
    """Rule: during stream_selection_window the broker waits for the model first in line."""
    server.set_fault("a", FaultProfile(first_token_delay=0.3))
    server.set_fault("b", FaultProfile(token_delay=0.2))  # text at once, finishes late

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=2.0)
            started = time.monotonic()
            first = await stream.__anext__()
            assert first and stream.llm_name == "a"
            assert 0.25 < time.monotonic() - started < 2.0
            rest = [d async for d in stream]  # a finishes first: no replacement
            assert stream.llm_name == "a" and stream.text == first + "".join(rest)
    asyncio.run(main())


def test_seed_selection_window_expiry_shows_another_lane_and_is_no_error(abroker, server):
    """Rule: when the first model has not started within the window, data already received
    from another model is shown; this is neither an error nor a timeout."""
    server.set_fault("a", FaultProfile(first_token_delay=1.0))
    server.set_fault("b", FaultProfile(token_delay=0.15))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=0.2, wait=30)
            started = time.monotonic()
            await stream.__anext__()
            assert stream.llm_name == "b" and 0.15 < time.monotonic() - started < 0.95
            await stream.aclose()
            snap = (await broker.snapshot())["a"]  # no cooldown, no change to the order
            assert snap["cooldown_until"] is None and snap["missed_waits"] == []
    asyncio.run(main())


def test_seed_selection_window_stops_at_once_when_the_first_model_fails(abroker, server):
    """Rule: if the first model fails, waiting stops immediately."""
    server.set_fault("a", FaultProfile(status=500, latency=0.1))
    server.set_fault("b", FaultProfile(token_delay=0.05))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=5)
            started = time.monotonic()
            await stream.__anext__()
            assert stream.llm_name == "b" and time.monotonic() - started < 1.0
            await stream.aclose()
    asyncio.run(main())


def test_seed_selection_window_zero_shows_the_first_text_from_any_lane(abroker, server):
    """Rule: 0 means show the first text that arrives, whatever the order of the models."""
    server.set_fault("a", FaultProfile(first_token_delay=0.3))
    server.set_fault("b", FaultProfile(token_delay=0.1))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=0)
            shown = [await stream.__anext__()]
            assert stream.llm_name == "b"
            with pytest.raises(StreamReplacementError) as info:
                async for delta in stream:
                    shown.append(delta)
            assert info.value.replacement.llm_name == "a"  # a completed first
            late = await stream.another()
            assert late.llm_name == "b" and late.text.startswith("".join(shown))
    asyncio.run(main())


def test_seed_race_shown_lane_breaking_is_replaced_or_interrupted(abroker, server, cfg,
                                                                   tmp_path):
    """Rule: in a race the text shown is preliminary until an answer completes: when the lane
    shown breaks and another lane completes, StreamReplacementError carries that answer (never
    a splice); when no lane completes, StreamInterruptedError and the shown parts stand."""
    server.set_fault("a", FaultProfile(cut_after=2))
    server.set_fault("b", FaultProfile(first_token_delay=0.3))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=0)
            shown = []
            with pytest.raises(StreamReplacementError) as info:
                async for delta in stream:
                    shown.append(delta)
            assert len(shown) == 2 and info.value.replacement.llm_name == "b"
            assert stream.text == info.value.replacement.text
        # a pool of exactly c and d (a new file: the registry keeps a and b otherwise)
        async with AsyncBroker(tmp_path / "cd.db", models=cfg("c", "d"), catalog=[]) as broker:
            server.set_fault("c", FaultProfile(cut_after=2))
            server.set_fault("d", FaultProfile(cut_after=3, first_token_delay=0.3))
            stream = broker.stream("write", fastest_of=2, stream_selection_window=0)
            shown = []
            with pytest.raises(StreamInterruptedError):
                async for delta in stream:
                    shown.append(delta)
            assert len(shown) == 2 and stream.llm_name == "c" and stream.text == "".join(shown)
            assert sorted(r["status"] for r in await broker.calls(trace_id=stream.trace_id)) \
                == ["unavailable", "unavailable"]
    asyncio.run(main())


def test_seed_without_fastest_of_one_model_at_a_time_and_the_window_is_ignored(abroker,
                                                                               server):
    """Rule: with fastest_of unset or 1 only one model works on the answer and
    stream_selection_window changes nothing; the window's default is one second."""
    import inspect

    default = inspect.signature(AsyncBroker.stream).parameters["stream_selection_window"]
    assert default.default == 1.0
    server.set_fault("a", FaultProfile(first_token_delay=0.3))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            b_before = server.request_count("b")
            for window in (0, 5.0):
                stream = broker.stream("write", fastest_of=1, stream_selection_window=window)
                started = time.monotonic()
                assert [d async for d in stream] and stream.llm_name == "a"
                assert time.monotonic() - started < 4.0
            assert server.request_count("b") == b_before
    asyncio.run(main())


def test_seed_replacement_must_be_caught_before_llm_request_error():
    """Rule: handle StreamReplacementError before the more general LLMRequestError."""
    assert issubclass(StreamReplacementError, LLMRequestError)


# -- another() ---------------------------------------------------------------------------------

def test_seed_another_uses_retained_answers_then_untried_models_then_none_forever(abroker,
                                                                                   server):
    """Rule: another() takes retained attempts before untried pool models; None means no more
    complete answer in this call, and later calls return None too; nothing new starts unless
    another() is called."""
    async def main() -> None:
        async with abroker("a", "b", "c") as broker:
            stream = broker.stream("write", fastest_of=2)
            try:
                first = "".join([d async for d in stream])
                first_name = stream.llm_name
            except StreamReplacementError as exc:
                first, first_name = exc.replacement.text, exc.replacement.llm_name
            assert first
            c_before = server.request_count("c")
            await asyncio.sleep(0.2)
            assert server.request_count("c") == c_before  # holding the stream starts nothing
            second = await stream.another()
            assert {first_name, second.llm_name} == {"a", "b"}
            assert server.request_count("c") == c_before
            third = await stream.another()
            assert third.llm_name == "c" and server.request_count("c") == c_before + 1
            await third.record_quality(0.2)
            assert await stream.another() is None
            assert await stream.another() is None
            assert stream.llm_name == first_name  # the stream keeps its first final answer
    asyncio.run(main())


def test_seed_another_before_the_end_is_refused(abroker):
    async def main() -> None:
        async with abroker("a") as broker:
            stream = broker.stream("write")
            await stream.__anext__()
            with pytest.raises(ValueError, match="read the stream to its end"):
                await stream.another()
            await stream.aclose()
    asyncio.run(main())


# -- wait --------------------------------------------------------------------------------------

def test_seed_wait_bounds_the_whole_answer_timeout_after_first_delta(abroker, server):
    """Rule: wait limits the complete answer, not only the first part; after the first part
    LLMTimeoutError is raised and the parts stay; a model that started is not cooled but the
    short wait is remembered and the next equally short request prefers another model."""
    server.set_fault("a", FaultProfile(token_delay=0.1))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", wait=0.5)
            parts = []
            with pytest.raises(LLMTimeoutError):
                async for delta in stream:
                    parts.append(delta)
            assert 1 <= len(parts) < 16
            snap = (await broker.snapshot())["a"]
            assert snap["cooldown_until"] is None and snap["missed_waits"] == [0.5]
            short = broker.stream("write", wait=0.5)
            assert [d async for d in short] and short.llm_name == "b"
            long = broker.stream("write", wait=30)
            assert [d async for d in long] and long.llm_name == "a"
    asyncio.run(main())


@pytest.mark.parametrize("fastest_of", [1, 2], ids=["single", "race"])
def test_seed_an_answer_cut_off_by_wait_cannot_be_rated(abroker, server, fastest_of):
    """Rule: an unfinished answer cannot be rated: record_quality on its object raises (here:
    the answer wait cut off after its first part; the partial text stays with the app)."""
    server.set_fault("a", FaultProfile(token_delay=0.1))
    server.set_fault("b", FaultProfile(token_delay=0.1))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", wait=0.5, fastest_of=fastest_of,
                                   stream_selection_window=0)
            parts = []
            with pytest.raises(LLMTimeoutError):
                async for delta in stream:
                    parts.append(delta)
            assert parts and stream.text.startswith("".join(parts))
            with pytest.raises(ValueError, match="did not complete within wait=0.5"):
                await stream.record_quality(0.0)
            await stream.aclose()
            assert await broker.ratings() == []
            rows = await broker.calls()
            assert len(rows) == fastest_of and all(r["status"] != "ok" for r in rows)
    asyncio.run(main())


def test_seed_wait_before_first_delta_raises_no_llm_and_cools_the_silent_model(abroker,
                                                                               server):
    """Rule: time out before the first part -> NoLLMAvailableError; a model that sent nothing
    within wait is excluded for a while."""
    server.set_fault("a", FaultProfile(first_token_delay=1.0))

    async def main() -> None:
        async with abroker("a") as broker:
            started = time.monotonic()
            with pytest.raises(NoLLMAvailableError) as info:
                async for _ in broker.stream("write", wait=0.3):
                    pass
            assert info.value.reason == "timeout" and time.monotonic() - started < 0.95
            snap = (await broker.snapshot())["a"]  # cooled, and the short wait remembered
            assert snap["cooldown_until"] is not None and snap["missed_waits"] == [0.3]
    asyncio.run(main())


def test_seed_clock_pauses_while_the_application_holds_a_delta(abroker, server):
    """Rule: time the application spends on a part is not counted; the clock resumes on the
    next pull."""
    # model c: earlier tests may leave a's server queue busy with a cancelled slow answer
    server.set_fault("c", FaultProfile(token_delay=0.01))

    async def main() -> None:
        async with abroker("c") as broker:
            stream = broker.stream("write", wait=1.0)
            parts = []
            async for delta in stream:
                parts.append(delta)
                await asyncio.sleep(0.15)  # 16 deltas * 0.15 s >> wait
            assert len(parts) > 5 and stream.usage is not None
    asyncio.run(main())


def test_seed_after_the_first_answer_the_clock_runs_on_and_no_new_request_starts(abroker,
                                                                                 server):
    """Rule: after the first complete answer the clock runs continuously (validation and
    another()); no new provider request starts after wait ran out."""
    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", wait=1.5)
            assert [d async for d in stream]
            b_before = server.request_count("b")
            await asyncio.sleep(1.6)  # "validation" longer than what is left of wait
            assert await stream.another() is None
            assert server.request_count("b") == b_before
    asyncio.run(main())


# -- closing -----------------------------------------------------------------------------------

def test_seed_aclose_cancels_the_request_releases_the_slot_and_partial_can_be_rated(abroker,
                                                                                   server, db):
    """Rule: closing interrupts unfinished attempts, waits for the journal and the slots; a
    partial reply can be rated after closing while the broker is open."""
    server.set_fault("a", FaultProfile(token_delay=0.2))

    async def main() -> None:
        async with abroker("a") as broker:
            stream = broker.stream("write")
            await stream.__anext__()
            with pytest.raises(ValueError, match="not ended"):
                await stream.record_quality(0.5)  # rule: no rating before it is journaled
            await stream.aclose()
            from jevlaya_lab.journal import open_store
            raw = open_store(db)  # aclose returned only once its row was in the file
            assert [r["status"] for r in raw.attempts()] == ["cancelled"]
            raw.close()
            assert (await broker.snapshot())["a"]["in_flight"] == 0
            assert statuses(await broker.calls()) == [("a", "cancelled")]
            await stream.record_quality(0.0)
            assert [d async for d in stream] == []
    asyncio.run(main())


@pytest.mark.parametrize("how", ["aclose", "context-on-error", "broker-exit"])
def test_seed_closing_cancels_the_provider_request(abroker, server, how):
    """Rule: closing interrupts unfinished attempts: the provider stops generating (a model
    generates one answer at a time, so the next request is served at once, not after the
    ~5 s the abandoned answer would take); the stream's context closes on errors too."""
    server.set_fault("d", FaultProfile(token_delay=0.3))  # 16 pieces: ~5 s if left running

    async def main() -> None:
        async with abroker("d") as broker:
            stream = broker.stream("write")
            if how == "context-on-error":
                with pytest.raises(KeyError):
                    async with stream:
                        await stream.__anext__()
                        raise KeyError("the application failed")
            else:
                await stream.__anext__()
                if how == "aclose":
                    await stream.aclose()
        if how == "broker-exit":
            assert stream._core.closed
        server.set_fault("d", None)
        async with abroker("d") as broker:
            started = time.monotonic()
            assert (await broker.ask("next")).text
            assert time.monotonic() - started < 2.5
            rows = await broker.calls()
            assert [r["status"] for r in rows] == ["ok", "cancelled"]  # newest first
    asyncio.run(main())


def test_seed_break_does_not_close_the_stream_but_its_context_does(abroker, server):
    """Rule: a break does not close the stream; the optional context releases it at once."""
    server.set_fault("a", FaultProfile(token_delay=0.2))

    async def main() -> None:
        async with abroker("a") as broker:
            stream = broker.stream("write")
            async for _ in stream:
                break
            assert (await broker.snapshot())["a"]["in_flight"] == 1
            async with stream:
                pass
            assert (await broker.snapshot())["a"]["in_flight"] == 0
            async with broker.stream("write") as other:
                async for _ in other:
                    break
            assert (await broker.snapshot())["a"]["in_flight"] == 0
    asyncio.run(main())


def test_seed_leaving_the_broker_closes_its_streams_and_journals_them(abroker, server, db):
    """Rule: the broker owns its streams; leaving its context closes unfinished work and waits
    for journal writes."""
    server.set_fault("a", FaultProfile(token_delay=0.2))
    server.set_fault("b", FaultProfile(token_delay=0.2))

    async def main() -> None:
        async with abroker("a", "b") as broker:
            single = broker.stream("write")
            await single.__anext__()
            race = broker.stream("write", fastest_of=2, stream_selection_window=0)
            await race.__anext__()
    asyncio.run(main())
    from jevlaya_lab.journal import open_store
    rows = open_store(db).attempts()
    assert sorted(r["status"] for r in rows) == ["cancelled", "cancelled", "superseded"]


def test_seed_garbage_collection_of_an_unclosed_stream_cancels_the_request(abroker, server):
    """Rule: GC of an unclosed stream cancels the provider request without blocking."""
    server.set_fault("a", FaultProfile(token_delay=0.2))

    async def main() -> None:
        async with abroker("a") as broker:
            stream = broker.stream("write")
            await stream.__anext__()
            del stream
            import gc
            gc.collect()
            for _ in range(50):
                await asyncio.sleep(0.02)
                if (await broker.snapshot())["a"]["in_flight"] == 0:
                    break
            assert (await broker.snapshot())["a"]["in_flight"] == 0
            assert statuses(await broker.calls()) == [("a", "cancelled")]
    asyncio.run(main())


def test_seed_answer_completed_in_time_can_be_had_from_memory_after_wait_ran_out(abroker,
                                                                                   server):
    """Rule: an answer completed before the time ran out can still be taken from memory later,
    but no new provider request starts after it."""
    server.set_fault("b", FaultProfile(first_token_delay=0.1))

    async def main() -> None:
        async with abroker("a", "b", "c") as broker:
            stream = broker.stream("write", fastest_of=2, wait=2.0, stream_selection_window=0)
            try:
                assert [d async for d in stream]
            except StreamReplacementError:
                pass
            await asyncio.sleep(0.5)  # b completes in time while the application validates
            await asyncio.sleep(1.6)  # ... and now wait has run out
            c_before = server.request_count("c")
            kept = await stream.another()
            assert kept is not None and kept.llm_name in {"a", "b"}
            assert await stream.another() is None
            assert server.request_count("c") == c_before
    asyncio.run(main())


def test_seed_another_after_close_returns_none(abroker):
    """Rule: another() works while the stream is open; once closed it returns None."""
    async def main() -> None:
        async with abroker("a", "b") as broker:
            async with broker.stream("write") as stream:
                assert [d async for d in stream]
            assert await stream.another() is None
    asyncio.run(main())
