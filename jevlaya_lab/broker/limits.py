"""Hard ceilings on the attempts of one call, so that no failure pattern can loop.

Every call (``ask``, ``chat``, a ``stream`` together with its ``another()`` answers) sends at
most ``max_attempts`` requests in all (default :data:`DEFAULT_MAX_ATTEMPTS`) and at most
``max_attempts_per_model`` to any one model (default :data:`DEFAULT_MAX_ATTEMPTS_PER_MODEL`; a
stream asks each model at most once before its first delta anyway). Both are keywords of every
call. One attempt is one journal row, so a call never writes more than ``max_attempts`` rows,
whatever its providers answer (a model answering 503 with ``Retry-After: 0`` forever, say).

A model that reached its ceiling is ruled out for the rest of the call, exactly like a model
that rejected the request; when the call's ceiling is reached no new attempt starts. The call
then ends as when every candidate is ruled out: with the last provider rejection if
there was one, else ``NoLLMAvailableError`` (``reason="timeout"`` with ``retry_at`` when the
models are only cooling, ``"excluded"`` otherwise), whose message names the ceiling.
"""

from __future__ import annotations

from jevlaya_lab.broker.validation import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_ATTEMPTS_PER_MODEL,
    Call,
)

__all__ = ["DEFAULT_MAX_ATTEMPTS", "DEFAULT_MAX_ATTEMPTS_PER_MODEL", "AttemptLimit"]


class AttemptLimit:
    """The attempts one call has made, against its two ceilings (checked by validation)."""

    def __init__(self, call: Call) -> None:
        self.max_attempts = call.max_attempts
        self.max_per_model = call.max_attempts_per_model
        self.made = 0
        self._per_model: dict[str, int] = {}  # a plain dict: one is made per call

    def count(self, llm_name: str) -> None:
        self.made += 1
        self._per_model[llm_name] = self._per_model.get(llm_name, 0) + 1

    @property
    def spent(self) -> bool:
        """No further attempt may start in this call."""
        return self.made >= self.max_attempts

    def used_up(self) -> set[str]:
        """Models this call may not ask again."""
        return {n for n, k in self._per_model.items() if k >= self.max_per_model}

    def note(self) -> str:
        """What a ceiling did to this call, for error messages ('' when nothing)."""
        if self.spent:
            return f"; max_attempts={self.max_attempts} reached ({self.made} attempts)"
        used = sorted(self.used_up())
        if used:
            return (f"; max_attempts_per_model={self.max_per_model} reached for "
                    f"{', '.join(used)}")
        return ""
