"""Exceptions of ``jevlaya_lab.local``.

``LocalModelError`` means a model could not be found or loaded; ``ChatRequestError`` means a
generation request (messages or sampling parameters) is invalid and names the field at fault;
``FaultProfileError`` rejects an impossible fault profile; ``UnknownModelError`` is raised when a
server is asked about a model name it does not serve. Each keeps its built-in base and derives
from :class:`jevlaya_lab.errors.JevlayaError`.
"""

from __future__ import annotations

from typing import Any

from jevlaya_lab.errors import JevlayaError
from jevlaya_lab.secrets import clip_scrubbed as clip_redacted


class LocalModelError(JevlayaError, RuntimeError):
    """A local chat model cannot be located or loaded (missing wheel, bad path, offline hub id)."""


class ChatRequestError(JevlayaError, ValueError):
    """A chat request is invalid; ``field`` names the request field, ``value`` what was given."""

    def __init__(self, field: str, value: Any, fix: str) -> None:
        self.field = field
        self.value = value
        shown = repr(value)  # key-shaped text is redacted before the clip (errors are echoed)
        shown = clip_redacted(shown, 117) + "..." if len(shown) > 120 else clip_redacted(shown, 120)
        super().__init__(f"{field}={shown} is invalid: {fix}")


class FaultProfileError(JevlayaError, ValueError):
    """A fault profile field has an impossible value; the message names the field and the fix."""


class UnknownModelError(JevlayaError, LookupError):
    """A server was asked about a model name it does not serve."""

    def __init__(self, name: str, served: list[str]) -> None:
        self.name = name
        self.served = served
        super().__init__(
            f"model={name!r} is not served here; use one of: {', '.join(served) or '(none)'}"
        )

    def __str__(self) -> str:  # LookupError would show the repr of the args tuple
        return str(self.args[0])
