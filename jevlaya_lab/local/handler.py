"""The HTTP request handler of the local server: routing, auth, chat completions and faults.

Accepted request fields: ``model``, ``messages``, ``max_tokens`` / ``max_completion_tokens``,
``temperature``, ``top_p``, ``seed``, ``stop``, ``stream``, ``stream_options.include_usage``.
``n`` other than 1 and ``logprobs: true`` are rejected (400) because they would change the
answer's shape; other OpenAI fields (``tools``, ``tool_choice``, ``response_format``, penalties,
``user``, ``metadata``, ...) are accepted and have no effect: these models answer in plain text.
A request without ``temperature`` is greedy (0), so answers are reproducible by default.
Streaming uses chunked transfer encoding, so connections stay alive between requests and a
mid-stream cut is visible to the client as an incomplete body.

Every error, including those the standard library raises itself (a garbage request line, an
unknown method, oversized headers), is answered in the OpenAI error shape
``{"error": {"message", "type", "param", "code"}}``; the limits on time, size and nesting are
in :mod:`jevlaya_lab.local.limits`. A non-streaming answer stops when its client disconnects.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Protocol

from jevlaya_lab.local import validation, wire
from jevlaya_lab.local.errors import ChatRequestError
from jevlaya_lab.local.faults import FaultProfile
from jevlaya_lab.local.generation import Generation
from jevlaya_lab.local.limits import MAX_BODY_BYTES, MAX_JSON_DEPTH, READ_CHUNK_BYTES, DeadlineReader, json_depth_over
from jevlaya_lab.secrets import clip_scrubbed as clip_redacted
from jevlaya_lab.secrets import scrub_secrets as redact_secrets

if TYPE_CHECKING:
    from jevlaya_lab.local.chat_model import ChatModel

logger = logging.getLogger("jevlaya_lab.local.server")

GARBAGE = "<html><body><h1>502 Bad Gateway</h1>(simulated garbage from a fault profile)</body></html>"
ALLOWED_METHODS = "GET, POST"
SHOWN_REQUEST_CHARS = 200  # of a client's garbage request line echoed in an error message
GONE_CHECK_EVERY = 8  # tokens between checks that a non-streaming client is still there


class _Cut(Exception):
    """Raised inside generation to drop the connection on purpose (``cut_after``)."""


class _Stopping(Exception):
    """The server is stopping: abandon the request."""


class ServedModels(Protocol):
    """What the handler needs from the server it belongs to (``local.server.Server`` is one), so
    the handler never imports the server that imports it."""

    api_key: str | None
    created: int
    stopping: threading.Event
    read_timeout: float

    @property
    def model_names(self) -> list[str]: ...

    def model_for(self, name: str) -> ChatModel | None: ...

    def next_call(self, name: str) -> FaultProfile | None: ...


class ChatHandler(BaseHTTPRequestHandler):
    """Serves ``/v1/models`` and ``/v1/chat/completions`` for the ``Server`` it belongs to."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # SSE pieces are tiny; do not let Nagle hold them back
    server_version = "jevlaya-lab-local"

    @property
    def app(self) -> ServedModels:
        return self.server.app  # type: ignore[attr-defined]

    def setup(self) -> None:
        super().setup()
        self._reader = DeadlineReader(self.connection, self.app.read_timeout)
        self.rfile = io.BufferedReader(self._reader, READ_CHUNK_BYTES)

    def handle_one_request(self) -> None:
        """One request within the read deadline; a request cut short by it gets a 408."""
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

    # -- routing ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._reader.finish()
        if not self._authorised():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            self._send_json(200, wire.model_list(self.app.model_names, self.app.created))
        elif path.startswith("/v1/models/"):
            name = path[len("/v1/models/"):]
            if name in self.app.model_names:
                self._send_json(200, wire.model_entry(name, self.app.created))
            else:
                self._model_not_found(name)
        elif path == "/health":
            self._send_json(200, {"status": "ok"})
        else:
            self._send_error(404, f"no route for GET {path}; use /v1/models or /v1/chat/completions")

    def do_POST(self) -> None:
        body = self._read_body()
        if body is None or not self._authorised():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path != "/v1/chat/completions":
            self._send_error(404, f"no route for POST {path}; use /v1/chat/completions")
            return
        try:
            request = json.loads(body)
            too_deep = json_depth_over(request)
        except RecursionError:
            too_deep = True
        except (ValueError, UnicodeDecodeError) as exc:
            self._send_error(400, f"the request body is not valid JSON ({exc}); send a JSON object")
            return
        if too_deep:
            self._send_error(400, f"the request body nests JSON more than {MAX_JSON_DEPTH} levels deep; "
                                  "send a chat completion request (it nests about 6 levels)")
            return
        self._answering = False  # True once the 200 status line of an answer is out
        try:
            self._chat(request)
        except (_Cut, _Stopping):
            self._drop_connection()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away or stopped reading
        except Exception as exc:  # a bug or a model failure
            logger.exception("chat completion failed")
            self.close_connection = True
            if not self._answering:
                self._send_error(500, f"the local model failed: {type(exc).__name__}: {exc}")

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

    def _authorised(self) -> bool:
        key = self.app.api_key
        if key is None:
            return True
        given = self.headers.get("Authorization", "")
        if given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), key.encode()):
            return True
        self._send_error(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>' "
                              "with the key the server was started with", code="invalid_api_key")
        return False

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

    def _model_not_found(self, name: Any) -> None:
        self._send_error(404, f"The model {name!r} does not exist on this server; served models: "
                              f"{', '.join(self.app.model_names)}", param="model", code="model_not_found")

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

    # -- chat completions ------------------------------------------------------------------

    def _chat(self, request: Any) -> None:
        if not isinstance(request, dict):
            self._send_error(400, "the request body must be a JSON object")
            return
        name = request.get("model")
        model = self.app.model_for(name) if isinstance(name, str) else None
        if model is None or not isinstance(name, str):
            self._model_not_found(name)
            return
        fault = self.app.next_call(name)
        try:
            options = _options(request, model)
        except ChatRequestError as exc:
            self._send_error(400, str(exc), param=exc.field)
            return
        if fault is not None and fault.latency and self.app.stopping.wait(fault.latency):
            raise _Stopping
        if fault is not None and fault.status is not None:
            self._send_fault_status(fault)
        elif fault is not None and fault.garbage:
            self._send_garbage(fault, options["stream"])
        elif options["stream"]:
            self._stream(name, model, options, fault)
        else:
            self._complete(name, model, options, fault)

    def _send_fault_status(self, fault: FaultProfile) -> None:
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = f"{fault.retry_after:g}"
        status = fault.status or 500
        code = {429: "rate_limit_exceeded", 503: "overloaded"}.get(status)
        message = self._echo_key(f"simulated HTTP {status} from a fault profile", fault)
        self._send_error(status, message, code=code, headers=headers)

    def _send_garbage(self, fault: FaultProfile, stream: bool) -> None:
        garbage = self._echo_key(GARBAGE, fault)
        if not stream:
            self._send_json(200, garbage, content_type="application/json")
            return
        self._start_stream()
        self._write_chunk(wire.sse(garbage))
        self._write_chunk(b"")

    def _echo_key(self, text: str, fault: FaultProfile) -> str:
        """``text`` with the request's API key written in at ``fault.echo_key`` (padded with dots)."""
        if fault.echo_key is None:
            return text
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        head = text[:fault.echo_key].ljust(fault.echo_key, ".")
        return f"{head}{key} was used{text[fault.echo_key:]}"

    def _start_stream(self) -> None:
        self._answering = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _paced(self, fault: FaultProfile | None, send: Any) -> Any:
        """Wrap ``send(piece)`` with the fault's delays and cut, and the server's stop signal."""
        stopping = self.app.stopping
        sent = 0

        def on_token(piece: str) -> None:
            nonlocal sent
            delay = 0.0 if fault is None else (fault.first_token_delay if sent == 0 else fault.token_delay)
            if (delay and stopping.wait(delay)) or stopping.is_set():
                raise _Stopping
            send(piece)
            sent += 1
            if fault is not None and fault.cut_after is not None and sent >= fault.cut_after:
                raise _Cut

        return on_token

    def _complete(self, name: str, model: ChatModel, options: dict[str, Any],
                  fault: FaultProfile | None) -> None:
        if fault is not None and fault.cut_after == 0:
            raise _Cut
        pieces = 0

        def still_wanted(piece: str) -> None:  # nobody reads an abandoned answer: stop writing it
            nonlocal pieces
            pieces += 1
            if pieces % GONE_CHECK_EVERY == 0 and self._client_gone():
                raise ConnectionError("the client closed the connection")

        generation = _answer(model, options, fault, self._paced(fault, still_wanted))
        self._send_json(200, wire.completion(wire.completion_id(), name, generation))

    def _stream(self, name: str, model: ChatModel, options: dict[str, Any],
                fault: FaultProfile | None) -> None:
        cid = wire.completion_id()
        self._start_stream()
        self._write_chunk(wire.sse(wire.chunk(cid, name, delta={"role": "assistant", "content": ""})))
        if fault is not None and fault.cut_after == 0:
            raise _Cut
        send = self._paced(fault, lambda piece: self._write_chunk(
            wire.sse(wire.chunk(cid, name, delta={"content": piece}))))
        try:
            generation = _answer(model, options, fault, send)
        except (_Cut, _Stopping, ConnectionError, TimeoutError):
            raise
        except Exception as exc:  # headers are gone: report the failure inside the stream
            logger.exception("generation failed for model %r", name)
            self._write_chunk(wire.sse(wire.error(500, f"generation failed: {exc}")))
            self._write_chunk(b"")
            return
        self._write_chunk(wire.sse(wire.chunk(cid, name, finish_reason=generation.finish_reason)))
        if options["include_usage"]:
            self._write_chunk(wire.sse(wire.chunk(
                cid, name, usage_=wire.usage(generation.prompt_tokens, generation.completion_tokens))))
        self._write_chunk(wire.sse("[DONE]"))
        self._write_chunk(b"")


def _answer(model: ChatModel, options: dict[str, Any], fault: FaultProfile | None,
            on_token: Any) -> Generation:
    """Generate, or with an ``empty`` fault answer nothing at all."""
    if fault is not None and fault.empty:
        return Generation("", "stop", options["prompt_tokens"], 0)
    return model.generate(on_token=on_token, **options["generate"])


def _options(request: dict[str, Any], model: ChatModel) -> dict[str, Any]:
    """Validate the request fields into ``ChatModel.generate`` keyword arguments."""
    n = request.get("n")
    if n not in (None, 1):
        raise ChatRequestError("n", n, "this server returns one choice per request; use n=1")
    if request.get("logprobs") not in (None, False):
        raise ChatRequestError("logprobs", request["logprobs"], "log probabilities are not available; "
                                                                "leave logprobs unset")
    stream = request.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ChatRequestError("stream", stream, "use true or false")
    stream_options = request.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ChatRequestError("stream_options", stream_options, 'use {"include_usage": true}')
    max_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
    messages = validation.check_messages(request.get("messages"))
    prompt_tokens = len(model.prompt_ids(messages))  # too long for the model: a 400 before streaming
    generate = {
        "messages": messages,
        "max_tokens": validation.check_max_tokens(max_tokens, model.default_max_tokens,
                                                  model.max_answer_tokens),
        "temperature": validation.check_temperature(request.get("temperature")),
        "top_p": validation.check_top_p(request.get("top_p")),
        "seed": validation.check_seed(request.get("seed")),
        "stop": validation.check_stop(request.get("stop")),
    }
    return {"stream": stream, "include_usage": bool(stream_options.get("include_usage")),
            "prompt_tokens": prompt_tokens, "generate": generate}
