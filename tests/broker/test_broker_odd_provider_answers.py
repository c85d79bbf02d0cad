"""Garbage 200: a provider that answers well-formed JSON of the wrong shape (a
string where a list belongs, a number as text, ...) gives an invalid answer like any garbage:
the attempt is journaled as ``error`` (HTTP 200), the model cools and the call fails over,
whether it is an ``ask``, a stream or a race lane. Never an AttributeError from deep inside,
never a race stuck waiting for a lane that died."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jevlaya_lab.broker import LLMConfig
from jevlaya_lab.local import FaultProfile

# model name -> (stream chunks, non-streaming body): JSON, but not a chat completion
ODD_ANSWERS: dict[str, tuple[list[Any], Any]] = {
    "choices-not-a-list": ([{"choices": "abc"}], {"choices": "abc"}),
    "delta-not-an-object": ([{"choices": [{"delta": ["x"]}]}],
                            {"choices": [{"message": "hi"}]}),
    "content-not-text": ([{"choices": [{"delta": {"content": 5}}]}],
                         {"choices": [{"message": {"content": ["x"]}}]}),
    "tool-call-fields": ([{"choices": [{"delta": {"tool_calls": [
                              {"index": "0", "function": {"name": 1}}]}}]}],
                         {"choices": [{"message": {"tool_calls": ["x"]}}]}),
    "chunk-not-an-object": ([[1, 2]], [1, 2]),
}
# unusual but valid: tool-call fragments whose index is null are appended in order
_CALL = {"index": None, "id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": "{}"}}
VALID_ANSWERS = {
    "tool-index-null": ([{"choices": [{"delta": {"tool_calls": [_CALL]}}]},
                         {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}],
                        {"choices": [{"message": {"content": None, "tool_calls": [_CALL]},
                                      "finish_reason": "tool_calls"}]}),
}


class OddProvider(BaseHTTPRequestHandler):
    """Answers each chat completion with the odd answer named by the request's model."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        streamed, whole = {**ODD_ANSWERS, **VALID_ANSWERS}[request["model"]]
        if request.get("stream"):
            body = b"".join(b"data: %s\n\n" % json.dumps(c).encode() for c in streamed)
            body, kind = body + b"data: [DONE]\n\n", "text/event-stream"
        else:
            body, kind = json.dumps(whole).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def odd_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OddProvider)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("odd", sorted(ODD_ANSWERS))
def test_a_wrongly_shaped_200_is_invalid_and_every_call_fails_over(abroker, cfg, odd_url,
                                                                    odd, server) -> None:
    models = [LLMConfig(name="odd", base_url=odd_url, model=odd), *cfg("b")]

    async def main() -> None:
        for how in ("ask", "stream", "race"):
            # in the race b starts late, so the odd lane surely fails before b wins (a lane
            # still running when the race is won is superseded, with no verdict on it)
            server.set_fault("b", FaultProfile(first_token_delay=0.5) if how == "race" else None)
            async with abroker(models=models) as broker:
                if how == "ask":
                    name = (await broker.ask("hello")).llm_name
                else:
                    stream = broker.stream("hello", fastest_of=2 if how == "race" else 1,
                                           stream_selection_window=0)
                    async with stream:
                        text = "".join([d async for d in stream])
                    name = stream.llm_name
                    assert text == stream.text
                assert name == "b", how
                row = (await broker.calls(llm_name="odd"))[0]  # this broker's (the newest)
                assert (row["status"], row["http_status"]) == ("error", 200), how
                assert "chat completion" in row["error_detail"], how
                assert (await broker.snapshot())["odd"]["cooldown_until"] is not None, how

    asyncio.run(asyncio.wait_for(main(), 30))


def test_tool_call_fragments_with_a_null_index_are_an_answer(abroker, odd_url) -> None:
    models = [LLMConfig(name="tools", base_url=odd_url, model="tool-index-null")]

    async def main() -> None:
        async with abroker(models=models) as broker:
            result = await broker.chat([{"role": "user", "content": "look it up"}])
            assert [c["function"]["name"] for c in result.tool_calls] == ["lookup"]
            stream = broker.stream("look it up")
            assert [d async for d in stream] == []  # tool calls only: no text deltas
            assert stream.tool_calls[0]["function"]["name"] == "lookup"
            assert [r["status"] for r in await broker.calls()] == ["ok", "ok"]

    asyncio.run(asyncio.wait_for(main(), 30))
