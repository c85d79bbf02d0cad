"""The local server's routes: ``/v1/models``, ``/health`` and ``/v1/chat/completions``.

Accepted request fields: ``model``, ``messages``, ``max_tokens`` / ``max_completion_tokens``,
``temperature``, ``top_p``, ``seed``, ``stop``, ``stream``, ``stream_options.include_usage``.
``n`` other than 1 and ``logprobs: true`` are rejected (400) because they would change the
answer's shape; other OpenAI fields (``tools``, ``tool_choice``, ``response_format``, penalties,
``user``, ``metadata``, ...) are accepted and have no effect: these models answer in plain text.
A request without ``temperature`` is greedy (0), so answers are reproducible by default.
Streaming uses chunked transfer encoding, so connections stay alive between requests and a
mid-stream cut is visible to the client as an incomplete body. A non-streaming answer stops
when its client disconnects.

The HTTP plumbing (deadlines, bodies, JSON errors) is :mod:`jevlaya_lab.local.protocol`; fault
profiles act through :mod:`jevlaya_lab.local.fault_injection`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jevlaya_lab.local import validation, wire
from jevlaya_lab.local.errors import ChatRequestError
from jevlaya_lab.local.fault_injection import Cut, FaultInjectingHandler, Stopping
from jevlaya_lab.local.generation import Generation
from jevlaya_lab.local.limits import (
    MAX_JSON_DEPTH,
    MAX_JSON_OBJECTS,
    TooManyObjects,
    json_depth_over,
    parse_bounded,
)
from jevlaya_lab.local.protocol import ServedModels

if TYPE_CHECKING:
    from jevlaya_lab.local.faults import FaultProfile
    from jevlaya_lab.local.generation import ChatBackend

logger = logging.getLogger("jevlaya_lab.local.server")

GONE_CHECK_EVERY = 8  # tokens between checks that a non-streaming client is still there

__all__ = ["ChatHandler", "ServedModels"]


class ChatHandler(FaultInjectingHandler):
    """Serves ``/v1/models`` and ``/v1/chat/completions`` for the ``Server`` it belongs to."""

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
            request = parse_bounded(body)
            too_deep = json_depth_over(request)
        except RecursionError:
            too_deep = True
        except TooManyObjects:
            self._send_error(400, f"the request body holds more than {MAX_JSON_OBJECTS} JSON objects; "
                                  f"send at most {validation.MAX_MESSAGES} messages", param="messages")
            return
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
        except (Cut, Stopping):
            self._drop_connection()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away or stopped reading
        except Exception as exc:  # a bug or a model failure
            logger.exception("chat completion failed")
            self.close_connection = True
            if not self._answering:
                self._send_error(500, f"the local model failed: {type(exc).__name__}: {exc}")

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

    def _model_not_found(self, name: Any) -> None:
        self._send_error(404, f"The model {name!r} does not exist on this server; served models: "
                              f"{', '.join(self.app.model_names)}", param="model", code="model_not_found")

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
            raise Stopping
        if fault is not None and fault.status is not None:
            self._send_fault_status(fault)
        elif fault is not None and fault.garbage:
            self._send_garbage(fault, options["stream"])
        elif options["stream"]:
            self._stream(name, model, options, fault)
        else:
            self._complete(name, model, options, fault)

    def _complete(self, name: str, model: ChatBackend, options: dict[str, Any],
                  fault: FaultProfile | None) -> None:
        if fault is not None and fault.cut_after == 0:
            raise Cut
        pieces = 0

        def still_wanted(piece: str) -> None:  # nobody reads an abandoned answer: stop writing it
            nonlocal pieces
            pieces += 1
            if pieces % GONE_CHECK_EVERY == 0 and self._client_gone():
                raise ConnectionError("the client closed the connection")

        generation = _answer(model, options, fault, self._paced(fault, still_wanted))
        self._send_json(200, wire.completion(wire.completion_id(), name, generation))

    def _stream(self, name: str, model: ChatBackend, options: dict[str, Any],
                fault: FaultProfile | None) -> None:
        cid = wire.completion_id()
        self._start_stream()
        self._write_chunk(wire.sse(wire.chunk(cid, name, delta={"role": "assistant", "content": ""})))
        if fault is not None and fault.cut_after == 0:
            raise Cut
        send = self._paced(fault, lambda piece: self._write_chunk(
            wire.sse(wire.chunk(cid, name, delta={"content": piece}))))
        try:
            generation = _answer(model, options, fault, send)
        except (Cut, Stopping, ConnectionError, TimeoutError):
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


def _answer(model: ChatBackend, options: dict[str, Any], fault: FaultProfile | None,
            on_token: Callable[[str], None]) -> Generation:
    """Generate, or with an ``empty`` fault answer nothing at all."""
    if fault is not None and fault.empty:
        return Generation("", "stop", options["prompt_tokens"], 0)
    return model.generate(on_token=on_token, **options["generate"])


def _options(request: dict[str, Any], model: ChatBackend) -> dict[str, Any]:
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
