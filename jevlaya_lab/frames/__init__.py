"""Typed decisions and LLM calls over a whole table: pandas on one machine, Dask for many.

``decide(df, questions, ...)`` answers the questions about every row, ``ask(df, prompt, ...)``
sends one prompt per row through a Broker with bounded concurrency and resume from the journal,
and ``escalate(...)`` runs ``decide`` and asks an LLM only about the rows it abstained on. Each
returns a DataFrame with the input's index. On a ``dask.dataframe.DataFrame`` ``decide`` returns
a lazy Dask DataFrame whose partitions are answered on the workers, each worker process loading
its checkpoint once.

This is a view-level module: it composes the decision engine and the broker, which never import
each other, and nothing below it imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jevlaya_lab._lazy import lazy_attributes

_EXPORTS = {
    "decide": "jevlaya_lab.frames.deciding",
    "worker_models": "jevlaya_lab.frames.deciding",
    "ask": "jevlaya_lab.frames.asking",
    "escalate": "jevlaya_lab.frames.escalation",
    "FrameError": "jevlaya_lab.frames.errors",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from jevlaya_lab.frames.asking import ask
    from jevlaya_lab.frames.deciding import decide, worker_models
    from jevlaya_lab.frames.errors import FrameError
    from jevlaya_lab.frames.escalation import escalate
