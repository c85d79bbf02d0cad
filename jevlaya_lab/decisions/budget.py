"""The one check of a size budget (``max_len``, ``head_max_len``, ``batch_size``).

Used where a request is first seen (the Router's request checks, before anything loads) and
where rows are built (encoding), so both reject the same values with the same message.
"""

from __future__ import annotations

from typing import Any

from jevlaya_lab.decisions.errors import BudgetError

__all__ = ["check_budget", "check_positions"]


def check_budget(name: str, value: Any, *, optional: bool = False) -> Any:
    """Return ``value`` if it is a positive int (or ``None`` when ``optional``), else raise a
    :class:`BudgetError` (a ``ValueError``) naming ``name``, the value and a fix."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive int or None" if optional else "a positive int"
        raise BudgetError(f"{name} must be {allowed}, got {value!r}; e.g. {name}=256")
    return value


def check_positions(max_len: int, positions: Any, model: str) -> int:
    """``max_len`` if the encoder can read that many tokens (``positions``: its
    ``max_position_embeddings``, unknown when not an int), else a :class:`BudgetError` naming
    the limit; past it the encoder fails deep inside with an opaque index error."""
    if isinstance(positions, int) and not isinstance(positions, bool) and max_len > positions:
        raise BudgetError(f"max_len={max_len} is more than the encoder of {model!r} reads "
                          f"({positions} positions); use max_len <= {positions}")
    return max_len
