"""What one client may cost the local server: bounded memory, time, connections and nesting,
and every error in the OpenAI JSON shape."""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

import httpx
import pytest

from jevlaya_lab.local import ChatModel, ChatRequestError, FaultProfile, tiny_chat_model
from jevlaya_lab.local.chat_model import COUNT_CHUNK_CHARS

from .conftest import USER, chat_body


def post(server: Any, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30, **kwargs)


def exchange(server: Any, data: bytes, *, pause: float = 0.0, rest: bytes = b"") -> tuple[int, dict[str, str], Any]:
    """Send raw bytes (then ``rest`` after ``pause`` s), read until the server closes; return
    (status, headers, JSON body); status 0 when the server closed without answering."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(data)
        if pause:
            time.sleep(pause)
        if rest:
            try:
                sock.sendall(rest)
            except OSError:
                pass
        received = b""
        try:
            while piece := sock.recv(65536):
                received += piece
        except ConnectionResetError:
            pass
    if not received:
        return 0, {}, None
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def assert_openai_error(body: Any, status: int) -> dict[str, Any]:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == ("service_unavailable" if status == 503 else "invalid_request_error"), (status, error)
    return error


class CountingTokenizer:
    """A real tokenizer that records the longest text it was asked to tokenize."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.longest = 0

    def __call__(self, text: str, **kwargs: Any) -> Any:
        self.longest = max(self.longest, len(text))
        return self._tokenizer(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)


# -- memory per request ----------------------------------------------------------------------

def test_a_huge_prompt_is_rejected_without_tokenizing_it_whole(start_server: Any) -> None:
    tiny = tiny_chat_model(0)
    counting = CountingTokenizer(tiny.tokenizer)
    server = start_server([ChatModel(tiny.model, counting, name="tiny-0")])
    response = post(server, {"model": "tiny-0", "messages": [{"role": "user", "content": "hello " * 1_000_000}]})
    assert response.status_code == 400
    error = assert_openai_error(response.json(), 400)
    assert error["param"] == "messages" and "at most 4095 prompt tokens" in error["message"]
    assert counting.longest <= COUNT_CHUNK_CHARS  # 6 MB of prompt, never more than one piece at once


def test_a_prompt_that_fits_is_tokenized_exactly_whatever_its_pieces() -> None:
    model = tiny_chat_model(0)
    long_fit = [{"role": "user", "content": "é" * 2000}]  # 2 byte tokens per character: 4000+ tokens
    ids = model.prompt_ids(long_fit)
    text = model.tokenizer.apply_chat_template(long_fit, tokenize=False, add_generation_prompt=True)
    assert ids == model.tokenizer(text, add_special_tokens=False)["input_ids"] and len(ids) < 4096
    with pytest.raises(ChatRequestError, match="at most 4095 prompt tokens"):
        model.prompt_ids([{"role": "user", "content": "é" * 2100}])


# -- time and connections ----------------------------------------------------------------------

def test_a_half_sent_body_gets_a_408_within_the_read_timeout(start_server: Any) -> None:
    server = start_server(read_timeout=0.5)
    started = time.monotonic()
    status, headers, body = exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                             b"Content-Length: 100\r\n\r\n{\"model\":")
    assert status == 408 and headers["connection"] == "close"
    assert "did not arrive within 0.5 s" in assert_openai_error(body, 408)["message"]
    assert time.monotonic() - started < 5


def test_a_trickled_request_cannot_outlast_the_read_timeout(start_server: Any) -> None:
    """One header byte every 0.2 s never waits out a single read, but the whole request has 1 s."""
    server = start_server(read_timeout=1.0)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n")
        started = time.monotonic()
        answer = b""
        try:
            for byte in b"X-Slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
        except OSError:
            pass  # the server closed on us, as it should
        sock.settimeout(5)
        try:
            while piece := sock.recv(65536):
                answer += piece
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < 4
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert_openai_error(json.loads(answer.partition(b"\r\n\r\n")[2]), 408)


def test_an_idle_connection_is_closed_silently_after_the_read_timeout(start_server: Any) -> None:
    server = start_server(read_timeout=0.5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed, with nothing to say
        assert time.monotonic() - started < 5


def test_connections_beyond_the_limit_get_a_503_with_retry_after(start_server: Any) -> None:
    """Busy connections (each in the middle of a request) hold their places; idle ones would not."""
    server = start_server(max_connections=2)
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
    for sock in held:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
    try:
        deadline = time.monotonic() + 5
        while server._httpd.open_connections < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        response = post(server, chat_body())
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        error = assert_openai_error(response.json(), 503)
        assert error["code"] == "server_busy" and "2 connections" in error["message"]
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while post(server, chat_body()).status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert post(server, chat_body()).status_code == 200


def test_a_non_streaming_client_that_gives_up_frees_the_model(start_server: Any) -> None:
    # the abandoned answer would hold the model for 300 x 0.05 s = 15 s if it kept generating
    server = start_server(faults={"tiny-0": FaultProfile(token_delay=0.05)})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/chat/completions", json=chat_body(max_tokens=300), timeout=0.5)
    server.set_fault("tiny-0", None)
    started = time.perf_counter()
    assert post(server, chat_body(max_tokens=1)).status_code == 200
    assert time.perf_counter() - started < 5


# -- hostile bodies, roles, methods, max_tokens ------------------------------------------------

@pytest.mark.parametrize("depth", [65, 2_000, 200_000])
def test_deeply_nested_json_is_a_json_400(server: Any, depth: int) -> None:
    for text in ("[" * depth + "]" * depth, '{"model": ' + '{"a":' * depth + "1" + "}" * depth + "}"):
        response = httpx.post(f"{server.base_url}/chat/completions", content=text.encode(), timeout=30)
        assert response.status_code == 400
        assert "more than 64 levels" in assert_openai_error(response.json(), 400)["message"]
    assert post(server, chat_body()).status_code == 200  # and the server is fine


@pytest.mark.parametrize("role", ["<script>", "", "USER", 5, None, ["user"]])
def test_roles_outside_the_openai_set_are_a_400(server: Any, role: Any) -> None:
    response = post(server, {"model": "tiny-0", "messages": [{"role": role, "content": "hi"}]})
    assert response.status_code == 400
    assert assert_openai_error(response.json(), 400)["param"] == "messages[0].role"


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool", "function"])
def test_the_openai_roles_are_accepted(server: Any, role: str) -> None:
    assert post(server, {"model": "tiny-0", "messages": [{"role": role, "content": "hi"}, *USER]}).status_code == 200


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"PUT /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 405),
    (b"DELETE /v1/models/tiny-0 HTTP/1.1\r\n\r\n", 405),
    (b"PATCH /v1/models HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
    (b"OPTIONS * HTTP/1.1\r\n\r\n", 405),
    (b"BREW /pot HTTP/1.1\r\n\r\n", 501),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n", 400),
    (b"POST /v1/chat/completions\r\n\r\n", 400),
    (b"GET /v1/models HTTP/2.0\r\n\r\n", 505),
    (b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"POST /v1/chat/completions HTTP/1.1\r\n\r\n", 411),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
])
def test_every_error_is_openai_json_even_for_garbage(server: Any, request_bytes: bytes, status: int) -> None:
    got, headers, body = exchange(server, request_bytes)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert_openai_error(body, status)
    if status == 405:
        assert headers["allow"] == "GET, POST"


def test_head_gets_a_405_without_a_body(server: Any) -> None:
    response = httpx.head(f"{server.base_url}/models", timeout=10)
    assert response.status_code == 405 and response.content == b""


def test_max_tokens_beyond_the_context_is_a_400_naming_the_limit(server: Any) -> None:
    response = post(server, chat_body(max_tokens=10**9))
    error = assert_openai_error(response.json(), 400)
    assert response.status_code == 400 and error["param"] == "max_tokens"
    named = re.search(r"at most (\d+) answer tokens", error["message"])  # the served model's own context
    assert named and int(named.group(1)) >= 1000, error["message"]
    with pytest.raises(ChatRequestError, match="at most 4095 answer tokens"):
        tiny_chat_model(0).generate(USER, max_tokens=4096)  # the tiny torch model holds 4096 tokens
    assert post(server, chat_body(max_tokens=int(named.group(1)), stop=["a", "e", "i", "o"])).status_code == 200


def test_limits_are_checked_when_serving(start_server: Any) -> None:
    for kwargs, field in (({"read_timeout": 0}, "read_timeout"), ({"max_connections": 0}, "max_connections")):
        with pytest.raises(ChatRequestError) as info:
            start_server(**kwargs)
        assert info.value.field == field


def test_a_key_in_a_garbage_request_line_is_redacted_in_the_answer_and_the_logs(start_server: Any,
                                                                                caplog: Any) -> None:
    import logging

    key = "LocalServerKey4Rt7Yu9Io2Pa"
    server = start_server(api_key=key)
    caplog.set_level(logging.DEBUG, logger="jevlaya_lab.local.server")
    line = f"GET /v1/models?api_key={key} and then some {'x' * 150} HTTP/1.1\r\n\r\n".encode()
    status, _, body = exchange(server, line)
    message = assert_openai_error(body, 400)["message"]
    assert status == 400 and "Bad request syntax" in message and "***" in message
    for text in (message, caplog.text):
        assert not any(key[i:i + 6] in text for i in range(len(key) - 5)), text
