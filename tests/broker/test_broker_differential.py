"""Differential tests: the same scenarios against our Broker and against ``llmbroker==1.11.0``
(a test-only black box, installed ``--no-deps`` by the Makefile), through one small adapter,
asserting the same observable outcomes: which model answered or which error came, the journal
rows ``calls()`` lists (newest first) and their scores, the stream rules of the seed.

Where the two differ on purpose, ``test_deliberate_differences`` pins both sides, so the README
list ("Differences from llmbroker") stays true. Both run with their defaults
(``parallel_recovery=True``); its scenarios put a model into recovery with a 429 and
``Retry-After: 1``.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model

# The reference is part of the dev setup (Makefile: pip install --no-deps llmbroker==1.11.0
# tomli-w aiosqlite pyyaml); a missing one fails here rather than skipping the comparison.
import llmbroker  # noqa: E402
import llmbroker.sqlite as llmbroker_sqlite  # noqa: E402

assert importlib.metadata.version("llmbroker") == "1.11.0", "the reference is llmbroker 1.11.0"

RIGHT, WRONG = "sk-right-0123456789abcdef", "sk-wrong-0123456789abcdef"


@dataclass
class Outcome:
    """What a call ended with, in terms both brokers share."""

    kind: str  # "answer" or the exception class name
    llm_name: str | None = None
    status: int | None = None
    reason: str | None = None
    parts: list[str] = field(default_factory=list)
    replacement: str | None = None
    streamed: str | None = None  # StreamReplacementError.streamed_llm_name
    broken: str | None = None  # StreamInterruptedError.llm_name


def outcome_of(run: Callable[[], Any]) -> Outcome:
    try:
        result = run()
    except Exception as exc:  # noqa: BLE001 - the class name is the observable outcome
        replacement = getattr(exc, "replacement", None)
        return Outcome(type(exc).__name__, status=getattr(exc, "status", None),
                       reason=getattr(exc, "reason", None),
                       replacement=getattr(replacement, "llm_name", None),
                       streamed=getattr(exc, "streamed_llm_name", None),
                       broken=getattr(exc, "llm_name", None)
                       if type(exc).__name__ == "StreamInterruptedError" else None)
    return result if isinstance(result, Outcome) else Outcome("answer", result.llm_name)


class Side:
    """One broker behind the adapter: ask, stream, rate, journal rows, cooling."""

    name = ""
    call_kwargs: dict[str, Any] = {}

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def ask(self, prompt: str, **kwargs: Any) -> Outcome:
        return outcome_of(lambda: self.broker.ask(prompt, **self.call_kwargs, **kwargs))

    def stream(self, prompt: str, **kwargs: Any) -> Outcome:
        stream = self.broker.stream(prompt, **self.call_kwargs, **kwargs)
        parts: list[str] = []

        def read() -> Outcome:
            for part in stream:
                parts.append(part)
            return Outcome("answer", stream.llm_name)
        got = outcome_of(read)
        got.parts = parts
        got.llm_name = got.llm_name or stream.llm_name
        self.last_stream = stream
        return got

    def rows(self, limit: int = 20) -> list[tuple[str, str, int | None, float | None, str]]:
        """(llm_name, status, http_status, score, trace_id), newest first."""
        raise NotImplementedError

    def cooling(self, name: str) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        self.broker.close()

    def reopen(self) -> Side:
        """Close this broker and open a new one of the same kind on the same database."""
        self.close()
        return type(self)(*self.args)


class Ours(Side):
    name = "jevlaya_lab"

    def __init__(self, configs: list[dict[str, str]], secrets: dict[str, str],
                 tmp: Path, direct: tuple[dict[str, str], ...] = ()) -> None:
        self.args = (configs, secrets, tmp, direct)
        super().__init__(Broker(tmp / "ours.db", models=[LLMConfig(**c) for c in configs],
                                secrets=secrets, catalog=[], dotenv=tmp / "none.env",
                                direct=[LLMConfig(**c) for c in direct]))

    def rows(self, limit: int = 20) -> list[tuple[str, str, int | None, float | None, str]]:
        return [(r["llm_name"], r["status"], r["http_status"], r["score"], r["trace_id"])
                for r in self.broker.calls(limit=limit)]

    def cooling(self, name: str) -> bool:
        return self.broker.snapshot()[name]["cooldown_until"] is not None


class Theirs(Side):
    name = "llmbroker"

    def __init__(self, configs: list[dict[str, str]], secrets: dict[str, str],
                 tmp: Path, direct: tuple[dict[str, str], ...] = ()) -> None:
        self.args = (configs, secrets, tmp, direct)

        class Registry:
            async def load(self) -> list[Any]:
                return [llmbroker.LLMConfig(**c) for c in configs]
        super().__init__(llmbroker.Broker(
            Registry(), secrets=llmbroker.DictSecrets(secrets),
            store=llmbroker_sqlite.Store(tmp / "theirs.db"), sync=None, home=tmp / "home",
            direct=[llmbroker.LLMConfig(**c) for c in direct]))

    def rows(self, limit: int = 20) -> list[tuple[str, str, int | None, float | None, str]]:
        return [(c.llm_name, str(getattr(c.status, "value", c.status)), c.http_status, c.score,
                 c.trace_id) for c in self.broker.calls(limit=limit)]

    def cooling(self, name: str) -> bool:
        return self.broker.snapshot()[name].cooldown_until is not None


@pytest.fixture(scope="module")
def locked() -> Iterator[Any]:
    """A server that checks the API key (for 401)."""
    with serve({"k1": tiny_chat_model(seed=11, name="k1"),
                "k2": tiny_chat_model(seed=12, name="k2")}, api_key=RIGHT) as srv:
        yield srv


@pytest.fixture
def pair(server: Any, tmp_path: Path) -> Iterator[Callable[..., tuple[Side, Side]]]:
    """``pair("a", "b")``: our broker and llmbroker over the same models of the local server."""
    made: list[Side] = []

    def make(*names: str, configs: list[dict[str, str]] | None = None,
             secrets: dict[str, str] | None = None,
             theirs_serve: dict[str, str] | None = None,
             direct: tuple[dict[str, str], ...] = ()) -> tuple[Side, Side]:
        """``theirs_serve`` maps a name to another served model for llmbroker's side, so
        lanes still running for one side never queue the other's requests."""
        configs = configs or [{"name": n, "base_url": server.base_url, "model": n,
                               "api_key_ref": "KEY"} for n in names]
        theirs = [{**c, "model": (theirs_serve or {}).get(c["name"], c["model"])}
                  for c in configs]
        secrets = secrets or {"KEY": "sk-local-0123456789"}
        sides = (Ours(configs, secrets, tmp_path / f"o{len(made)}", direct),
                 Theirs(theirs, secrets, tmp_path / f"t{len(made)}", direct))
        made.extend(sides)
        return sides
    for n in range(8):
        (tmp_path / f"o{n}").mkdir()
        (tmp_path / f"t{n}").mkdir()
    yield make
    for side in made:
        side.close()


def same(ours: Any, theirs: Any) -> Any:
    assert ours == theirs, f"jevlaya_lab: {ours!r}\nllmbroker:   {theirs!r}"
    return ours


def both(sides: tuple[Side, Side], action: Callable[[Side], Any]) -> Any:
    return same(*(action(side) for side in sides))


# -- the failure table -------------------------------------------------------------------------
@pytest.mark.parametrize(("fault", "journaled"), [
    (FaultProfile(status=429, retry_after=30), ("a", "rate_limited", 429)),
    (FaultProfile(status=503, retry_after=20), ("a", "unavailable", 503)),
], ids=["429", "503"])
def test_rate_limits_cool_the_model_and_fail_over(pair, server, fault, journaled) -> None:
    sides = pair("a", "b")
    server.set_fault("a", fault)
    assert both(sides, lambda s: s.ask("hi")) == Outcome("answer", "b")
    assert both(sides, lambda s: [r[:3] for r in s.rows()]) == [("b", "ok", 200), journaled]
    assert both(sides, lambda s: (s.cooling("a"), s.cooling("b"))) == (True, False)
    assert both(sides, lambda s: s.ask("again")) == Outcome("answer", "b")  # a still cools


@pytest.mark.parametrize("fault", [FaultProfile(status=500), FaultProfile(status=502),
                                   FaultProfile(garbage=True), FaultProfile(empty=True)],
                         ids=["500", "502", "garbage", "empty"])
def test_server_errors_and_unusable_answers_fail_over_with_a_cooldown(pair, server,
                                                                      fault) -> None:
    sides = pair("a", "b")
    server.set_fault("a", fault)
    assert both(sides, lambda s: s.ask("hi")) == Outcome("answer", "b")
    assert both(sides, lambda s: [r[0] for r in s.rows()]) == ["b", "a"]
    assert both(sides, lambda s: s.cooling("a")) is True


def test_every_model_rejecting_raises_the_providers_error(pair, server) -> None:
    sides = pair("a", "b")
    for name in ("a", "b"):
        server.set_fault(name, FaultProfile(status=400))
    assert both(sides, lambda s: s.ask("hi")) == Outcome("ProviderError", status=400)
    assert both(sides, lambda s: sorted(r[:3] for r in s.rows())) == [
        ("a", "error", 400), ("b", "error", 400)]
    assert both(sides, lambda s: (s.cooling("a"), s.cooling("b"))) == (False, False)


def test_a_stream_every_model_rejects_raises_the_providers_error(pair, server) -> None:
    sides = pair("a", "b")
    for name in ("a", "b"):
        server.set_fault(name, FaultProfile(status=400))
    assert same(*((o.kind, o.status) for o in (s.stream("hi") for s in sides))) == \
        ("ProviderError", 400)


def test_a_refused_key_fails_over_to_a_model_with_another_key(pair, locked) -> None:
    configs = [{"name": n, "base_url": locked.base_url, "model": n, "api_key_ref": ref}
               for n, ref in (("k1", "BAD_KEY"), ("k2", "GOOD_KEY"))]
    sides = pair(configs=configs, secrets={"BAD_KEY": WRONG, "GOOD_KEY": RIGHT})
    assert both(sides, lambda s: s.ask("hi")) == Outcome("answer", "k2")
    assert both(sides, lambda s: s.ask("again")) == Outcome("answer", "k2")
    assert both(sides, lambda s: [r[:3] for r in s.rows()]) == [
        ("k2", "ok", 200), ("k2", "ok", 200), ("k1", "error", 401)]  # k1 is not asked again


# -- streaming rules (the seed) ----------------------------------------------------------------
def test_a_stream_gives_the_whole_answer_in_parts(pair) -> None:
    sides = pair("a", "b")
    got = [side.stream("hi") for side in sides]
    assert same(*((o.kind, o.llm_name) for o in got)) == ("answer", "a")
    assert all(o.parts and "".join(o.parts) == s.last_stream.text
               for o, s in zip(got, sides, strict=True) if hasattr(s.last_stream, "text"))
    assert both(sides, lambda s: [r[:3] for r in s.rows()]) == [("a", "ok", 200)]


def test_a_stream_fails_over_before_its_first_delta(pair, server) -> None:
    sides = pair("a", "b")
    server.set_fault("a", FaultProfile(status=500))
    assert same(*((o.kind, o.llm_name) for o in (s.stream("hi") for s in sides))) == \
        ("answer", "b")
    assert both(sides, lambda s: [r[0] for r in s.rows()]) == ["b", "a"]


def test_a_stream_broken_after_its_first_delta_raises_and_the_parts_stand(pair, server) -> None:
    sides = pair("a", "b")
    server.set_fault("a", FaultProfile(cut_after=2))
    got = same(*((o.kind, len(o.parts), o.broken) for o in (s.stream("hi") for s in sides)))
    assert got == ("StreamInterruptedError", 2, "a")
    assert both(sides, lambda s: [r[0] for r in s.rows()]) == ["a"]  # b is not asked
    # (the status of that row differs on purpose: test_deliberate_differences)


def test_a_race_won_by_the_lane_not_shown_raises_the_replacement(pair, server) -> None:
    sides = pair("a", "b", theirs_serve={"a": "c", "b": "d"})
    for name in ("a", "c"):
        server.set_fault(name, FaultProfile(token_delay=0.25))  # text at once, finishes late
    for name in ("b", "d"):
        server.set_fault(name, FaultProfile(first_token_delay=0.5))  # later, finishes first
    got = [s.stream("hi", fastest_of=2, stream_selection_window=0) for s in sides]
    assert same(*((o.kind, o.replacement, o.streamed, bool(o.parts)) for o in got)) == \
        ("StreamReplacementError", "b", "a", True)
    more = both(sides, lambda s: getattr(s.last_stream.another(), "llm_name", None))
    assert more == "a"  # the retained lane is the next complete answer
    assert both(sides, lambda s: sorted(r[:2] for r in s.rows())) == [("a", "ok"), ("b", "ok")]


# -- parallel_recovery: a model back from a cooldown is raced with the next one --------------
def into_recovery(sides: tuple[Side, Side], server: Any, then: FaultProfile | None,
                  *names: str) -> None:
    """A 429 with Retry-After: 1 on ``names`` (each side fails over), then ``then``."""
    for name in names:
        server.set_fault(name, FaultProfile(status=429, retry_after=1))
    both(sides, lambda s: s.ask("cool", trace_id="cool").kind)
    for name in names:
        server.set_fault(name, then)
    time.sleep(1.2)


def traced(side: Side, trace_id: str, rows: int) -> list[tuple[str, str]]:
    """The (llm_name, status) rows of ``trace_id``, once ``rows`` of them are journaled
    (llmbroker writes a superseded lane's row in the background; 3 s at most)."""
    deadline = time.monotonic() + 3.0
    while True:
        got = sorted((r[0], r[1]) for r in side.rows(limit=50) if r[4] == trace_id)
        if len(got) >= rows or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_a_recovering_model_is_raced_with_the_next_one(pair, server) -> None:
    sides = pair("a", "b", theirs_serve={"a": "c", "b": "d"})
    into_recovery(sides, server, FaultProfile(latency=1.0), "a", "c")
    assert both(sides, lambda s: s.ask("x", trace_id="t1")) == Outcome("answer", "b")
    assert both(sides, lambda s: traced(s, "t1", 2)) == [("a", "superseded"), ("b", "ok")]
    assert both(sides, lambda s: s.ask("y", trace_id="t2", parallel_recovery=False)) == \
        Outcome("answer", "a")
    assert both(sides, lambda s: traced(s, "t2", 1)) == [("a", "ok")]


def test_a_stream_races_a_silent_recovering_model(pair, server) -> None:
    sides = pair("a", "b", theirs_serve={"a": "c", "b": "d"})
    into_recovery(sides, server, FaultProfile(first_token_delay=1.0), "a", "c")
    assert same(*((o.kind, o.llm_name) for o in (s.stream("x", trace_id="s1")
                                                 for s in sides))) == ("answer", "b")
    both(sides, lambda s: s.last_stream.close())  # a's lane still runs: closing ends it
    assert both(sides, lambda s: traced(s, "s1", 2)) == [("a", "superseded"), ("b", "ok")]


def test_a_streamed_recovering_model_stays_the_answer(pair, server) -> None:
    sides = pair("a", "b", theirs_serve={"a": "c", "b": "d"})
    into_recovery(sides, server, FaultProfile(token_delay=0.1), "a", "c")
    for name in ("b", "d"):  # starts after a, finishes long before it
        server.set_fault(name, FaultProfile(first_token_delay=0.3))
    got = [s.stream("x", trace_id="s1") for s in sides]
    assert same(*((o.kind, o.llm_name) for o in got)) == ("answer", "a")  # no replacement
    assert both(sides, lambda s: getattr(s.last_stream.another(), "llm_name", None)) == "b"
    assert both(sides, lambda s: traced(s, "s1", 2)) == [("a", "ok"), ("b", "ok")]


def test_parallel_recovery_must_be_true_or_false(pair, server) -> None:
    sides = pair("a")
    assert both(sides, lambda s: [s.ask("x", parallel_recovery=v).kind
                                  for v in ("yes", None, 1)]) == ["ValueError"] * 3


# -- ratings and the journal -------------------------------------------------------------------
def test_calls_are_newest_first_with_the_latest_rating_as_score(pair) -> None:
    sides = pair("a")
    for side in sides:
        answers = [side.broker.ask(f"q{i}", trace_id=f"t{i}", **side.call_kwargs)
                   for i in range(3)]
        answers[1].record_quality(0.2)
        answers[1].record_quality(0.9)
        side.traces = [r.trace_id if hasattr(r, "trace_id") else r["trace_id"]
                       for r in side.broker.calls(limit=2)]
    same(sides[0].traces, sides[1].traces)
    assert sides[0].traces == ["t2", "t1"]
    assert both(sides, lambda s: [r[3] for r in s.rows()]) == [None, 0.9, None]


# -- pool administration -----------------------------------------------------------------------
def test_disable_llm_persists_in_the_database_until_enable_llm(pair) -> None:
    sides = pair("a", "b")
    both(sides, lambda s: s.broker.disable_llm("a"))
    assert both(sides, lambda s: s.ask("hi")) == Outcome("answer", "b")
    sides = tuple(s.reopen() for s in sides)
    try:
        assert both(sides, lambda s: (s.broker.get("a").disabled, s.broker.count())) == \
            (True, 2)
        assert both(sides, lambda s: s.ask("again")) == Outcome("answer", "b")
        both(sides, lambda s: s.broker.enable_llm("a"))
        sides = tuple(s.reopen() for s in sides)
        assert both(sides, lambda s: s.broker.get("a").disabled) is False
        assert both(sides, lambda s: s.ask("and again")) == Outcome("answer", "a")
        assert both(sides, lambda s: outcome_of(lambda: s.broker.get("zzz")).kind) == "KeyError"
        assert both(sides, lambda s: s.broker.ensure_pool()) is None
    finally:
        for side in sides:
            side.close()


# -- direct(): aliases, names, direct-only entries ---------------------------------------------
def direct_entry(server: Any) -> dict[str, str]:
    return {"name": "dx", "base_url": server.base_url, "model": "c", "api_key_ref": "KEY",
            "alias": "fast"}


def test_direct_reaches_a_declared_model_by_alias_or_name_outside_the_pool(pair, server) -> None:
    sides = pair("a", "b", direct=(direct_entry(server),))
    before = server.request_count("c")
    assert both(sides, lambda s: bool(s.broker.direct("fast").ask("hi").text)) is True
    assert both(sides, lambda s: bool(s.broker.direct(name="dx").ask("hi").text)) is True
    assert both(sides, lambda s: len("".join(s.broker.direct("fast").stream("hi"))) > 0)
    assert server.request_count("c") == before + 6  # three requests per side
    assert both(sides, lambda s: (s.broker.count(), "dx" in s.broker.snapshot())) == (2, False)
    assert both(sides, lambda s: s.ask("pooled")) == Outcome("answer", "a")
    assert both(sides, lambda s: [r[0] for r in s.rows()]) == ["a"]  # direct: no journal row


@pytest.mark.parametrize(("args", "kwargs", "kind"), [
    ((), {}, "ValueError"), (("fast",), {"name": "dx"}, "ValueError"),
    (("zzz",), {}, "Unknown"), ((), {"name": "zzz"}, "Unknown"), ((), {"name": "fast"}, "Unknown"),
], ids=["neither", "both", "unknown-alias", "unknown-name", "alias-as-name"])
def test_direct_refuses_what_names_no_declared_model(pair, server, args, kwargs, kind) -> None:
    sides = pair("a", direct=(direct_entry(server),))
    kinds = both(sides, lambda s: outcome_of(lambda: s.broker.direct(*args, **kwargs)).kind
                 .replace("UnknownLLMError", "Unknown").replace("UnknownModelError", "Unknown"))
    assert kinds == kind


def test_an_alias_names_one_entry(pair, server, tmp_path) -> None:
    twice = ({**direct_entry(server), "name": "d1"}, {**direct_entry(server), "name": "d2"})
    kinds = []
    for side in (Ours, Theirs):
        (tmp_path / side.name).mkdir()
        kinds.append(outcome_of(lambda side=side: side(  # llmbroker refuses on first use
            [], {"KEY": "k"}, tmp_path / side.name, twice).broker.direct("fast")).kind)
    assert same(*kinds) == "ValueError"


# -- validation --------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{"wait": math.nan}, {"bogus": 1}, {"fastest_of": 0}],
                         ids=["nan-wait", "unknown-keyword", "fastest_of-0"])
def test_bad_arguments_are_refused_before_any_request(pair, server, kwargs) -> None:
    sides = pair("a")
    before = server.request_count("a")
    kinds = both(sides, lambda s: s.ask("hi", **kwargs).kind)
    assert kinds in ("ValueError", "TypeError")
    assert server.request_count("a") == before


# -- deliberate differences (each listed in the README with its reason) -----------------------
DIFFERENCES: dict[str, tuple[Callable[..., Any], Any, Any]] = {}


def difference(name: str, ours: Any, theirs: Any) -> Callable[[Callable[..., Any]], Any]:
    def register(scenario: Callable[..., Any]) -> Callable[..., Any]:
        DIFFERENCES[name] = (scenario, ours, theirs)
        return scenario
    return register


@difference("negative wait", "ValueError", "NoLLMAvailableError")
def _negative_wait(sides: tuple[Side, Side], server: Any) -> list[str]:
    return [s.ask("hi", wait=-1).kind for s in sides]


@difference("5xx journal status", "unavailable", "error")
def _status_of_500(sides: tuple[Side, Side], server: Any) -> list[str]:
    server.set_fault("a", FaultProfile(status=500))
    return [(s.ask("hi"), s.rows()[-1][1])[1] for s in sides]


@difference("408", ("unavailable", True), ("error", False))
def _status_of_408(sides: tuple[Side, Side], server: Any) -> list[tuple[str, bool]]:
    server.set_fault("a", FaultProfile(status=408))
    return [(s.ask("hi"), (s.rows()[-1][1], s.cooling("a")))[1] for s in sides]


@difference("http_status of a garbage 200", 200, None)
def _garbage_status(sides: tuple[Side, Side], server: Any) -> list[int | None]:
    server.set_fault("a", FaultProfile(garbage=True))
    return [(s.ask("hi"), s.rows()[-1][2])[1] for s in sides]


@difference("journal status of a stream cut after its first delta", "unavailable", "error")
def _status_of_a_cut(sides: tuple[Side, Side], server: Any) -> list[str]:
    server.set_fault("a", FaultProfile(cut_after=2))
    return [(s.stream("hi"), s.rows()[0][1])[1] for s in sides]


@difference("another() before the end", "ValueError", "RuntimeError")
def _early_another(sides: tuple[Side, Side], server: Any) -> list[str]:
    return [outcome_of(lambda s=s: s.broker.stream("hi", **s.call_kwargs).another()).kind
            for s in sides]


@difference("provider parameters by keyword", "answer", "TypeError")
def _max_tokens(sides: tuple[Side, Side], server: Any) -> list[str]:
    return [s.ask("hi", max_tokens=4).kind for s in sides]


@difference("disable_llm of an unknown name", "KeyError", "answer")
def _disable_unknown(sides: tuple[Side, Side], server: Any) -> list[str]:
    return [outcome_of(lambda s=s: s.broker.disable_llm("zzz") or Outcome("answer")).kind
            for s in sides]


@difference("degraded", False, True)
def _degraded_with_one_usable_model(sides: tuple[Side, Side], server: Any) -> list[bool]:
    server.set_fault("a", FaultProfile(status=429, retry_after=30))
    return [(s.ask("hi"), s.broker.snapshot().degraded)[1] for s in sides]


@difference("direct() of a registry model", "answer", "PoolModelError")
def _direct_pool_model(sides: tuple[Side, Side], server: Any) -> list[str]:
    return [outcome_of(lambda s=s: s.broker.direct(name="a").ask("hi")).kind for s in sides]


@difference("direct(name) without name=", "answer", "UnknownModelError")
def _direct_name_positionally(sides: tuple[Side, Side], server: Any) -> list[str]:
    return [outcome_of(lambda s=s: s.broker.direct("dx").ask("hi")).kind for s in sides]


@difference("sync sources", "answer", "ValueError")
def _sync_from_a_catalog_file(sides: tuple[Side, Side], server: Any) -> list[str]:
    path = sides[0].args[2] / "catalog.json"
    path.write_text(json.dumps({"models": [{"name": "x", "base_url": server.base_url,
                                            "model": "c"}]}))
    return [outcome_of(lambda s=s: s.broker.sync(str(path)) and Outcome("answer")).kind
            for s in sides]


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_deliberate_differences(pair, server, name: str) -> None:
    scenario, ours, theirs = DIFFERENCES[name]
    assert scenario(pair("a", "b", direct=(direct_entry(server),)), server) == [ours, theirs]


def test_the_readme_lists_every_deliberate_difference() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    section = readme.split("### Differences from llmbroker", 1)[1].split("\n## ", 1)[0]
    for name in DIFFERENCES:
        assert name in section, f"README: list the difference {name!r} with its reason"
