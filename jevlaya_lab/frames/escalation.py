"""``escalate(df, questions, prompt, ...)``: typed decisions first, an LLM only where they abstained.

One call runs :func:`~jevlaya_lab.frames.deciding.decide` over every row, then
:func:`~jevlaya_lab.frames.asking.ask` over the rows where a question in ``on`` (default: every
question) abstained under ``min_confidence``. The result has the input's index, every decide
column, every ask column (missing on the rows that were not asked) and ``stage``, a categorical
saying who answered the row:

- ``"decide"``: every question in ``on`` passed ``min_confidence``; no LLM was called;
- ``"ask"``: a question abstained and the LLM answered (``answer``, ``model``);
- ``"unanswered"``: a question abstained and the LLM call failed too (``error`` says why).

The prompt sees the input's columns and, where a name is free, the decide columns, so it may
quote the encoder's guess: ``"Is this about {intent}? {body}"``. ``str.format`` reads a dot as an
attribute, so reach ``intent.p`` through a function of the row (``lambda row: ...row["intent.p"]``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from jevlaya_lab.frames.asking import DEFAULT_OPERATION, ask, ask_columns_frame
from jevlaya_lab.frames.deciding import DEFAULT_BATCH_SIZE, decide
from jevlaya_lab.frames.errors import FrameError

__all__ = ["STAGES", "escalate"]

STAGES = ("decide", "ask", "unanswered")


def escalate(df: pd.DataFrame, questions: Mapping[str, Any], prompt: str | Callable[[pd.Series], str], *,
             broker: Any, min_confidence: Any, agent: Any = None, router: Any = None, checkpoint: Any = None,
             state: Any = None, on: Sequence[str] | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
             concurrency: int = 8, wait: float | None = None, progress: bool = True,
             operation: str = DEFAULT_OPERATION, resume: bool | None = None,
             hooks: Sequence[Any] | None = None, **params: Any) -> pd.DataFrame:
    """Decide every row, ask ``prompt`` about the abstained ones; see the module docstring.

    ``min_confidence`` is required (without it nothing abstains); ``on`` limits which questions'
    abstention sends a row to the LLM. The decide keywords (``agent`` / ``router`` / ``checkpoint``,
    ``state``, ``batch_size``, ``hooks``) and the ask keywords (``broker``, ``concurrency``, ``wait``,
    ``operation``, ``resume``, provider ``params``) mean what they mean there.
    """
    if min_confidence is None:
        raise TypeError("escalate(min_confidence=None): without a threshold no row abstains and nothing is "
                        "escalated; pass e.g. min_confidence=0.6")
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"escalate(df): expected a pandas DataFrame, got {type(df).__name__}")
    decided = decide(df, questions, agent=agent, router=router, checkpoint=checkpoint, state=state,
                     batch_size=batch_size, min_confidence=min_confidence, progress=progress, hooks=hooks)
    names = [str(q) for q in questions]
    gated = names if on is None else [str(q) for q in on]
    unknown = [q for q in gated if q not in names]
    if unknown:
        raise FrameError(f"escalate(on={list(on or ())!r}): {unknown[0]!r} is not one of the questions {names}")
    abstained = decided[gated].isna().any(axis=1).to_numpy()
    asked = ask_columns_frame(df.index)
    if abstained.any():
        rows = df.loc[abstained].copy()
        for column in decided.columns:  # the prompt may quote the decisions
            if column not in rows.columns:
                rows[column] = decided.loc[abstained, column]
        answered = ask(rows, prompt, broker=broker, concurrency=concurrency, wait=wait, progress=progress,
                       operation=operation, resume=resume, **params)
        asked.loc[abstained] = answered
    stage = ["decide" if not flag else ("ask" if pd.notna(answer) else "unanswered")
             for flag, answer in zip(abstained, asked["answer"])]
    out = decided.join(asked.astype({"resumed": "boolean"}))
    out["stage"] = pd.Categorical(stage, categories=list(STAGES))
    return out
