"""The HTTP side of the local server: reading requests within limits, writing JSON and SSE.

``JsonHTTPHandler`` is ``BaseHTTPRequestHandler`` made safe for clients of any quality: a whole
request (line, headers, body) must arrive within the server's ``read_timeout`` (a request cut
short gets a 408, an idle connection is closed silently), the body is read in bounded pieces
(411/413 for a missing or oversized ``Content-Length``, 400 for two that disagree), and every
error, including those the standard library raises itself (a garbage request line, an unknown
method, oversized headers), is answered in the OpenAI error shape
``{"error": {"message", "type", "param", "code"}}``. Client text echoed into an error or a log
has keys redacted. The limits are in :mod:`jevlaya_lab.local.limits`; what is served lives in
subclasses (:mod:`jevlaya_lab.local.handler`).
"""

from __future__ import annotations

import io
import json
import logging
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Protocol

from jevlaya_lab.local import wire
from jevlaya_lab.local.limits import MAX_BODY_BYTES, READ_CHUNK_BYTES, DeadlineReader
from jevlaya_lab.secrets import clip_scrubbed as clip_redacted
from jevlaya_lab.secrets import scrub_secrets as redact_secrets

if TYPE_CHECKING:
    from jevlaya_lab.local.faults import FaultProfile
    from jevlaya_lab.local.generation import ChatBackend

logger = logging.getLogger("jevlaya_lab.local.server")

ALLOWED_METHODS = "GET, POST"
SHOWN_REQUEST_CHARS = 200  # of a client's garbage request line echoed in an error message


class ServedModels(Protocol):
    """What the handler needs from the server it belongs to (``local.server.Server`` is one), so
    the handler never imports the server that imports it."""

    api_key: str | None
    created: int
    stopping: threading.Event
    read_timeout: float

    @property
    def model_names(self) -> list[str]: ...

    def model_for(self, name: str) -> ChatBackend | None: ...

    def next_call(self, name: str) -> FaultProfile | None: ...


class JsonHTTPHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive with deadlines, bounded bodies and JSON errors; no routes of its own."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # SSE pieces are tiny; do not let Nagle hold them back
    server_version = "jevlaya-lab-local"

    @property
    def app(self) -> ServedModels:
        # the server class (local.server) adds ``app``; socketserver's BaseServer does not declare it
        app: ServedModels = self.server.app  # type: ignore[attr-defined]
        return app

    def setup(self) -> None:
        super().setup()
        self._reader = DeadlineReader(self.connection, self.app.read_timeout)
        self.rfile = io.BufferedReader(self._reader, READ_CHUNK_BYTES)
        track = getattr(self.server, "track", None)
        if track is not None:  # lets the server close this connection while it sits idle
            track(self.connection, self._reader)

    def handle_one_request(self) -> None:
        """One request within the read deadline; a request cut short by it gets a 408.

        The request line, command and version start empty for each request, so an answer sent
        before the request line has fully arrived (a 408 for a trickled one) can still be logged
        and written.
        """
        self.requestline = self.command = ""
        self.request_version = self.protocol_version
        self._reader.start()
        try:
            self._handle_one_request()
        except TimeoutError:
            self.close_connection = True
            if self._reader.deadline is not None and self._reader.received:
                self._send_error(408, f"the request did not arrive within {self.app.read_timeout:g} s; "
                                      "send the request line, headers and body without pauses",
                                 headers={"Connection": "close"})

    def _handle_one_request(self) -> None:
        """``BaseHTTPRequestHandler.handle_one_request`` with our own timeout handling."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.command = ""
            self.request_version = self.protocol_version
            self.send_error(414, "the request line is longer than 65536 bytes")
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        handler = getattr(self, f"do_{self.command}", None)
        if handler is None:
            self.send_error(501, f"method {self.command[:20]!r} is not supported; use GET or POST")
            return
        handler()
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Request lines are client text: the server's key (a client may put it in a URL) and
        anything key-shaped are redacted before they reach a log."""
        logger.debug("%s - %s", self.address_string(), redact_secrets(format % args, self.app.api_key))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own errors (bad request line, unknown method, header limits)
        as OpenAI-style JSON instead of its HTML page."""
        if not self.request_version or self.request_version == "HTTP/0.9":
            self.request_version = self.protocol_version  # so a status line and headers go out
        self.close_connection = True
        text = message or self.responses.get(code, ("error",))[0]  # may quote the request line
        if len(text) > SHOWN_REQUEST_CHARS:
            text = clip_redacted(text, SHOWN_REQUEST_CHARS, self.app.api_key) + "..."
        else:
            text = redact_secrets(text, self.app.api_key)
        self._send_error(code, f"{text}; send an HTTP/1.1 request such as "
                               "'POST /v1/chat/completions HTTP/1.1' with a JSON body",
                         headers={"Connection": "close"})

    def _not_allowed(self) -> None:
        """PUT, DELETE, PATCH, OPTIONS, HEAD: a JSON 405 naming the methods that exist."""
        if self._discard_body():
            self.close_connection = True
            self._send_error(405, f"method {self.command} is not allowed; use GET /v1/models or "
                                  "POST /v1/chat/completions",
                             headers={"Allow": ALLOWED_METHODS, "Connection": "close"})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _not_allowed

    # -- helpers ---------------------------------------------------------------------------

    def _content_length(self) -> int | None:
        """The declared body length, or ``None`` after answering 411/413 for a bad one."""
        given = set(self.headers.get_all("Content-Length") or ())
        if len(given) > 1:  # which one frames the body? A proxy and we could disagree: refuse
            self.close_connection = True
            self._send_error(400, f"the request has {len(given)} different Content-Length headers; "
                                  "send exactly one", headers={"Connection": "close"})
            return None
        raw = self.headers.get("Content-Length")
        if raw is None and self.command != "POST":
            return 0
        try:
            length = int(raw) if raw is not None else -1
        except ValueError:
            length = -1
        if 0 <= length <= MAX_BODY_BYTES:
            return length
        self.close_connection = True
        self._send_error(411 if length < 0 else 413,
                         f"Content-Length={raw!r} is invalid: send a JSON body of at most "
                         f"{MAX_BODY_BYTES} bytes with its Content-Length")
        return None

    def _read_body(self) -> bytes | None:
        """The body, read in bounded pieces within the request's deadline (408 past it)."""
        length = self._content_length()
        if length is None:
            return None
        body = bytearray()
        try:
            while len(body) < length:
                piece = self.rfile.read(min(READ_CHUNK_BYTES, length - len(body)))
                if not piece:
                    self.close_connection = True
                    return None  # the client hung up mid-body
                body += piece
        except TimeoutError:
            self.close_connection = True
            self._send_error(408, f"the request body did not arrive within {self.app.read_timeout:g} s "
                                  f"({len(body)} of {length} bytes came); send it without pauses",
                             headers={"Connection": "close"})
            return None
        self._reader.finish()
        return bytes(body)

    def _discard_body(self) -> bool:
        """Read and drop a body we will not use, so closing does not reset the connection."""
        return self._read_body() is not None

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                   content_type: str = "application/json") -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_error(self, status: int, message: str, *, param: str | None = None,
                    code: str | None = None, headers: dict[str, str] | None = None) -> None:
        self._send_json(status, wire.error(status, message, param=param, code=code), headers)

    def _drop_connection(self) -> None:
        """Close the socket abruptly, mid-answer, as a failing provider would."""
        self.close_connection = True
        if self.app.stopping.is_set():
            return  # the server resets the connection itself when it closes it
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _client_gone(self) -> bool:
        """Whether the client closed its side (a readable socket with nothing to read)."""
        try:
            if hasattr(select, "poll"):  # select() fails for descriptors >= 1024
                poller = select.poll()
                poller.register(self.connection, select.POLLIN)
                readable = bool(poller.poll(0))
            else:  # pragma: no cover - Windows
                readable = bool(select.select([self.connection], [], [], 0)[0])
            # readable with nothing to read is the end of the stream; data is a pipelined request
            return readable and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def _start_stream(self) -> None:
        self._answering = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
