"""Call validation, pure: every argument a caller gives is checked here, before anything runs.

Each check returns the normalised value or raises ``ValueError`` (``TypeError`` for a ``wait``
that is not a number; :class:`~jevlaya_lab.broker.errors.PromptError`, a ``ValueError``, for
input no model could be sent) whose message names the field, the value and the fix. :func:`check_call`
turns the keywords of ``ask``/``chat``/``stream`` into one :class:`Call`, which is what the
runtime, the races and the streams read; nothing else in the package re-validates them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from jevlaya_lab._unreadable import first_unreadable
from jevlaya_lab.broker.errors import PromptError

Messages = list[dict[str, Any]]
MAX_INPUT_DEPTH = 64  # nesting levels of messages, tools or parameters (the local server's bound)
RESERVED_PARAMS = ("model", "messages", "stream", "stream_options", "tools")
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_MAX_ATTEMPTS_PER_MODEL = 3
DEFAULT_WINDOW_S = 1.0


def new_id() -> str:
    """A random version-4 UUID as 32 hex digits: what ``uuid.uuid4().hex`` returns, without
    building a ``UUID`` object (trace and call ids are made on every call)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return raw.hex()


def check_sendable(value: Any, field: str) -> None:
    """Raise :class:`PromptError` naming the place when ``value`` (a prompt, the messages, the
    tools or a parameter) holds a string that UTF-8 cannot encode (a lone surrogate), or is
    nested deeper than ``MAX_INPUT_DEPTH`` levels. Such input fails on every model alike, so
    it is refused here, before any model is tried and cooled for it. Iterative: a structure
    nested thousands of levels deep is reported, not a ``RecursionError``."""
    found = first_unreadable(value, MAX_INPUT_DEPTH, field)
    if found is None:
        return
    if found.char is not None:
        raise PromptError(
            f"{found.where}: character {found.index} ({found.char!r}) is not valid "
            "Unicode (a lone surrogate), so no model can be sent this text; clean "
            "it first, e.g. text.encode('utf-8', 'replace').decode('utf-8')")
    raise PromptError(f"{found.where}: nested deeper than {MAX_INPUT_DEPTH} levels of lists "
                      "or dicts; a chat request is never that deep: send the data as "
                      "text (e.g. json.dumps of a flatter structure)")


def check_prompt(prompt: Any) -> Messages:
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt={prompt!r:.80}: must be a non-empty string (use chat() for a "
                         "list of messages)")
    check_sendable(prompt, "prompt")
    return [{"role": "user", "content": prompt}]


def check_messages(messages: Any) -> Messages:
    if isinstance(messages, str) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"messages={messages!r:.80}: must be a non-empty list of "
                         "{'role': ..., 'content': ...} dicts (use ask() for a plain prompt)")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"messages[{i}]={m!r:.80}: each message must be a dict with a "
                             "'role' (system/user/assistant/tool) and 'content'")
    check_sendable(messages, "messages")
    return [dict(m) for m in messages]


def check_stream_input(prompt: Any) -> Messages:
    """``stream()`` takes a prompt string or, like ``chat()``, a list of messages."""
    return check_prompt(prompt) if isinstance(prompt, str) else check_messages(prompt)


def check_label(name: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{name}={value!r}: must be a non-empty string or None")
    return value


# Chat Completions parameters a call may pass on to the provider by name. Anything else is a
# TypeError, so a misspelt or foreign keyword never reaches a provider silently;
# ``extra_body={...}`` sends other fields on purpose.
PROVIDER_PARAMS = frozenset({
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user",
    "tool_choice", "parallel_tool_calls", "response_format", "reasoning_effort", "extra_body",
})


# Keywords of llmbroker's direct clients, with what to write here instead (a clearer TypeError).
FOREIGN_KEYWORDS = {
    "timeout": "wait= here (seconds for the whole answer)",
    "params": "keywords here (max_tokens=..., temperature=...) or extra_body={...}",
    "messages": "chat(messages) or stream(messages) here",
}


def check_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The provider parameters of a call, checked, with ``extra_body`` merged in.

    The broker's own request fields (model, messages, stream, tools) cannot be overridden;
    unknown keywords are a ``TypeError`` naming them; ``response_format`` must be a dict."""
    if not params:  # the common call passes none: nothing to check or merge
        return {}
    clash = sorted(set(params) & set(RESERVED_PARAMS))
    if clash:
        raise ValueError(f"{clash[0]}=...: the broker sets this request field itself; pass the "
                         "prompt, messages or tools as arguments and let the pool pick the model")
    unknown = sorted(set(params) - PROVIDER_PARAMS)
    ported = [f"{k}= (llmbroker's) is {FOREIGN_KEYWORDS[k]}" for k in unknown
              if k in FOREIGN_KEYWORDS]
    if ported:
        raise TypeError(f"unexpected keyword: {'; '.join(ported)}")
    if unknown:
        raise TypeError(f"unexpected keyword(s) {', '.join(unknown)}; provider "
                        f"parameters accepted by name: {', '.join(sorted(PROVIDER_PARAMS))} "
                        "(send any other field with extra_body={...})")
    body = {k: v for k, v in params.items() if k != "extra_body"}
    fmt = body.get("response_format")
    if fmt is not None and not isinstance(fmt, Mapping):
        raise ValueError(f"response_format={fmt!r:.80}: must be a dict such as "
                         "{'type': 'json_object'} (or None)")
    extra = params.get("extra_body")
    if extra is not None:
        if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra):
            raise ValueError(f"extra_body={extra!r:.80}: must be a dict of request fields")
        clash = sorted(set(extra) & (set(RESERVED_PARAMS) | set(body)))
        if clash:
            raise ValueError(f"extra_body[{clash[0]!r}]: set by the broker or by a keyword "
                             "already; extra_body only adds fields")
        body.update(extra)
    return body


def check_wait(wait: Any) -> float | None:
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise TypeError(f"wait={wait!r}: must be None, 0 or a number of seconds")
    if math.isnan(wait) or wait < 0:
        raise ValueError(f"wait={wait!r}: must be None (no deadline), 0 (no queueing) or a "
                         "positive number of seconds")
    return float(wait)


def check_fastest_of(fastest_of: Any) -> int:
    if fastest_of is None:
        return 1
    if isinstance(fastest_of, bool) or not isinstance(fastest_of, int) or fastest_of < 1:
        raise ValueError(f"fastest_of={fastest_of!r}: must be None or an integer >= 1 (the "
                         "number of models to race)")
    return fastest_of


def check_window(window: Any) -> float:
    if isinstance(window, bool) or not isinstance(window, (int, float)) or math.isnan(window) \
            or window < 0:
        raise ValueError(f"stream_selection_window={window!r}: must be a number of seconds >= 0 "
                         "(0 shows the first text from any lane)")
    return float(window)


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: must be True or False")
    return value


def check_ceiling(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: must be an integer >= 1 (a hard ceiling on the "
                         "requests one call may send; see jevlaya_lab.broker.limits)")
    return value


def check_limit(limit: Any) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit={limit!r}: must be None (every row) or an integer >= 1 (the "
                         "newest rows)")
    return limit


def check_grace(grace: Any) -> float:
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < math.inf:
        raise ValueError(f"grace={grace!r}: must be a number of seconds >= 0 (how long calls in "
                         "flight may still finish before closing cancels them)")
    return float(grace)


def check_score(score: Any) -> float:
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score) \
            or not 0.0 <= score <= 1.0:
        raise ValueError(f"score={score!r}: must be a number between 0 (bad) and 1 (good)")
    return float(score)


def check_scope(scope: Any) -> str:
    if not isinstance(scope, str) or not scope or "/" in scope:
        raise ValueError(f"scope={scope!r}: must be a non-empty string without '/'")
    return scope


def check_sync_interval(interval: Any) -> float | None:
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, (int, float))
                                 or math.isnan(interval) or interval <= 0):
        raise ValueError(f"sync_interval={interval!r}: must be None (sync only on open and on "
                         "sync()) or a positive number of seconds")
    return None if interval is None else float(interval)


def check_local(local: Any) -> bool | None:
    if not (local is None or isinstance(local, bool)):
        raise ValueError(f"local={local!r}: must be None (the embedded local models join only a "
                         "caller without other models), True (always) or False (never)")
    return local


class Call(NamedTuple):
    """One routed call's validated arguments (``lanes`` is ``fastest_of``); immutable. A named
    tuple rather than a frozen dataclass: one is made per call, and a frozen dataclass's
    ``__init__`` costs several microseconds (it sets each field through ``object.__setattr__``)."""

    messages: Messages
    trace_id: str
    operation: str | None = None
    tools: list[dict[str, Any]] | None = None
    wait: float | None = None
    lanes: int = 1
    window: float = DEFAULT_WINDOW_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_attempts_per_model: int = DEFAULT_MAX_ATTEMPTS_PER_MODEL
    params: Mapping[str, Any] = {}  # never mutated: check_call gives each call its own dict
    parallel_recovery: bool = True


def check_call(messages: Messages, *, tools: list[dict[str, Any]] | None = None,
               operation: Any = None, trace_id: Any = None, wait: Any = None,
               fastest_of: Any = None, window: Any = DEFAULT_WINDOW_S,
               max_attempts: Any = DEFAULT_MAX_ATTEMPTS,
               max_attempts_per_model: Any = DEFAULT_MAX_ATTEMPTS_PER_MODEL,
               params: Mapping[str, Any] | None = None, parallel_recovery: Any = True) -> Call:
    """Every keyword of one call, checked (``messages`` already are, by the check_* above)."""
    if (operation is None and trace_id is None and wait is None and fastest_of is None
            and tools is None and not params and window == DEFAULT_WINDOW_S
            and type(window) is float and max_attempts is DEFAULT_MAX_ATTEMPTS
            and max_attempts_per_model is DEFAULT_MAX_ATTEMPTS_PER_MODEL
            and parallel_recovery is True):
        # every keyword at its default: nothing to check
        return Call(messages, new_id(), None, None, None, 1, DEFAULT_WINDOW_S, DEFAULT_MAX_ATTEMPTS,
                    DEFAULT_MAX_ATTEMPTS_PER_MODEL, {}, True)
    operation = check_label("operation", operation)
    trace_id = check_label("trace_id", trace_id)
    params = check_params(params) if params else {}
    for name, value in params.items():
        check_sendable(value, name)
    if tools is not None:
        check_sendable(tools, "tools")
    wait = check_wait(wait)
    lanes = check_fastest_of(fastest_of)
    window = check_window(window)
    max_attempts = check_ceiling("max_attempts", max_attempts)
    max_attempts_per_model = check_ceiling("max_attempts_per_model", max_attempts_per_model)
    parallel_recovery = check_flag("parallel_recovery", parallel_recovery)
    if lanes > max_attempts:
        raise ValueError(f"fastest_of={lanes} races more models than max_attempts={max_attempts} "
                         "allows; raise max_attempts or race fewer")
    return Call(messages, trace_id or new_id(), operation, tools, wait, lanes, window,
                max_attempts, max_attempts_per_model, params, parallel_recovery)
