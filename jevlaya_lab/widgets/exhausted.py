"""Why a stream's ``another()`` had no further answer, in words for the StreamView."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def why_no_more(answered: Sequence[str], snapshot: Mapping[str, Mapping[str, Any]]) -> str:
    """Which models answered, and what keeps each other pool member from answering: cooling down
    (until when), no key, disabled, unable to start, or already tried for this call (its attempt
    limit spent). ``snapshot`` is ``broker.snapshot()``."""
    others = {name: row for name, row in snapshot.items() if row.get("in_pool") and name not in answered}
    if not others:
        return f"every model in the pool has answered ({', '.join(answered)})"
    kept = []
    for name, row in others.items():
        phase = row.get("phase")
        if phase == "cooling":
            until = str(row.get("cooldown_until") or "")[11:19]
            kept.append(f"{name} is cooling down" + (f" until {until} UTC" if until else ""))
        elif phase == "available":
            kept.append(f"{name} was tried for this call already (or its attempt limit is spent)")
        else:
            kept.append(f"{name}: {phase}")
    return f"{', '.join(answered)} answered; " + "; ".join(kept)
