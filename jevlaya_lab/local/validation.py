"""Checks for chat messages and sampling parameters, shared by ``ChatModel`` and the server.

Each check returns the normalised value or raises ``ChatRequestError`` naming the field, the
value and the fix, so the server can answer a precise HTTP 400 and in-process callers get the
same message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jevlaya_lab.local.errors import ChatRequestError

MAX_STOP_SEQUENCES = 4
# More turns than any model here can read (each costs a few template tokens): refusing them
# before rendering bounds the work a request can cause per message, not only per byte.
MAX_MESSAGES = 2048
# The OpenAI chat roles; "developer" is the newer name of "system", "function" the older of "tool".
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def check_messages(messages: Any) -> list[dict[str, str]]:
    """Return messages as ``[{"role": str, "content": str}, ...]``.

    Content may be a string, ``None`` (an assistant turn that only called tools) or a list of
    OpenAI content parts of type ``text``; other part types (images, audio) are rejected
    because these models only read text.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatRequestError("messages", messages,
                               'pass a list of {"role": ..., "content": ...} dicts')
    if not messages:
        raise ChatRequestError("messages", messages, "pass at least one message")
    if len(messages) > MAX_MESSAGES:
        raise ChatRequestError("messages", f"<{len(messages)} messages>",
                               f"send at most {MAX_MESSAGES} messages; drop or merge older turns")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ChatRequestError(where, message, 'each message must be a dict with "role" and "content"')
        role = message.get("role")
        if role not in ROLES:  # a role is also written into the prompt: no free text here
            raise ChatRequestError(f"{where}.role", role,
                                   'use "system", "developer", "user", "assistant" or "tool"')
        out.append({"role": role, "content": _content_text(f"{where}.content", message.get("content"))})
    return out


def check_text(field: str, text: str) -> str:
    """``text`` if it can be written as UTF-8; a lone surrogate (JSON ``"\\ud800"``) cannot be
    tokenized, so it is the caller's error, named, rather than a failure inside the model."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ChatRequestError(field, text[max(0, exc.start - 10):exc.end + 10],
                               f"the text holds an unpaired surrogate at character {exc.start}; "
                               "send valid Unicode (encode pairs as one character)") from None
    return text


def _content_text(field: str, content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return check_text(field, content)
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ChatRequestError(f"{field}[{j}]", part,
                                       'only text parts {"type": "text", "text": ...} are supported')
            texts.append(check_text(f"{field}[{j}].text", part["text"]))
        return "".join(texts)
    raise ChatRequestError(field, content, "content must be a string or a list of text parts")


def prompt_too_long(model: str, context_length: int, tokens: str) -> ChatRequestError:
    """The 400 for a prompt of ``tokens`` tokens that ``model``'s context cannot hold (one token
    is kept for the answer); the same words whichever backend serves the model."""
    return ChatRequestError("messages", f"<{tokens} prompt tokens>",
                            f"the model {model!r} reads at most {context_length - 1} "
                            "prompt tokens; shorten the messages")


def check_max_tokens(value: Any, default: int, limit: int | None = None) -> int:
    """A whole number of tokens to write, at least 1 and at most ``limit`` (the most a model's
    context can hold after a one-token prompt): a larger request could never be honoured and
    would only hold the model."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ChatRequestError("max_tokens", value, "use a whole number >= 1 (or leave it unset)")
    if limit is not None and value > limit:
        raise ChatRequestError("max_tokens", value, f"this model's context holds at most {limit} "
                                                    f"answer tokens; use a number from 1 to {limit}")
    return value


def check_temperature(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 2.0 or math.isnan(value):
        raise ChatRequestError("temperature", value, "use a number from 0 (greedy) to 2")
    return float(value)


def check_top_p(value: Any) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ChatRequestError("top_p", value, "use a number in (0, 1]")
    return float(value)


def check_seed(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or not -(2**63) <= value < 2**64):
        raise ChatRequestError("seed", value, "use a whole number from -2**63 to 2**64-1, or leave it unset")
    return value


def check_stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP_SEQUENCES:
        raise ChatRequestError("stop", value, f"use a string or a list of up to {MAX_STOP_SEQUENCES} strings")
    for s in stops:
        if not isinstance(s, str) or not s:
            raise ChatRequestError("stop", value, "every stop sequence must be a non-empty string")
        check_text("stop", s)
    return list(stops)
