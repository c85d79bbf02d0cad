"""OpenAI-compatible Chat Completions over the broker's :class:`~jevlaya_lab.broker.wire.Wire`.

Every provider outcome is classified here into a :class:`Failure` (the failure table: what each
status or transport error means) or a :class:`Reply`; the attempt applies a failure to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from jevlaya_lab.broker.errors import (
    AuthError,
    InvalidProviderResponseError,
    ProviderError,
    RateLimitError,
)
from jevlaya_lab.broker.wire import WIRE_ERRORS, Response, Wire
from jevlaya_lab.journal.rows import MAX_DETAIL
from jevlaya_lab.secrets import clip_scrubbed as clip_redacted

DRAIN_S = 0.5
# kind -> journal status
_STATUS = {"rate_limited": "rate_limited", "unavailable": "unavailable", "auth": "error",
           "rejected": "error", "invalid": "error", "interrupted": "error",
           "cannot_start": "unavailable"}


@dataclass
class Failure(Exception):
    """One attempt's classified failure.

    kinds: ``rate_limited`` (429/503: cooldown from Retry-After, doubling), ``unavailable`` (other
    5xx, transport errors, nothing within the time allowed: cooldown 60 s), ``invalid`` (garbage
    or empty 200: cooldown 60 s), ``auth`` (401/403: drop the key for the caller), ``rejected``
    (other 4xx but 408: excluded for this call), ``interrupted`` (a stream broke after its first
    delta), ``cannot_start`` (an embedded ``local://`` model failed to load: unavailable for the
    broker's lifetime, until ``enable_llm``). A 408 (request timeout) is ``unavailable``: the
    provider gave up on time, not on the request.
    """

    kind: str
    detail: str
    status: int | None = None
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.kind} (HTTP {self.status}): {self.detail}" if self.status else \
            f"{self.kind}: {self.detail}"

    @property
    def journal_status(self) -> str:
        return _STATUS[self.kind]

    def to_error(self, llm_name: str) -> ProviderError:
        cls = {"auth": AuthError, "rate_limited": RateLimitError,
               "invalid": InvalidProviderResponseError}.get(self.kind, ProviderError)
        return cls(f"{llm_name}: {self}", status=self.status, llm_name=llm_name,
                   retry_after=self.retry_after, detail=self.detail)


@dataclass
class Reply:
    """A complete answer."""

    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None


def build_body(model: str, messages: list[dict[str, Any]], *, stream: bool,
               tools: list[dict[str, Any]] | None = None,
               params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, **(params or {})}
    if tools:
        body["tools"] = tools
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


class Answered(Protocol):
    """What failure classification reads of an HTTP answer (a wire ``Response``; an
    ``httpx.Response`` has the same two attributes)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def retry_after(response: Answered) -> float | None:
    """Seconds the provider asks us to wait: ``retry-after-ms`` (OpenAI), then ``Retry-After``
    as seconds or as an HTTP date; ``None`` when absent or unreadable."""
    millis = response.headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


SHOWN_BODY_CHARS = 120  # of a body that is not a completion, quoted in the failure


def _detail(text: str, key: str | None, limit: int = MAX_DETAIL) -> str:
    """Provider text for a failure: redacted first, then clipped (a clip must never cut a key
    so that redaction no longer recognises it)."""
    return clip_redacted(text.strip().replace("\n", " "), limit, key)


def error_detail(body: bytes, key: str | None) -> str:
    """The provider's error message (OpenAI-style ``{"error": {"message": ...}}`` or raw text).

    Whatever JSON a provider puts there (``null``, a number, a list, an object) comes back as
    text: a message that is not a string is shown as JSON, and a missing or null one as the
    whole body, so the HTTP status alone decides what the failure does to the pool."""
    raw = body.decode("utf-8", errors="replace")
    text = raw
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    else:
        err = data.get("error", data) if isinstance(data, dict) else data
        message = err.get("message") if isinstance(err, dict) else err
        if isinstance(message, str):
            text = message
        elif message is not None:
            text = json.dumps(message, ensure_ascii=False)
    return _detail(text, key)


def classify_status(response: Answered, body: bytes, key: str | None) -> Failure:
    status = response.status_code
    detail = error_detail(body, key)
    if status in (429, 503):
        return Failure("rate_limited" if status == 429 else "unavailable", detail, status,
                       retry_after(response))
    if status >= 500 or status == 408:
        return Failure("unavailable", detail, status)
    if status in (401, 403):
        return Failure("auth", detail, status)
    return Failure("rejected", detail, status)


def transport_failure(exc: BaseException, key: str | None) -> Failure:
    return Failure("unavailable", _detail(f"{type(exc).__name__}: {exc}", key))


def _shaped(value: Any, kind: type, what: str) -> Any:
    """``value`` if it is a ``kind`` (``None`` counts as empty), else a ``TypeError`` naming
    ``what``: providers that answer well-formed JSON of the wrong shape are ``invalid`` too."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise TypeError(f"{what} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def _tool_calls(raw: Any) -> list[dict[str, Any]]:
    """Tool calls (or streamed fragments of them) whose fields have the types we fold."""
    calls = _shaped(raw, list, "tool_calls")
    for call in calls:
        call = _shaped(call, dict, "tool call")
        index = call.get("index")
        if index is not None and (not isinstance(index, int) or index < 0):
            raise TypeError(f"tool call index={index!r} is not a whole number >= 0")
        function = _shaped(call.get("function"), dict, "tool call function")
        for field_name in ("name", "arguments"):
            _shaped(function.get(field_name), str, f"tool call function.{field_name}")
    checked: list[dict[str, Any]] = calls  # each entry was checked to be a tool-call dict
    return checked


def parse_reply(body: bytes, key: str | None) -> Reply:
    """A non-streaming 200 body -> Reply, or an ``invalid`` Failure (garbage, wrong shape or
    empty). The usual answer (text, no tool calls) is read by a short path that checks the
    same types; anything else goes through the full checks, which also word the failure."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _not_a_completion(exc, body, key) from None
    if isinstance(data, dict):
        choices = data.get("choices")
        if isinstance(choices, list) and choices:
            choice = choices[0]
            if isinstance(choice, dict):
                message = choice.get("message")
                if isinstance(message, dict) and message.get("tool_calls") is None:
                    text = message.get("content")
                    if isinstance(text, str) and text:
                        return Reply(text, [], _usage(data.get("usage")), choice.get("finish_reason"))
    try:
        data = _shaped(data, dict, "the body")
        choice = _shaped(_shaped(data.get("choices"), list, "choices")[0], dict, "choices[0]")
        message = _shaped(choice["message"], dict, "message")
        text = _shaped(message.get("content"), str, "message.content")
        tool_calls = _tool_calls(message.get("tool_calls"))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise _not_a_completion(exc, body, key) from None
    if not text and not tool_calls:
        raise Failure("invalid", "200 with neither text nor tool calls", 200)
    return Reply(text, tool_calls, _usage(data.get("usage")), choice.get("finish_reason"))


def _not_a_completion(exc: Exception, body: bytes, key: str | None) -> Failure:
    return Failure("invalid", f"200 whose body is not a chat completion ({exc}): "
                   + _detail(body[:64 * 1024].decode("utf-8", "replace"), key, SHOWN_BODY_CHARS), 200)


_USAGE_KEYS = frozenset(("prompt_tokens", "completion_tokens", "total_tokens"))


def _usage(raw: Any) -> dict[str, int]:
    """The token counts of a ``usage`` object that are finite numbers, as ints."""
    usage: dict[str, int] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            if isinstance(v, (int, float)) and math.isfinite(v) and k in _USAGE_KEYS:
                usage[k] = int(v)
    return usage


async def post_chat(wire: Wire, url: str, key: str | None, body: dict[str, Any]) -> Reply:
    """One non-streaming request; raises :class:`Failure`."""
    try:
        response = await wire.post(f"{url}/chat/completions", key, body)
    except WIRE_ERRORS as exc:
        raise transport_failure(exc, key) from None
    if response.status_code != 200:
        raise classify_status(response, response.content, key)
    return parse_reply(response.content, key)


@dataclass
class Delta:
    """One SSE chunk's payload: text, tool-call fragments, usage, finish reason."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] | None = None
    finish_reason: str | None = None


async def open_stream(wire: Wire, url: str, key: str | None,
                      body: dict[str, Any]) -> Response:
    """Send a streaming request and return the open 200 response (raises :class:`Failure`)."""
    try:
        response = await wire.open(f"{url}/chat/completions", key, body)
    except WIRE_ERRORS as exc:
        raise transport_failure(exc, key) from None
    if response.status_code != 200:
        try:
            content = await response.aread()
        except WIRE_ERRORS:
            content = b""
        finally:
            await response.aclose()
        raise classify_status(response, content, key)
    return response


def parse_chunk(data: str) -> Delta:
    """One SSE ``data:`` payload -> Delta; ``ValueError``/``TypeError`` when it is not a chunk."""
    chunk = _shaped(json.loads(data), dict, "the chunk")
    delta = Delta(usage=_usage(chunk.get("usage")) or None)
    choices = _shaped(chunk.get("choices"), list, "choices")
    if choices:
        choice = _shaped(choices[0], dict, "choices[0]")
        piece = _shaped(choice.get("delta"), dict, "delta")
        delta.text = _shaped(piece.get("content"), str, "delta.content")
        delta.tool_calls = _tool_calls(piece.get("tool_calls"))
        delta.finish_reason = choice.get("finish_reason")
    return delta


async def read_deltas(response: Response, key: str | None) -> AsyncIterator[Delta]:
    """Parse the SSE body into :class:`Delta` objects; a body that ends without ``[DONE]`` or a
    finish reason, or a transport error, raises an ``unavailable`` Failure."""
    finished = False
    lines = response.aiter_lines()
    try:
        async for line in lines:
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                await _drain(lines)
                return
            try:
                delta = parse_chunk(data)
            except (ValueError, TypeError, IndexError) as exc:
                raise Failure("invalid", f"stream chunk is not a chat completion chunk ({exc}): "
                              + _detail(data, key, SHOWN_BODY_CHARS), 200) from None
            finished = finished or delta.finish_reason is not None
            yield delta
    except WIRE_ERRORS as exc:
        raise transport_failure(exc, key) from None
    if not finished:
        raise Failure("unavailable", "the stream ended without [DONE] (connection cut)")


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read what follows ``[DONE]`` (the end of the chunked body) so the connection goes back
    to the pool instead of being closed; bounded, a server that lingers is simply cut."""
    with contextlib.suppress(TimeoutError, *WIRE_ERRORS):
        async with asyncio.timeout(DRAIN_S):
            async for _ in lines:
                pass


def merge_tool_calls(acc: list[dict[str, Any]], fragments: list[dict[str, Any]]) -> None:
    """Fold streamed tool-call fragments (by ``index``) into complete tool calls."""
    for frag in fragments:
        i = frag.get("index")
        i = len(acc) if i is None else i
        while len(acc) <= i:
            acc.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = acc[i]
        call["id"] = frag.get("id") or call["id"]
        fn = frag.get("function") or {}
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""
