"""The OpenAI Chat Completions wire format: the JSON bodies the local server sends.

Kept apart from the HTTP plumbing so the shapes are easy to compare with the OpenAI reference:
completions, streaming chunks (``chat.completion.chunk``), the model list and error bodies.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from jevlaya_lab.local.generation import Generation

OWNER = "jevlaya-lab"

# HTTP status -> OpenAI error "type"
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    411: "invalid_request_error",
    413: "invalid_request_error",
    414: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    501: "invalid_request_error",
    503: "service_unavailable",
    505: "invalid_request_error",
}


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion(cid: str, model: str, generation: Generation) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` body."""
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "logprobs": None, "finish_reason": generation.finish_reason,
                     "message": {"role": "assistant", "content": generation.text, "refusal": None}}],
        "usage": usage(generation.prompt_tokens, generation.completion_tokens),
    }


def chunk(cid: str, model: str, *, delta: dict[str, Any] | None = None,
          finish_reason: str | None = None, usage_: dict[str, int] | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk``; with ``usage_`` it is the final usage-only chunk."""
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": model, "system_fingerprint": None}
    if usage_ is not None:
        body["choices"] = []
        body["usage"] = usage_
    else:
        body["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None,
                            "finish_reason": finish_reason}]
    return body


def sse(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event carrying JSON (or a raw string such as ``[DONE]``)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def model_list(names: list[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(n, created) for n in names]}


def model_entry(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


def error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "api_error"),
                      "param": param, "code": code}}
