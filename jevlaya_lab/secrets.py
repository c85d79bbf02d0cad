"""Secret scrubbing: API keys out of every text that leaves the package.

Errors, journal rows, logs and widget state go through :func:`scrub_secrets` /
:func:`clip_scrubbed`: a known key is replaced wherever it appears, and so is any run of
``MIN_SECRET_RUN`` or more of its consecutive characters (a provider that echoes a truncated key,
or text cut through a key, leaves no usable part of it); anything shaped like a key
(``sk-...``, ``Bearer ...``) goes too. Text is always scrubbed *before* it is clipped, since a
clip can cut a key so that nothing recognises it any more. (Personal data in states, e-mails and
phone numbers, is redacted by :mod:`jevlaya_lab.hooks.redaction` instead.)
"""

from __future__ import annotations

import functools
import re

__all__ = ["KEY_SHAPED", "MIN_SECRET_RUN", "SECRET_MARK", "clip_scrubbed", "scrub_secrets"]

SECRET_MARK = "***"
# A run this long of a key's consecutive characters counts as (part of) the key.
MIN_SECRET_RUN = 6
KEY_SHAPED = re.compile(r"\b(sk|pk|rk|gsk|xai|Bearer)([-_ ])[A-Za-z0-9*._-]{6,}")


def scrub_secrets(text: str, *secrets: str | None) -> str:
    """``text`` with each secret, every run of ``MIN_SECRET_RUN``+ of its consecutive
    characters, and every key-shaped token replaced by ``***``.

    Secrets shorter than 4 characters are ignored (they would match ordinary text).
    """
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, SECRET_MARK)
            if len(secret) > MIN_SECRET_RUN:
                text = _redact_runs(text, secret)
    return KEY_SHAPED.sub(lambda m: m.group(1) + m.group(2) + SECRET_MARK, text)


def _redact_runs(text: str, secret: str) -> str:
    """Replace every maximal run of text made of ``MIN_SECRET_RUN``-character pieces of ``secret``."""
    n = MIN_SECRET_RUN
    pieces, finder = _run_finder(secret)
    out, at = [], 0
    match = finder.search(text)
    while match:
        end = match.end()
        while end < len(text) and text[end - n + 1:end + 1] in pieces:  # extend the run
            end += 1
        out += [text[at:match.start()], SECRET_MARK]
        at = end
        match = finder.search(text, end)
    return "".join(out) + text[at:] if out else text


@functools.lru_cache(maxsize=64)
def _run_finder(secret: str) -> tuple[frozenset[str], re.Pattern[str]]:
    pieces = frozenset(secret[i:i + MIN_SECRET_RUN] for i in range(len(secret) - MIN_SECRET_RUN + 1))
    return pieces, re.compile("|".join(re.escape(p) for p in sorted(pieces)))


def clip_scrubbed(text: str, limit: int, *secrets: str | None) -> str:
    """At most ``limit`` characters of ``text``, scrubbed (:func:`scrub_secrets`) *before* clipping.

    Only a window a little longer than ``limit`` is scrubbed, so a huge text costs little; a
    secret that starts inside the clip lies whole inside the window.
    """
    window = limit + max((len(s) for s in secrets if s), default=0) + 64
    return scrub_secrets(text[:window], *secrets)[:limit]
