"""``PredictContext``: the one object that travels through start, error and end of a call.

The field order is part of the public contract (positional construction relies on it); equality and
hashing are by identity, so a hook may keep contexts in a set or as dict keys even though
their fields change during the call. ``parent_id`` comes last, after the fields Laya's
context has, so positional construction and Laya hooks see what they always saw.

Nesting: a Router call (``predict``, ``predict_batch``, ``route``, ``load``, ...) runs inside
:func:`call_scope`, and every context created meanwhile in that thread or task (its
``on_route``, ``on_load`` / ``on_evict`` and predict contexts, and those of the Agent calls it
makes) gets the call's id as ``parent_id``; a trace view nests them under that call.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast


class _Call:
    """One running :func:`call_scope`. Its id is made the first time a context asks for it:
    most calls (a ``route()`` nobody listens to) never create a context, so never pay for a uuid."""

    _id: str | None = None  # a class default: a new scope costs no __init__

    @property
    def id(self) -> str:
        if self._id is None:
            with _ID_LOCK:  # hooks may run in threads: all must see one id
                if self._id is None:
                    self._id = new_run_id()
        return self._id


_ID_LOCK = threading.Lock()
_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("jevlaya_call", default=None)

F = TypeVar("F", bound=Callable[..., Any])


def new_run_id() -> str:
    return uuid.uuid4().hex


def call_scope(func: F) -> F:
    """Run ``func`` as one call: contexts created inside get its id as ``parent_id``. Inside an
    enclosing scope (a hook calling back into the Router) the enclosing call's id is kept, so
    everything one outer call caused nests under it. A plain wrapper (no generator-based context
    manager) and a lazily made id keep the cost of a call that creates no context at a
    context-variable set and reset."""

    @functools.wraps(func)
    def scoped(*args: Any, **kwargs: Any) -> Any:
        if _CALL.get() is not None:
            return func(*args, **kwargs)
        token = _CALL.set(_Call())
        try:
            return func(*args, **kwargs)
        finally:
            _CALL.reset(token)

    return cast(F, scoped)


def current_call() -> str | None:
    """The id of the :func:`call_scope` running in this thread or task, if any."""
    call = _CALL.get()
    return None if call is None else call.id


def aggregate_usage(results: list[dict[str, Any]] | None) -> dict[str, int]:
    """Sum ``input_tokens`` / ``output_tokens`` over the ``usage`` of each result."""
    total = {"input_tokens": 0, "output_tokens": 0}
    for result in results or ():
        usage = result.get("usage") if isinstance(result, dict) else None
        if isinstance(usage, dict):
            for key in total:
                total[key] += int(usage.get(key) or 0)
    return total


@dataclass(eq=False)
class PredictContext:
    """State of one predict call as hooks see it.

    A start hook may rewrite ``states`` / ``questions``, set ``max_len`` / ``head_max_len``
    or call :meth:`skip`; an end hook reads ``results``, ``usage``, ``elapsed_ms`` and
    ``error``. ``started_at`` is a ``time.perf_counter()`` reading. ``parent_id`` is the id of
    the Router call this context is part of (``None`` outside one; see the module docstring);
    a Router request keeps one ``run_id`` from ``on_route`` to ``on_predict_end``.
    """

    states: Sequence[Any]  # as the caller passed them (a list); the Agent validates them
    questions: Any
    run_id: str = field(default_factory=new_run_id)
    results: list[dict[str, Any]] | None = None
    decision: dict[str, Any] | None = None
    model: str | None = None
    agent: Any = None
    router: Any = None
    max_len: int | None = None
    head_max_len: int | None = None
    usage: dict[str, int] | None = None
    started_at: float = field(default_factory=time.perf_counter)
    elapsed_ms: float | None = None
    error: BaseException | None = None
    parent_id: str | None = field(default_factory=current_call)

    def skip(self, results: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Supply the results yourself; tokenisation and the forward pass are skipped.

        Pass one result per state (a list as long as ``ctx.states``), or a single result
        dict when the call has exactly one state. Anything else is a ``ValueError``, because
        a result that belongs to no state, or a state without a result, would be lost.
        """
        n_states = len(self.states) if isinstance(self.states, (list, tuple)) else 1
        if isinstance(results, dict):
            results = [results]
        if not isinstance(results, (list, tuple)):
            raise ValueError(
                f"skip(results): expected a list of result dicts, got {type(results).__name__}; "
                f"pass one result per state (a list of {n_states})"
            )
        if len(results) != n_states:
            raise ValueError(
                f"skip(results): got {len(results)} result(s) for {n_states} state(s); "
                f"pass exactly one result per state (a list of {n_states})"
            )
        self.results = list(results)

    def __repr__(self) -> str:
        n = len(self.states) if isinstance(self.states, (list, tuple)) else "?"
        err = f", error={type(self.error).__name__}" if self.error is not None else ""
        return f"<PredictContext run_id={self.run_id[:8]} model={self.model!r} states={n}{err}>"
