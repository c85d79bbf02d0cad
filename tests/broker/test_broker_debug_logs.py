"""With ``logging.basicConfig(level=logging.DEBUG)`` (every logger, httpx and httpcore
included, printing to one stream) a provider that echoes the key in its response headers
(``X-Echo-Key``, ``WWW-Authenticate``) or body leaves no run of 6+ of the key's characters in
the log output, for answers and for refusals, asks and streams; once the broker is closed the
filter is gone from the library loggers."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.keys import LIBRARY_LOGGERS

KEY = "sk-echo-7Qk2Vb9LmX4pR8tZ1wN6yD3s"


class Echo(BaseHTTPRequestHandler):
    """Echoes the bearer key in two headers; model ``refuse`` answers 401, others a completion
    (streamed when asked)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if request["model"] == "refuse":
            status, kind = 401, "application/json"
            body = json.dumps({"error": {"message": f"bad key {key}"}}).encode()
        elif request.get("stream"):
            status, kind = 200, "text/event-stream"
            chunk = {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}
            body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        else:
            status, kind = 200, "application/json"
            body = json.dumps({"choices": [{"message": {"content": "hi"},
                                            "finish_reason": "stop"}]}).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo-Key", key)
        self.send_header("WWW-Authenticate", f'Bearer realm="echo", key="{key}"')
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def debug_logs() -> Iterator[io.StringIO]:
    """What logging.basicConfig(level=DEBUG) sets up: a root handler printing every record."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield out
    root.removeHandler(handler)
    root.setLevel(old)


def key_runs(text: str, key: str = KEY, n: int = 6) -> list[str]:
    return sorted({key[i:i + n] for i in range(len(key) - n + 1) if key[i:i + n] in text})


def test_no_key_characters_in_debug_logs(echo_url, debug_logs, tmp_path) -> None:
    models = [LLMConfig(name=n, base_url=echo_url, model=n, api_key_ref="ECHO_KEY")
              for n in ("refuse", "ok")]
    with Broker(tmp_path / "j.db", models=models, catalog=[], secrets={"ECHO_KEY": KEY}) as b:
        assert b.ask("hi", max_tokens=2).text == "hi"  # refuse (401) then ok
        assert "".join(b.stream("hi", max_tokens=2)) == "hi"
        assert b.direct(name="ok").ask("hi").text == "hi"
    text = debug_logs.getvalue()
    assert "x-echo-key" in text.lower() and "httpcore" in text  # the header lines were logged
    assert key_runs(text) == []
    for name in LIBRARY_LOGGERS:
        assert not logging.getLogger(name).filters, name  # taken off with the last broker
