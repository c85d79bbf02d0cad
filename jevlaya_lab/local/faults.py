"""Fault profiles: make a served model slow, rate-limited, broken or cut off, reproducibly.

A ``FaultProfile`` is all-or-nothing per call: on a call it selects (every ``every``-th call,
then with ``probability`` from an RNG seeded with ``seed``), every field of the profile applies;
on other calls the model answers normally. Calls are counted from when the profile was
installed (``serve(faults=...)`` or ``server.set_fault``), so ``every=2`` always hits the 2nd,
4th, ... call after installing it. These profiles exist for demos and tests on one machine and
are never applied to real providers.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, fields, replace
from typing import Any

from jevlaya_lab.local.errors import FaultProfileError


@dataclass(frozen=True)
class FaultProfile:
    """What goes wrong on a selected call (delays in seconds).

    - ``latency``: wait before answering at all (before the status line).
    - ``first_token_delay`` / ``token_delay``: wait before the first / each later content piece.
    - ``status``: answer this HTTP error (400-599) as OpenAI-style JSON; ``retry_after`` adds a
      ``Retry-After`` header (seconds).
    - ``garbage``: a 200 whose body is not a completion (non-JSON, or non-JSON SSE events).
    - ``empty``: a 200 completion whose content is empty.
    - ``cut_after=N``: close the connection after N content deltas (non-streaming: after N
      tokens, without any response); an answer with fewer pieces completes normally.
    - ``echo_key=N``: the ``status`` error message or the ``garbage`` body repeats the API key the
      request sent, starting at character N (as a careless provider might), so tests can check
      that no part of a key escapes redaction however the text is clipped.
    - ``every``, ``probability``, ``seed``: which calls the profile applies to.
    """

    latency: float = 0.0
    first_token_delay: float = 0.0
    token_delay: float = 0.0
    status: int | None = None
    retry_after: float | None = None
    garbage: bool = False
    empty: bool = False
    cut_after: int | None = None
    echo_key: int | None = None
    every: int = 1
    probability: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("latency", "first_token_delay", "token_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise FaultProfileError(f"{name}={value!r} is invalid: use a number of seconds >= 0")
        if self.status is not None and (not _is_int(self.status) or not 400 <= self.status <= 599):
            raise FaultProfileError(f"status={self.status!r} is invalid: use an HTTP error status "
                                    "from 400 to 599 (e.g. 429, 500, 503) or None")
        if self.retry_after is not None:
            if isinstance(self.retry_after, bool) or not isinstance(self.retry_after, (int, float)) \
                    or not 0 <= self.retry_after < math.inf:
                raise FaultProfileError(f"retry_after={self.retry_after!r} is invalid: use seconds >= 0")
            if self.status is None:
                raise FaultProfileError(f"retry_after={self.retry_after!r} needs a status: "
                                        "set status=429 or 503 as well")
        for name in ("garbage", "empty"):
            if not isinstance(getattr(self, name), bool):
                raise FaultProfileError(f"{name}={getattr(self, name)!r} is invalid: use True or False")
        if self.cut_after is not None and (not _is_int(self.cut_after) or self.cut_after < 0):
            raise FaultProfileError(f"cut_after={self.cut_after!r} is invalid: use a number of "
                                    "content deltas >= 0 or None")
        if self.echo_key is not None and (not _is_int(self.echo_key) or self.echo_key < 0):
            raise FaultProfileError(f"echo_key={self.echo_key!r} is invalid: use a character offset >= 0 or None")
        if self.echo_key is not None and self.status is None and not self.garbage:
            raise FaultProfileError(f"echo_key={self.echo_key!r} needs a text to echo in: set status=... "
                                    "or garbage=True as well")
        if not _is_int(self.every) or self.every < 1:
            raise FaultProfileError(f"every={self.every!r} is invalid: use a whole number >= 1")
        if isinstance(self.probability, bool) or not isinstance(self.probability, (int, float)) \
                or not 0.0 <= self.probability <= 1.0:
            raise FaultProfileError(f"probability={self.probability!r} is invalid: use a number in [0, 1]")
        if not _is_int(self.seed):
            raise FaultProfileError(f"seed={self.seed!r} is invalid: use a whole number")
        if sum([self.status is not None, self.garbage, self.empty]) > 1:
            raise FaultProfileError("status, garbage and empty exclude each other: set only one of them")

    def __str__(self) -> str:
        """The non-default fields as ``key=value`` text that ``parse`` reads back."""
        default = FaultProfile()
        changed = [f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                   else f"{f.name}={getattr(self, f.name)}"
                   for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)]
        return ",".join(changed) or "none"

    @classmethod
    def parse(cls, spec: str) -> FaultProfile:
        """Build a profile from text such as ``"rate-limited"`` or ``"status=503,every=3"``.

        A leading preset name (see ``FAULT_PRESETS``) may be followed by ``key=value`` overrides;
        used by ``jevlaya-lab serve --fault NAME=SPEC``.
        """
        parts = [p.strip() for p in spec.split(",") if p.strip() and p.strip() != "none"]
        base = cls()
        if parts and "=" not in parts[0]:
            preset = parts.pop(0)
            if preset not in FAULT_PRESETS:
                raise FaultProfileError(f"fault preset {preset!r} is unknown: use one of "
                                        f"{', '.join(FAULT_PRESETS)} or key=value pairs")
            base = FAULT_PRESETS[preset]
        types = {f.name: f.type for f in fields(cls)}
        changes: dict[str, Any] = {}
        for part in parts:
            key, _, raw = part.partition("=")
            key = key.strip().replace("-", "_")
            if key not in types or not raw.strip():
                raise FaultProfileError(f"fault setting {part!r} is invalid: use key=value with a key "
                                        f"from {', '.join(types)}")
            changes[key] = _parse_value(key, raw.strip())
        return replace(base, **changes)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_value(key: str, raw: str) -> object:
    if raw.lower() == "none":
        return None
    if key in ("garbage", "empty"):
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise FaultProfileError(f"{key}={raw!r} is invalid: use true or false")
        return raw.lower() in ("true", "1", "yes")
    try:
        return int(raw) if key in ("status", "cut_after", "echo_key", "every", "seed") else float(raw)
    except ValueError:
        raise FaultProfileError(f"{key}={raw!r} is invalid: use a number") from None


# Named profiles for demos, tests and ``jevlaya-lab serve --fault NAME=PRESET``.
FAULT_PRESETS: dict[str, FaultProfile] = {
    "slow": FaultProfile(latency=1.0, token_delay=0.05),
    "slow-first-token": FaultProfile(first_token_delay=2.0),
    "slow-tokens": FaultProfile(token_delay=0.2),
    "rate-limited": FaultProfile(status=429, retry_after=2.0),
    "unavailable": FaultProfile(status=503, retry_after=5.0),
    "server-error": FaultProfile(status=500),
    "garbage": FaultProfile(garbage=True),
    "empty": FaultProfile(empty=True),
    "cut": FaultProfile(cut_after=3),
    "flaky": FaultProfile(status=503, probability=0.3),
}


class FaultSwitch:
    """Decides, call by call and thread-safely, whether an installed profile applies."""

    def __init__(self, profile: FaultProfile) -> None:
        self.profile = profile
        self._calls = 0
        self._rng = random.Random(profile.seed)
        self._lock = threading.Lock()

    def next_call(self) -> FaultProfile | None:
        """Count one call; return the profile if it applies to this call, else ``None``."""
        with self._lock:
            self._calls += 1
            if self._calls % self.profile.every:
                return None
            if self.profile.probability < 1.0 and self._rng.random() >= self.profile.probability:
                return None
            return self.profile
