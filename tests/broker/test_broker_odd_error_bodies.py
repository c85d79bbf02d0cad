"""A provider error whose ``message`` is not a string (null, a number, a list, an object) is
still that provider's error: the HTTP status decides what it does (a 400 rules the model out
for the call, a 401 refuses the key, a 429 cools for its ``Retry-After``, a 500 for the default
cooldown), ``ask`` journals the status, and ``stream`` raises the same documented errors, never a
raw ``AttributeError``. A real HTTP server on 127.0.0.1 answers with those bodies."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jevlaya_lab.broker import AsyncBroker, LLMConfig
from jevlaya_lab.broker import errors as E

MESSAGES: dict[str, Any] = {"null": None, "int": 7, "list": ["bad", 1], "dict": {"why": "no"}}
STATUSES = (400, 401, 429, 500)
RETRY_AFTER_S = 30


class OddErrors(BaseHTTPRequestHandler):
    """Model ``<status>-<kind>`` answers ``status`` with ``{"error": {"message": <kind>}}``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, kind = request["model"].split("-")
        body = json.dumps({"error": {"message": MESSAGES[kind], "type": "x"}}).encode()
        self.send_response(int(status))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if status == "429":
            self.send_header("Retry-After", str(RETRY_AFTER_S))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def odd_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OddErrors)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/v1"
    httpd.shutdown()
    httpd.server_close()


# a refused key: ask says so as NoLLMAvailableError naming the key, a stream as AuthError
EXPECTED = {400: E.ProviderError, 401: (E.AuthError, E.NoLLMAvailableError), 429: E.NoLLMAvailableError,
            500: E.NoLLMAvailableError}


@pytest.mark.parametrize("kind", sorted(MESSAGES))
@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("how", ["ask", "stream"])
def test_a_non_string_error_message_keeps_its_status(odd_url, db, status, kind, how) -> None:
    name = f"{status}-{kind}"
    models = [LLMConfig(name=name, base_url=odd_url, model=name)]

    async def main() -> None:
        async with AsyncBroker(db, models=models, catalog=[], secrets={}) as b:
            before = time.time()
            with pytest.raises(E.LLMRequestError) as info:
                if how == "ask":
                    await b.ask("hi", wait=5, parallel_recovery=False)
                else:
                    async for _ in b.stream("hi", wait=5, parallel_recovery=False):
                        pass
            assert isinstance(info.value, EXPECTED[status]), repr(info.value)
            await b._rt.flush()
            rows = b._rt.store.attempts()
            assert [r["http_status"] for r in rows] == [status]
            state = b._rt.pool.states[name]
            if status == 400:  # ruled out for the call, no cooldown
                assert state.cooldown_until == 0.0
                assert rows[0]["status"] == "error"
            elif status == 429:  # Retry-After is honoured
                assert rows[0]["status"] == "rate_limited"
                assert before + RETRY_AFTER_S - 1 <= state.cooldown_until \
                    <= time.time() + RETRY_AFTER_S + 1
            elif status == 500:
                assert rows[0]["status"] == "unavailable"
                assert state.cooldown_until > before + 50
            detail = rows[0]["error_detail"]
            assert detail and ("null" in detail or "7" in detail or "bad" in detail
                               or "why" in detail), detail
    asyncio.run(main())
