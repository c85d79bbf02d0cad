"""``Agent.predict_long``: a state longer than one row, read in overlapping token windows.

A row keeps only the part of a state that fits beside its question (the start of a string or
dict, the end of a conversation); the rest is never read. ``predict_long`` tokenises the state
once, cuts it into overlapping windows, answers every window in one ``predict_batch`` (so the
hooks run once, with ``ctx.states`` = the window texts) and keeps, per question, the answer of
one window, as Laya 0.4.15 does:

- ``noul``: the window with the highest P(true) (the statement holds if some part supports it);
- ``choice`` / ``score``: the window whose answer is the most confident (highest
  ``answer_confidence``), so a local signal is not outvoted by many neutral windows.

The kept number is that window's, not a calibrated number for the whole document; each answer
says which window decided in ``answer["window"]`` (``index``, ``token_start``, ``token_end``
into the tokenised state, ``count``). ``usage`` sums the windows' usage (``truncated`` becomes
the number of cut windows), keeps the last window's ``truncated_questions`` and adds
``windows``. A state that fits one row is answered by ``predict`` unchanged (``windows`` = 1).

Defaults (Laya's): ``window`` = ``max(64, max_len - head_max_len - 8)`` tokens, never more than
the room the questions leave for the state (a wider explicit window is narrowed with a
``RuntimeWarning``); ``stride`` = half the window; a stride wider than the window is refused,
because the tokens between two windows would be read by none. A
start hook that rewrites ``ctx.states`` or skips gets its results aggregated without window
attribution (``windows`` counts the states scored, 0 when skipped).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.encoding import serialize_state
from jevlaya_lab.decisions.questions import Question, parse_questions
from jevlaya_lab.hooks.context import PredictContext
from jevlaya_lab.hooks.options import HookOptions

MIN_WINDOW = 64
_USAGE_SUMS = ("input_tokens", "output_tokens", "state_tokens", "state_tokens_dropped")


def windows(n_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
    """``(start, end)`` token spans: every ``stride`` tokens until one reaches the end."""
    spans, start = [], 0
    while True:
        end = min(start + window, n_tokens)
        spans.append((start, end))
        if end >= n_tokens:
            return spans
        start += stride


def predict_long(agent: Any, state: Any, questions: Mapping[Any, Any], *, window: int | None = None,
                 stride: int | None = None, aggregate: str = "auto", batch_size: int | None = None,
                 hook_options: HookOptions | None = None) -> dict[str, Any]:
    """See the module docstring; ``agent`` is the :class:`~jevlaya_lab.decisions.agent.Agent`
    (not imported here: the Agent imports this module), ``hook_options`` the call's hooks."""
    if aggregate != "auto":
        raise ValueError(f"aggregate={aggregate!r}: only 'auto' (per-type rules) is supported")
    parsed = parse_questions(questions) if questions else ()
    text = serialize_state(state)
    if not parsed:
        result: dict[str, Any] = agent.predict(state, questions, batch_size=batch_size, hook_options=hook_options)
        result["usage"]["windows"] = 1
        return result
    max_len, head_max_len = agent.config.max_len, agent.config.head_max_len
    heads = agent._question_heads(parsed, head_max_len)
    room = min(max_len - len(head.ids) - 1 for head in heads)
    if room < 1:
        raise ValueError(f"predict_long: the questions' options fill max_len={max_len}, leaving no "
                         "room for the state; use fewer or shorter options")
    if window is None:
        window = min(max(MIN_WINDOW, max_len - head_max_len - 8), room)
    else:
        check_budget("window", window)
        if window > room:
            warnings.warn(f"predict_long: window={window} is wider than the {room} tokens the "
                          f"questions leave for the state; using {room}", RuntimeWarning, stacklevel=3)
            window = room
    if stride is None:
        stride = max(1, window // 2)
    check_budget("stride", stride)
    if stride > window:
        raise ValueError(f"predict_long: stride={stride} is wider than the {window}-token window, so "
                         f"{stride - window} tokens between windows would be read by none; pass "
                         f"stride <= {window}")
    ids = agent._rows.encode([text])[0].ids
    if len(ids) <= window:
        result = agent.predict(state, questions, batch_size=batch_size, hook_options=hook_options)
        result["usage"]["windows"] = 1
        return result
    spans = windows(len(ids), window, stride)
    texts = [agent.tokenizer.decode(ids[a:b]) for a, b in spans]
    observer = _Observer()
    # the observer runs after every start hook of the call, so it sees what they left
    results = agent.predict_batch(texts, questions, batch_size=batch_size,
                                  hook_options=(hook_options or HookOptions()).followed_by(observer))
    if observer.skipped:
        return _combine(agent.model_id, parsed, results, None, scored=0)
    attributed = observer.states is texts and len(results) == len(spans)
    return _combine(agent.model_id, parsed, results, spans if attributed else None, scored=len(results))


class _Observer:
    """Runs after every start hook of the call: did the chain skip, or replace the windows?"""

    def __init__(self) -> None:
        self.skipped: bool = False
        self.states: Any = None

    def on_predict_start(self, ctx: PredictContext) -> None:
        self.skipped, self.states = ctx.results is not None, ctx.states


def _combine(model_id: str, parsed: tuple[Question, ...], results: list[dict[str, Any]],
             spans: list[tuple[int, int]] | None, *, scored: int) -> dict[str, Any]:
    answers: dict[Any, Any] = {}
    for q in parsed:
        candidates = [(i, r["answers"][q.id]) for i, r in enumerate(results)
                      if isinstance(r.get("answers"), dict) and q.id in r["answers"]]
        if not candidates:
            continue
        field = "noul" if q.type == "noul" else "answer_confidence"
        index, best = max(candidates, key=lambda item: float(item[1][field]))  # first of equals wins
        best = dict(best)
        if spans is not None:
            start, end = spans[index]
            best["window"] = {"index": index, "token_start": start, "token_end": end, "count": len(spans)}
        answers[q.id] = best
    usage: dict[str, Any] = {key: 0 for key in _USAGE_SUMS}
    usage.update(truncated=0, truncated_questions=[])
    for result in results:
        part = result.get("usage") or {}
        for name in _USAGE_SUMS:
            usage[name] += int(part.get(name) or 0)
        usage["truncated"] += int(bool(part.get("truncated")))
        usage["truncated_questions"] = list(part.get("truncated_questions") or [])
    usage["windows"] = scored
    return {"model": model_id, "answers": answers, "usage": usage}
