"""Input no model could be sent (a lone surrogate, nesting thousands of levels deep) is the
caller's error: ``ask``, ``chat`` and ``stream`` raise :class:`PromptError` naming the field
before any model is tried, so no request is sent, no row is journaled, no model is cooled and
the next normal call is answered."""

from __future__ import annotations

import asyncio

import pytest

from jevlaya_lab import PromptError
from jevlaya_lab.broker import AsyncBroker

BAD = "bad \ud800 text"


def _deep(n: int) -> list:
    value: list = []
    for _ in range(n):
        value = [value]
    return value


CASES = [
    ("ask", lambda b: b.ask(BAD, wait=2), "prompt"),
    ("chat", lambda b: b.chat([{"role": "user", "content": "hi"},
                               {"role": "user", "content": BAD}], wait=2),
     "messages[1]['content']"),
    ("chat-parts", lambda b: b.chat([{"role": "user", "content": [
        {"type": "text", "text": BAD}]}], wait=2), "messages[0]['content'][0]['text']"),
    ("param", lambda b: b.ask("hi", stop=[BAD], wait=2), "stop[0]"),
    ("deep", lambda b: b.chat([{"role": "user", "content": _deep(5000)}], wait=2),
     "nested deeper than 64"),
    ("tools", lambda b: b.chat([{"role": "user", "content": "hi"}], wait=2, tools=[
        {"type": "function", "function": {"name": BAD}}]), "tools[0]['function']['name']"),
]


async def _stream(b: AsyncBroker, prompt) -> None:
    async for _ in b.stream(prompt, wait=2):
        pass


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_unsendable_input_is_refused_before_any_model(cfg, db, case) -> None:
    _, make, field = case

    async def main() -> None:
        async with AsyncBroker(db, models=cfg("a", "b"), catalog=[]) as b:
            with pytest.raises(PromptError, match=field.replace("[", r"\[")) as info:
                await make(b)
            assert isinstance(info.value, ValueError)
            with pytest.raises(PromptError, match="prompt"):
                await _stream(b, BAD)
            with pytest.raises(PromptError, match=r"messages\[0\]\['content'\]"):
                await _stream(b, [{"role": "user", "content": BAD}])
            states = b._rt.pool.states
            assert all(s.cooldown_until == 0 and s.in_flight == 0 for s in states.values())
            await b._rt.flush()
            assert b._rt.store.attempts() == []  # nothing sent, nothing journaled
            reply = await b.ask("hello", wait=5, max_tokens=4)  # the pool is not poisoned
            assert reply.text
    asyncio.run(main())


def test_direct_and_sync_calls_refuse_it_too(cfg, db) -> None:
    from jevlaya_lab import Broker

    with Broker(db, models=cfg("a"), catalog=[]) as b:
        with pytest.raises(PromptError, match="prompt"):
            b.ask(BAD)
        with pytest.raises(PromptError, match="prompt"):
            b.direct(name="a").ask(BAD)
        assert b.ask("ok", max_tokens=4).text
