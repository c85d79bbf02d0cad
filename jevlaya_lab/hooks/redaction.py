"""Personal-data redaction: e-mails and phone numbers in states (``RedactionHook``,
``redact_personal_data``). API keys are another matter, scrubbed by :mod:`jevlaya_lab.secrets`.

``RedactionHook`` replaces e-mail addresses and phone numbers in states before the model sees them.

It rewrites ``ctx.states`` in ``on_predict_start`` with redacted *copies*, so the caller's
objects are never changed, and every later hook (cache, audit) and the model see the redacted
text. Strings, bytes (decoded as UTF-8, re-encoded after), and the string values of nested
dicts, lists and tuples are redacted; dict keys and non-string scalars are left alone.

What counts as a phone number: 7 to 15 digits written
the way people write phone numbers, i.e. either starting with ``+`` (``+44 20 7946 0958``,
``+15551234567``) or in at least two digit groups joined by spaces, dots, dashes or a bracketed
area code (``(555) 123-4567``, ``555.123.4567``, ``06 12 34 56 78``). A plain run of digits
without ``+`` (an order or invoice number) and calendar dates (``2024-01-15``, ``15.01.2024``)
and IPv4 addresses are not redacted.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable

__all__ = ["EMAIL", "PHONE", "RedactionHook", "redact", "redact_personal_data"]

EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}(?![\w-])")
PHONE = re.compile(
    r"(?<![\w+])(?:\+\d[\d\s().-]{5,}\d|(?:\(\d{1,5}\)\s?|\d{1,5}[\s.-])(?:\d{1,5}[\s.-]){0,4}\d{2,})(?![\w])"
)
# dates and IPv4 addresses look like digit groups but are not phone numbers
_NOT_PHONE = re.compile(
    r"^(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}|\d{1,3}(?:\.\d{1,3}){3})$"
)


def _phone_like(match: str) -> bool:
    digits = sum(ch.isdigit() for ch in match)
    return 7 <= digits <= 15 and not _NOT_PHONE.match(match.strip())


class _Redactor:
    def __init__(self, emails: bool, phones: bool, replacement: str | Callable[[str, str], str]):
        self.emails, self.phones, self.replacement = emails, phones, replacement
        self.counts = {"email": 0, "phone": 0}

    def _replace(self, kind: str, text: str) -> str:
        self.counts[kind] += 1
        if callable(self.replacement):
            return self.replacement(kind, text)
        return self.replacement.format(kind=kind.upper())

    def text(self, value: str) -> str:
        if self.emails:
            value = EMAIL.sub(lambda m: self._replace("email", m.group()), value)
        if self.phones:
            value = PHONE.sub(
                lambda m: self._replace("phone", m.group()) if _phone_like(m.group()) else m.group(), value
            )
        return value

    def state(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (bytes, bytearray)):
            return type(value)(self.text(bytes(value).decode("utf-8", errors="replace")).encode("utf-8"))
        if isinstance(value, dict):
            return {key: self.state(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.state(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.state(item) for item in value)
        return value


def redact_personal_data(
    state: Any,
    *,
    emails: bool = True,
    phones: bool = True,
    replacement: str | Callable[[str, str], str] = "[{kind}]",
) -> Any:
    """A redacted copy of ``state``; ``replacement`` is a format string with ``{kind}``
    (``EMAIL`` / ``PHONE``) or a function ``(kind, matched_text) -> str``."""
    return _Redactor(emails, phones, replacement).state(state)


redact = redact_personal_data
"""The shorter name of :func:`redact_personal_data`, kept for existing callers."""


class RedactionHook:
    """Redacts e-mails and phone numbers in every state at ``on_predict_start``.

    ``counts`` holds running totals ``{"email": n, "phone": n}`` over all calls (thread-safe).
    Install it before hooks that should see redacted states (a cache, an audit log).
    """

    def __init__(
        self,
        *,
        emails: bool = True,
        phones: bool = True,
        replacement: str | Callable[[str, str], str] = "[{kind}]",
    ):
        if not emails and not phones:
            raise ValueError("RedactionHook: emails=False and phones=False redact nothing; enable one")
        if isinstance(replacement, str):
            try:
                replacement.format(kind="EMAIL")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"RedactionHook(replacement={replacement!r}): not a valid format string "
                    f"({exc}); use '{{kind}}' as the only field, e.g. '[{{kind}}]'"
                ) from None
        elif not callable(replacement):
            raise TypeError(f"RedactionHook(replacement=...): expected a str or a function, got {replacement!r}")
        self.emails, self.phones, self.replacement = emails, phones, replacement
        self._lock = threading.Lock()
        self.counts = {"email": 0, "phone": 0}

    def on_predict_start(self, ctx: Any) -> None:
        redactor = _Redactor(self.emails, self.phones, self.replacement)
        ctx.states = [redactor.state(state) for state in ctx.states]
        with self._lock:
            for kind, n in redactor.counts.items():
                self.counts[kind] += n

    def __repr__(self) -> str:
        return f"RedactionHook(emails={self.emails}, phones={self.phones}, counts={self.counts})"
