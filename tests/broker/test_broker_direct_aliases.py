"""llmbroker's ``direct()`` aliases: ``direct(alias)`` and
``direct(name=...)``, the ``direct=[...]`` entries reached only that way, with the pool's
validation and timeouts. Against the real local server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jevlaya_lab import UnknownLLMError
from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig
from jevlaya_lab.broker.errors import LLMTimeoutError, NoLLMAvailableError
from jevlaya_lab.local import FaultProfile


def test_an_alias_and_a_name_reach_a_direct_entry_outside_the_pool(broker, server, cfg) -> None:
    c = LLMConfig(name="only-direct", base_url=server.base_url, model="c", alias="fast")
    b = broker("a", "b", direct=[c])
    before = server.request_count("c")
    by_alias = b.direct("fast")
    assert by_alias.name == "only-direct"
    assert by_alias.ask("hi").llm_name == "only-direct"
    assert b.direct(name="only-direct").ask("hi").text
    assert "".join(b.direct("fast").stream("hi"))
    assert server.request_count("c") == before + 3
    assert b.count() == 2 and "only-direct" not in b.snapshot()  # not in the pool
    assert [b.ask(f"q{i}").llm_name for i in range(3)] == ["a", "a", "a"]
    assert {r["llm_name"] for r in b.calls()} == {"a"}  # direct calls write no journal row
    assert server.request_count("c") == before + 3


def test_aliases_of_the_users_models_and_names_as_before(broker, server) -> None:
    a = LLMConfig(name="a", base_url=server.base_url, model="a", alias="first")
    b = broker(models=[a, *[LLMConfig(name="b", base_url=server.base_url, model="b")]])
    assert b.direct("first").name == "a"
    assert b.direct("b").name == "b"  # no alias matches: the name (this package's extension)
    assert b.direct(name="b").ask("x").llm_name == "b"
    with pytest.raises(UnknownLLMError, match="direct\\(name='first'\\): no model of that name"):
        b.direct(name="first")  # name= is the name only


def test_an_alias_wins_over_another_models_name(broker, server) -> None:
    d1 = LLMConfig(name="d1", base_url=server.base_url, model="c", alias="b")
    b = broker("a", "b", direct=[d1])
    assert b.direct("b").name == "d1" and b.direct(name="b").name == "b"


def test_direct_refuses_what_is_not_one_model(broker, server) -> None:
    b = broker("a", direct=[{"name": "dx", "base_url": server.base_url, "model": "c",
                             "alias": "fast"}])
    for args, kwargs in (((), {}), (("fast",), {"name": "dx"})):
        with pytest.raises(ValueError, match="exactly one of an alias"):
            b.direct(*args, **kwargs)
    for bad in ("", 3):
        with pytest.raises(ValueError, match="must be a non-empty string"):
            b.direct(bad)  # type: ignore[arg-type]
    with pytest.raises(UnknownLLMError, match="aliases: fast; names: a, dx") as info:
        b.direct("zzz")
    assert isinstance(info.value, KeyError) and str(info.value).startswith("direct('zzz')")


def test_bad_direct_declarations(server, tmp_path: Path) -> None:
    entry = {"base_url": server.base_url, "model": "c"}
    cases = [
        ([{"name": "x", **entry, "alias": "f"}, {"name": "y", **entry, "alias": "f"}],
         ValueError, "alias 'f' is given to several entries"),
        ([{"name": "a", **entry}], ValueError, r"\['a'\] named twice"),
        (["gpt"], TypeError, "give an LLMConfig or a dict"),
        ({"name": "x", **entry}, TypeError, "must be a list"),
        ([{"name": "x", **entry, "alias": ""}], ValueError, "LLMConfig.alias=''"),
    ]
    for direct, error, message in cases:
        with pytest.raises(error, match=message):
            Broker(tmp_path / "j.db", models=[LLMConfig(name="a", **entry)], catalog=[],
                   direct=direct)
    clash = Broker(tmp_path / "k.db", catalog=[{"name": "cat", **entry}],
                   direct=[{"name": "cat", **entry}])
    with pytest.raises(ValueError, match="direct= declares 'cat', and the registry has"):
        clash.ask("x")
    clash.close()


def test_a_direct_entry_without_its_key_fails_before_any_request(broker, server,
                                                                monkeypatch) -> None:
    monkeypatch.delenv("DIRECT_ONLY_KEY", raising=False)
    keyed = LLMConfig(name="k", base_url=server.base_url, model="c", alias="keyed",
                      api_key_ref="DIRECT_ONLY_KEY")
    b = broker("a", direct=[keyed])
    before = server.request_count("c")
    with pytest.raises(NoLLMAvailableError, match="no key for DIRECT_ONLY_KEY") as info:
        b.direct("keyed").ask("x")
    assert info.value.reason == "no_keys" and server.request_count("c") == before


def test_an_alias_has_the_validation_and_timeouts_of_direct(broker, server) -> None:
    c = LLMConfig(name="dx", base_url=server.base_url, model="c", alias="fast")
    b = broker("a", direct=[c])
    with pytest.raises(ValueError, match="model=...: the broker sets this request field"):
        b.direct("fast").ask("x", model="other")
    with pytest.raises(TypeError, match="timeout= \\(llmbroker's\\) is wait= here"):
        b.direct("fast").ask("x", timeout=5)
    server.set_fault("c", FaultProfile(latency=3.0))
    with pytest.raises(LLMTimeoutError, match="dx: the answer did not complete within wait=0.5"):
        b.direct("fast").ask("x", wait=0.5)


def test_async_direct_looks_the_alias_up_on_first_use(server, tmp_path: Path) -> None:
    c = LLMConfig(name="dx", base_url=server.base_url, model="c", alias="fast")

    async def main() -> tuple[str, str, str]:
        async with AsyncBroker(tmp_path / "j.db", models=[], catalog=[], direct=[c]) as b:
            early = AsyncBroker(tmp_path / "k.db", models=[], catalog=[], direct=[c])
            lazy = early.direct("zzz")  # not ready yet: looked up on first use
            with pytest.raises(UnknownLLMError):
                await lazy.ask("x")
            await early.aclose()
            with pytest.raises(UnknownLLMError):
                b.direct("zzz")  # ready: looked up at once
            reply = await b.direct("fast").ask("hi")
            return reply.llm_name, b.direct(name="dx").name, lazy.name
    assert asyncio.run(main()) == ("dx", "dx", "zzz")
