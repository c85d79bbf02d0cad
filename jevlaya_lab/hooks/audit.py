"""``AuditHook``: one JSON line per state of every predict call, written at ``on_predict_end``.

Because it writes at the end, a line exists for successful, skipped (cache hit) and failed
calls alike; failed calls carry ``error`` and no answers. A call with no states (``predict_batch
([])``) writes one line with ``index: null`` and ``n_states: 0`` so the audit trail shows that
call too. By default the state itself is *not* written, only its SHA-256 (of the same one-line
JSON the model reads), so an audit log does not become a second copy of user data; pass
``include_state=True`` to keep it (install a ``RedactionHook`` first to keep it redacted).

Line fields: ``ts`` (UTC ISO-8601), ``run_id``, ``model``, ``index``, ``n_states``,
``state_sha256``, ``state`` (only with ``include_state``), ``questions`` (ids), ``answers``
(``{qid: choice | score | noul}``), ``routing`` (``{"model", "source"}`` or ``None``),
``elapsed_ms``, ``usage`` (this state's), ``error``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import IO, Any, Callable, Union

__all__ = ["AuditHook", "audit_lines"]

Sink = Union[str, os.PathLike[str], IO[str], Callable[[str], Any]]
_ANSWER_KEYS = ("choice", "score", "noul")


def _state_text(state: Any) -> str:
    if isinstance(state, str):
        return state
    if isinstance(state, (bytes, bytearray)):
        return bytes(state).decode("utf-8", errors="replace")
    return json.dumps(state, ensure_ascii=False, separators=(", ", ": "), default=str)


def _answer(answer: Any) -> Any:
    if isinstance(answer, dict):
        for key in _ANSWER_KEYS:
            if key in answer:
                return answer[key]
    return None


def audit_lines(ctx: Any, *, include_state: bool = False) -> list[dict[str, Any]]:
    """The audit records for one finished call: one per state (one for an empty call)."""
    states = list(ctx.states) if isinstance(ctx.states, (list, tuple)) else [ctx.states]
    results = ctx.results if isinstance(ctx.results, list) else []
    questions = list(ctx.questions) if isinstance(ctx.questions, dict) else []
    base = {
        "ts": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
        "run_id": ctx.run_id,
        "model": ctx.model,
        "n_states": len(states),
        "questions": questions,
        "elapsed_ms": None if ctx.elapsed_ms is None else round(ctx.elapsed_ms, 3),
        "error": None if ctx.error is None else f"{type(ctx.error).__name__}: {ctx.error}",
    }
    if not states:
        return [{**base, "index": None}]
    records = []
    for i, state in enumerate(states):
        result = results[i] if i < len(results) and isinstance(results[i], dict) else None
        record = {**base, "index": i,
                  "state_sha256": hashlib.sha256(_state_text(state).encode("utf-8")).hexdigest()}
        if include_state:
            record["state"] = state
        answers = (result or {}).get("answers") or {}
        routing = (result or {}).get("routing")
        record.update(
            answers={qid: _answer(a) for qid, a in answers.items()} if result is not None else None,
            routing={"model": routing.get("model"), "source": routing.get("source")}
            if isinstance(routing, dict) else None,
            usage=(result or {}).get("usage"),
        )
        records.append(record)
    return records


class AuditHook:
    """Appends one JSON line per state to ``sink`` at ``on_predict_end`` (thread-safe).

    ``sink`` is a file path (opened in append mode, one flush per call), a text stream with
    ``write``, or a function that receives each line (without the newline).
    """

    def __init__(self, sink: Sink, *, include_state: bool = False):
        self.include_state = bool(include_state)
        self._lock = threading.Lock()
        self._owned: IO[str] | None = None
        if isinstance(sink, (str, os.PathLike)):
            path = Path(sink)
            if path.is_dir():
                raise ValueError(f"AuditHook(sink={str(sink)!r}): is a directory; pass a file path like 'audit.jsonl'")
            path.parent.mkdir(parents=True, exist_ok=True)
            self._owned = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._write: Callable[[str], Any] = self._owned.write
            self.path: Path | None = path
        elif hasattr(sink, "write") and callable(sink.write):
            self._write, self.path = sink.write, None
        elif callable(sink):
            self._write, self.path = (lambda line: sink(line.rstrip("\n"))), None
        else:
            raise TypeError(
                f"AuditHook(sink=...): expected a file path, a text stream or a function, got "
                f"{type(sink).__name__}"
            )
        self.lines_written = 0

    def on_predict_end(self, ctx: Any) -> None:
        records = audit_lines(ctx, include_state=self.include_state)
        text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records)
        with self._lock:
            if self._owned is not None and self._owned.closed:
                raise ValueError(f"AuditHook: {self.path} was closed; create a new AuditHook")
            for line in text.splitlines(keepends=True):
                self._write(line)
            if self._owned is not None:
                self._owned.flush()
            self.lines_written += len(records)

    def close(self) -> None:
        """Close the file this hook opened (a stream or function you passed stays yours)."""
        with self._lock:
            if self._owned is not None and not self._owned.closed:
                self._owned.close()

    def __enter__(self) -> AuditHook:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self.path) if self.path else "stream"
        return f"AuditHook({where}, lines_written={self.lines_written})"

