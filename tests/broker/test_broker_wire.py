"""The broker's wire (httpcore pools, no httpx client) against real loopback servers: a gzipped
answer, server-sent lines cut anywhere (CR LF split across writes), an environment proxy that
forwards the request, and ``NO_PROXY`` sending a host past it."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jevlaya_lab.broker.http import Failure, post_chat
from jevlaya_lab.broker.wire import Wire, _bypassed

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "hello"},
                       "finish_reason": "stop"}], "usage": {"prompt_tokens": 1}}


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"headers": dict(self.headers), "body": body})
        if body.get("stream"):
            pieces = [b'data: {"choices":[{"delta":{"content":"he"}}]}\r', b'\n\r\n',
                      b'data: {"choices":[{"delta":{"content":"llo"},"finish_reason":"stop"}]}',
                      b"\r\n\r\ndata: [DONE]\r\n\r\n"]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in pieces:  # each its own chunk: a line end may arrive cut in two
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        data = gzip.compress(json.dumps(ANSWER).encode())
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Proxy(BaseHTTPRequestHandler):
    """A forwarding HTTP proxy: the request line carries the absolute URL."""

    protocol_version = "HTTP/1.1"
    forwarded: list[tuple[str, str | None]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
        target = urllib.parse.urlsplit(self.path)
        type(self).forwarded.append((self.path, self.headers.get("Proxy-Authorization")))
        body = self.rfile.read(int(self.headers["Content-Length"]))
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "proxy-authorization"}
        upstream.request("POST", target.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("transfer-encoding", "connection"):
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        upstream.close()


@pytest.fixture
def servers() -> Iterator[tuple[str, str]]:
    made = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in (_Upstream, _Proxy)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in made]
    for t in threads:
        t.start()
    _Upstream.seen.clear()
    _Proxy.forwarded.clear()
    try:
        yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in made)  # type: ignore[misc]
    finally:
        for s in made:
            s.shutdown()
            s.server_close()


def test_a_gzipped_answer_is_decoded_and_the_key_sent_as_a_bearer(servers: tuple[str, str]) -> None:
    upstream, _ = servers

    async def main() -> Any:
        wire = Wire()
        try:
            return await post_chat(wire, upstream, "sk-test", {"model": "a", "messages": []})
        finally:
            await wire.aclose()

    reply = asyncio.run(main())
    assert reply.text == "hello" and reply.usage == {"prompt_tokens": 1}
    headers = _Upstream.seen[0]["headers"]
    assert headers["Authorization"] == "Bearer sk-test"
    assert "gzip" in headers["Accept-Encoding"] and headers["Host"] == upstream[len("http://"):]


def test_stream_lines_cut_inside_a_line_end_arrive_whole(servers: tuple[str, str]) -> None:
    upstream, _ = servers

    async def main() -> list[str]:
        wire = Wire()
        try:
            response = await wire.open(f"{upstream}/chat/completions", None,
                                       {"model": "a", "messages": [], "stream": True})
            try:
                return [line async for line in response.aiter_lines()]
            finally:
                await response.aclose()
        finally:
            await wire.aclose()

    lines = asyncio.run(main())
    data = [line for line in lines if line]
    assert data[0] == 'data: {"choices":[{"delta":{"content":"he"}}]}'
    assert data[-1] == "data: [DONE]" and len(data) == 3
    assert lines.count("") == 3  # one blank line after each event, none invented by a cut CR LF


def test_an_environment_proxy_forwards_and_no_proxy_goes_direct(
        servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://user:p%40ss@"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def ask() -> str:
        wire = Wire()
        try:
            return (await post_chat(wire, upstream, None, {"model": "a", "messages": []})).text
        finally:
            await wire.aclose()

    assert asyncio.run(ask()) == "hello"
    assert _Proxy.forwarded == [(f"{upstream}/chat/completions", "Basic dXNlcjpwQHNz")]  # user:p@ss
    monkeypatch.setenv("NO_PROXY", "example.org, 127.0.0.1")
    assert asyncio.run(ask()) == "hello"
    assert len(_Proxy.forwarded) == 1 and len(_Upstream.seen) == 2


def test_a_proxy_of_an_unknown_scheme_is_a_transport_failure_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "ftp://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def ask() -> None:
        wire = Wire()
        try:
            await post_chat(wire, "http://127.0.0.1:9", None, {"model": "a", "messages": []})
        finally:
            await wire.aclose()

    with pytest.raises(Failure) as caught:
        asyncio.run(ask())
    assert caught.value.kind == "unavailable"
    assert "ProxyError" in caught.value.detail and "socks5://" in caught.value.detail


@pytest.mark.parametrize(("host", "port", "no_proxy", "bypassed"), [
    ("api.example.com", 443, "example.com", True),
    ("api.example.com", 443, ".example.com", True),
    ("example.com", 443, "*.example.com", True),
    ("badexample.com", 443, "example.com", False),
    ("127.0.0.1", 8000, "127.0.0.1:8000", True),
    ("127.0.0.1", 8001, "127.0.0.1:8000", False),
    ("anything.net", None, "*", True),
    ("anything.net", None, "", False),
])
def test_no_proxy_entries_match_hosts_their_subdomains_and_ports(
        host: str, port: int | None, no_proxy: str, bypassed: bool) -> None:
    assert _bypassed(host, port, no_proxy) is bypassed
