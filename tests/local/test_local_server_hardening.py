"""Hostile clients of the local server: trickled request lines, floods of tiny messages, text that
is not Unicode, ambiguous framing and idle sockets all get a precise answer, fast."""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

import httpx
import pytest

from jevlaya_lab.local import tiny_chat_model

from .conftest import USER, chat_body
from .test_local_server_limits import assert_openai_error, exchange

MAX_MESSAGES = 2048  # local.validation.MAX_MESSAGES, spelled out so the test also runs without it


def test_a_request_line_trickled_byte_by_byte_gets_a_408_and_nothing_on_stderr(
        start_server: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    server = start_server(read_timeout=1.5)
    caplog.set_level(logging.WARNING, logger="jevlaya_lab.local.server")
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        started = time.monotonic()
        try:
            for byte in b"POST /v1/chat/completions HTTP/1.1\r\n":
                sock.sendall(bytes([byte]))
                time.sleep(0.5)  # the whole line would take 18 s
                if time.monotonic() - started > 3:
                    break
        except OSError:
            pass  # the server closed on us, as it should
        sock.settimeout(5)
        try:
            while piece := sock.recv(65536):
                answer += piece
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert "did not arrive within 1.5 s" in assert_openai_error(json.loads(answer.partition(b"\r\n\r\n")[2]),
                                                                408)["message"]
    time.sleep(0.1)  # let the connection thread finish
    assert capfd.readouterr().err == ""
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_quarter_million_empty_messages_are_refused_by_count(server: Any) -> None:
    body = json.dumps(chat_body(messages=[{"role": "user", "content": ""}] * 250_000)).encode()
    assert 7.5 * 2**20 < len(body) < 8 * 2**20
    response = httpx.post(f"{server.base_url}/chat/completions", content=body,
                          headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 400
    error = assert_openai_error(response.json(), 400)
    assert error["param"] == "messages" and f"at most {MAX_MESSAGES} messages" in error["message"]


def test_more_messages_than_the_limit_are_a_400_in_process_too(server: Any) -> None:
    too_many = [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)
    response = httpx.post(f"{server.base_url}/chat/completions", json=chat_body(messages=too_many), timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"
    assert f"at most {MAX_MESSAGES} messages" in response.json()["error"]["message"]


@pytest.mark.parametrize("where", ["content", "part", "stop"])
def test_a_lone_surrogate_is_a_400_naming_the_field(server: Any, where: str) -> None:
    messages: Any = [{"role": "user", "content": "bad \ud800 text"}]
    extra: dict[str, Any] = {}
    field = "messages[0].content"
    if where == "part":
        messages = [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]
        field = "messages[0].content[0].text"
    elif where == "stop":
        messages, extra, field = USER, {"stop": ["\udfff"]}, "stop"
    body = json.dumps(chat_body(messages=messages, **extra))  # ensure_ascii writes \ud800 escapes
    response = httpx.post(f"{server.base_url}/chat/completions", content=body.encode(),
                          headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 400, response.text
    error = assert_openai_error(response.json(), 400)
    assert error["param"] == field and "surrogate" in error["message"]


def test_two_conflicting_content_lengths_are_a_400(server: Any) -> None:
    body = json.dumps(chat_body()).encode()
    status, headers, answer = exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                               b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n%s"
                                       % (len(body), body))
    assert status == 400 and headers["connection"] == "close"
    assert "Content-Length" in assert_openai_error(answer, 400)["message"]


def test_idle_sockets_do_not_make_requests_wait(start_server: Any) -> None:
    server = start_server([tiny_chat_model(0)], max_connections=16)
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(40)]
    try:
        deadline = time.monotonic() + 5
        while server._httpd.open_connections < 16 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        for _ in range(3):
            response = httpx.post(f"{server.base_url}/chat/completions", json=chat_body(max_tokens=4), timeout=30)
            assert response.status_code == 200, response.text
        assert time.monotonic() - started < 5  # not queued behind the idle ones' 30 s read timeout
        assert server._httpd.open_connections <= 16
    finally:
        for sock in idle:
            sock.close()
