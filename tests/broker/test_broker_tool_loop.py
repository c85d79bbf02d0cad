"""``run_tool_loop`` / ``arun_tool_loop``.

The local tiny models answer in plain text only, so the tool-calling side is a scripted
provider stand-in on 127.0.0.1 (a stdlib HTTP server in this file) that asks for the tools the
test names; everything else is the real broker.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker, Broker, LLMConfig, arun_tool_loop, run_tool_loop
from jevlaya_lab.broker.errors import ToolLoopLimitError

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


class Scripted(BaseHTTPRequestHandler):
    """Asks for the tool calls in ``server.calls_per_round`` while rounds remain, then answers
    with the tool messages it was given."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        rounds = sum(m["role"] == "assistant" for m in body["messages"])
        script = self.server.script  # type: ignore[attr-defined]
        if rounds < len(script):
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{rounds}_{i}", "type": "function",
                 "function": {"name": name, "arguments": args}}
                for i, (name, args) in enumerate(script[rounds])]}
        else:
            tool_texts = [m["content"] for m in body["messages"] if m["role"] == "tool"]
            message = {"role": "assistant", "content": "done: " + " | ".join(tool_texts)}
        data = json.dumps({"choices": [{"index": 0, "message": message,
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted() -> Iterator[Any]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    srv.bodies = []  # type: ignore[attr-defined]
    srv.script = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    srv.entry = LLMConfig(name="tooly", base_url=f"http://127.0.0.1:{srv.server_port}/v1",  # type: ignore[attr-defined]
                          model="tooly")
    yield srv
    srv.shutdown()
    srv.server_close()


def test_tool_loop_dispatches_tools_and_returns_the_final_answer(scripted, db) -> None:
    scripted.script = [[("add", '{"x": 2, "y": 3}')], [("add", '{"x": 1, "y": 1}')]]
    with Broker(db, models=[scripted.entry], catalog=[]) as b:
        result = run_tool_loop(b, [{"role": "user", "content": "sum"}], tools=TOOLS,
                               dispatch={"add": lambda x, y: x + y}, operation="math")
        assert result.text == "done: 5 | 2"
        assert [m["role"] for m in result.messages] == [
            "user", "assistant", "tool", "assistant", "tool", "assistant"]
        rows = b.calls()
    assert len(rows) == 3 and len({r["trace_id"] for r in rows}) == 3  # each round routed
    assert scripted.bodies[0]["tools"] == TOOLS


def test_unknown_tool_bad_arguments_and_tool_exceptions_become_tool_messages(scripted,
                                                                             db) -> None:
    scripted.script = [[("nope", "{}"), ("add", "not json"), ("add", '{"x": 1}')]]

    def add(x: int, y: int) -> int:
        return x + y
    with Broker(db, models=[scripted.entry], catalog=[]) as b:
        result = run_tool_loop(b, [{"role": "user", "content": "sum"}], tools=TOOLS,
                               dispatch={"add": add})
    texts = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "unknown tool 'nope'" in texts[0]
    assert "not a JSON object" in texts[1]
    assert "TypeError" in texts[2]


def test_too_many_rounds_raise_tool_loop_limit_error(scripted, db) -> None:
    scripted.script = [[("add", '{"x": 1, "y": 1}')]] * 5
    with Broker(db, models=[scripted.entry], catalog=[]) as b:
        with pytest.raises(ToolLoopLimitError, match="max_steps=2") as info:
            run_tool_loop(b, [{"role": "user", "content": "sum"}], tools=TOOLS,
                          dispatch={"add": lambda x, y: x + y}, max_steps=2)
    assert len(info.value.messages) == 5


def test_async_tool_loop_awaits_async_tools(scripted, db) -> None:
    scripted.script = [[("add", '{"x": 2, "y": 2}')]]

    async def add(x: int, y: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"sum": x + y}

    async def main() -> str:
        async with AsyncBroker(db, models=[scripted.entry], catalog=[]) as b:
            result = await arun_tool_loop(b, [{"role": "user", "content": "sum"}], tools=TOOLS,
                                          dispatch=lambda name, args: add(**args))
            return result.text
    assert asyncio.run(main()) == 'done: {"sum": 4}'


def test_tool_loop_arguments_are_checked(broker) -> None:
    b = broker("a")
    with pytest.raises(ValueError, match="tools="):
        run_tool_loop(b, [{"role": "user", "content": "x"}], tools=[], dispatch={})
    with pytest.raises(ValueError, match="max_steps=0"):
        run_tool_loop(b, [{"role": "user", "content": "x"}], tools=TOOLS, dispatch={},
                      max_steps=0)


def test_a_plain_text_answer_ends_the_loop_in_one_round(broker) -> None:
    b = broker("a")
    result = run_tool_loop(b, [{"role": "user", "content": "hi"}], tools=TOOLS, dispatch={})
    assert result.text and len(b.calls()) == 1
