"""The Broker's exceptions, one documented hierarchy.

    BrokerError                          (a JevlayaError) anything the broker raises on purpose
    ├── CatalogError                     a catalog file or URL is not a catalog (also a ValueError)
    ├── UnknownCallError                 record_quality names no journaled answer (a ValueError)
    ├── PromptError                      a call's input cannot be sent (a ValueError): raised
    │                                    before any model is tried, naming the field
    ├── UnknownLLMError                  direct() names no known model (also a KeyError)
    └── LLMRequestError                  anything that kept a call from giving an answer
        ├── NoLLMAvailableError(reason, retry_at)
        ├── LLMTimeoutError              ``wait`` ran out after the first delta
        ├── StreamInterruptedError       a stream broke after its first delta
        ├── StreamReplacementError       a race was won by a lane other than the one shown
        ├── ToolLoopLimitError           ``run_tool_loop`` needed more than ``max_steps`` rounds
        ├── BrokerClosedError            the broker was closed before or during the call
        └── ProviderError(status)        the provider answered with an error
            ├── AuthError                401 / 403
            ├── RateLimitError           429 (and 503 with Retry-After)
            └── InvalidProviderResponseError a 200 that is not a usable completion

Messages never contain an API key; provider text is redacted before it lands here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeGuard

from jevlaya_lab.errors import JevlayaError

NO_LLM_REASONS = ("timeout", "excluded", "empty_pool", "no_keys", "all_disabled")


class BrokerError(JevlayaError):
    """Base class of the broker's exceptions (see :mod:`jevlaya_lab.errors` for the whole tree)."""


class CatalogError(BrokerError, ValueError):
    """A catalog file or URL answered something that is not a catalog."""


class PromptError(BrokerError, ValueError):
    """A call's prompt, messages, tools or parameters cannot be sent to any model: text that is
    not valid Unicode (a lone surrogate such as ``"\\ud800"`` cannot be encoded as UTF-8) or
    structure nested deeper than a request may be. It is the caller's error, so it is raised
    before any model is tried (no request, no journal row, no cooldown); the message names the
    field (``prompt``, ``messages[0]['content']``, ``tools[1]...``) and the fix."""


class LLMRequestError(BrokerError):
    """Base class: a broker call ended without an answer."""


class NoLLMAvailableError(LLMRequestError):
    """No model could answer within this call.

    ``reason`` is one of ``timeout`` (models exist but are cooling, busy or ran out of time;
    ``retry_at`` says when the first one returns), ``excluded`` (every candidate was ruled out
    for this call), ``empty_pool``, ``no_keys`` and ``all_disabled``.
    """

    def __init__(self, message: str, *, reason: str, retry_at: datetime | None = None,
                 errors: tuple[BaseException, ...] = ()) -> None:
        if reason not in NO_LLM_REASONS:
            raise ValueError(f"reason={reason!r}: must be one of {NO_LLM_REASONS}")
        super().__init__(message)
        self.reason = reason
        self.retry_at = retry_at
        self.errors = errors


class BrokerClosedError(LLMRequestError, RuntimeError):
    """The broker is closed (or closed while this call was in flight: its attempts were
    cancelled and journaled ``cancelled``). Also a ``RuntimeError``, as it is a usage error."""


def closed_error(broker: str, *, in_flight: bool = False) -> BrokerClosedError:
    if in_flight:
        return BrokerClosedError(f"{broker} was closed while this call was in flight; its "
                                 "attempts were cancelled and journaled 'cancelled'. Close the "
                                 "broker only after its calls return (or pass grace=seconds to "
                                 "close() to let them finish)")
    return BrokerClosedError(f"{broker} is closed; it takes no new calls. Create a new broker "
                             "(or call it inside its 'with' block)")


class LLMTimeoutError(LLMRequestError):
    """``wait`` ran out after the first delta; the deltas already delivered stand."""


class StreamInterruptedError(LLMRequestError):
    """The answer broke after its first delta; the deltas already delivered stand.
    ``llm_name`` is the model whose answer broke."""

    def __init__(self, message: str, *, llm_name: str | None = None) -> None:
        super().__init__(message)
        self.llm_name = llm_name


class StreamReplacementError(LLMRequestError):
    """A race was won by another lane: replace everything shown with ``replacement.text``.

    ``replacement`` is the winning answer (``text``, ``llm_name``, ``call_id``, ``usage``,
    ``record_quality``); ``streamed_llm_name`` the model whose text was shown until then; the
    stream is exhausted but stays open for ``another()``.
    """

    def __init__(self, message: str, *, replacement: Any,
                 streamed_llm_name: str | None = None) -> None:
        super().__init__(message)
        self.replacement = replacement
        self.streamed_llm_name = streamed_llm_name


class ToolLoopLimitError(LLMRequestError):
    """The tool loop did not finish within ``max_steps`` rounds."""

    def __init__(self, message: str, *, messages: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.messages = messages or []


class ProviderError(LLMRequestError):
    """The provider answered with an error; ``status`` is the HTTP status (None: transport)."""

    def __init__(self, message: str, *, status: int | None = None, llm_name: str | None = None,
                 retry_after: float | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail  # the provider's own error message (keys redacted)
        self.llm_name = llm_name
        self.retry_after = retry_after


def is_rejection(exc: BaseException) -> TypeGuard[ProviderError]:
    """A provider answer that rules its model out for the call: 4xx other than 408/429."""
    return isinstance(exc, ProviderError) and exc.status is not None \
        and 400 <= exc.status < 500 and exc.status not in (408, 429)


class AuthError(ProviderError):
    """401/403: the key was refused; the broker stops using that key for this caller until
    another key resolves for it."""


class RateLimitError(ProviderError):
    """429 (or 503): the model is cooling down; ``retry_after`` in seconds when sent."""


class InvalidProviderResponseError(ProviderError):
    """A 200 whose body is not a usable completion (garbage, or neither text nor tool calls)."""


class UnknownCallError(BrokerError, ValueError):
    """``record_quality(call_id=...)`` names no journaled answer (a ``ValueError`` too)."""


class UnknownLLMError(BrokerError, KeyError):
    """``direct(alias)`` / ``direct(name=...)`` names no model this broker knows (a
    ``KeyError`` too, as an unknown registry name always was)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


__all__ = ["UnknownCallError", "UnknownLLMError",
    "NO_LLM_REASONS", "AuthError", "BrokerClosedError", "BrokerError", "CatalogError",
    "InvalidProviderResponseError", "LLMRequestError", "LLMTimeoutError", "NoLLMAvailableError",
    "ProviderError", "RateLimitError", "StreamInterruptedError", "StreamReplacementError",
    "ToolLoopLimitError",
]
