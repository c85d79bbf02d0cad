"""Tool loops: ``run_tool_loop`` / ``arun_tool_loop`` call the pool until it stops asking for
tools.

Each round is its own routed ``chat`` call (so failover works per round). ``dispatch`` maps a
tool name to a callable taking the tool's JSON arguments as keyword arguments (or is one
callable ``dispatch(name, arguments)``); async callables are awaited in ``arun_tool_loop``. An
unknown tool, arguments that are not JSON, or an exception in the tool become a tool message the
model can read, never an exception here. More than ``max_steps`` rounds raise
``ToolLoopLimitError``. The final result carries the whole conversation in ``.messages``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from jevlaya_lab.broker.errors import ToolLoopLimitError
from jevlaya_lab.broker.results import LLMResult

Dispatch = Mapping[str, Callable[..., Any]] | Callable[[str, dict[str, Any]], Any]


def _check(tools: Any, dispatch: Any, max_steps: Any) -> None:
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"tools={tools!r:.80}: must be a non-empty list of OpenAI tool specs")
    if not (isinstance(dispatch, Mapping) or callable(dispatch)):
        raise TypeError(f"dispatch={dispatch!r:.80}: must be a dict of name -> callable, or a "
                        "callable(name, arguments)")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps={max_steps!r}: must be an integer >= 1")


def _invoke(dispatch: Dispatch, call: dict[str, Any]) -> tuple[Any, str | None]:
    """Start one tool call: (value or awaitable, None) or (None, error text)."""
    fn = call.get("function") or {}
    name = fn.get("name") or ""
    try:
        args = json.loads(fn.get("arguments") or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
    except ValueError as exc:
        return None, f"error: arguments of tool {name!r} are not a JSON object ({exc})"
    try:
        if isinstance(dispatch, Mapping):
            if name not in dispatch:
                return None, (f"error: unknown tool {name!r}; available: "
                              f"{', '.join(sorted(dispatch))}")
            return dispatch[name](**args), None
        return dispatch(name, args), None
    except Exception as exc:  # noqa: BLE001 - the model should read the failure
        return None, f"error: tool {name!r} raised {type(exc).__name__}: {exc}"


def _as_content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _tool_message(call: dict[str, Any], content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.get("id"), "content": content}


def _final(result: LLMResult, conversation: list[dict[str, Any]]) -> bool:
    """Append the model's turn; True (and the transcript on the result) when it asked for no
    tool."""
    conversation.append(result.message())
    if result.tool_calls:
        return False
    result.messages = conversation
    return True


def _limit(max_steps: int, messages: list[dict[str, Any]]) -> ToolLoopLimitError:
    return ToolLoopLimitError(f"the model still asked for tools after max_steps={max_steps} "
                              "rounds; raise max_steps or simplify the task", messages=messages)


def run_tool_loop(llms: Any, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]],
                  dispatch: Dispatch, max_steps: int = 8, **kwargs: Any) -> LLMResult:
    """Sync tool loop over a ``Broker`` or a scoped broker; kwargs go to each ``chat``."""
    _check(tools, dispatch, max_steps)
    conversation = [dict(m) for m in messages]
    for _ in range(max_steps):
        result: LLMResult = llms.chat(conversation, tools=tools, **kwargs)
        if _final(result, conversation):
            return result
        for call in result.tool_calls:
            value, error = _invoke(dispatch, call)
            if inspect.isawaitable(value):
                getattr(value, "close", lambda: None)()  # never awaited: do not leak it
                value, error = None, "error: async tools need arun_tool_loop"
            conversation.append(_tool_message(call, error or _as_content(value)))
    raise _limit(max_steps, conversation)


async def arun_tool_loop(llms: Any, messages: list[dict[str, Any]], *,
                         tools: list[dict[str, Any]], dispatch: Dispatch, max_steps: int = 8,
                         **kwargs: Any) -> LLMResult:
    """Async tool loop over an ``AsyncBroker`` or a scoped one; async tools are awaited."""
    _check(tools, dispatch, max_steps)
    conversation = [dict(m) for m in messages]
    for _ in range(max_steps):
        result: LLMResult = await llms.chat(conversation, tools=tools, **kwargs)
        if _final(result, conversation):
            return result
        for call in result.tool_calls:
            value, error = _invoke(dispatch, call)
            if error is None and inspect.isawaitable(value):
                try:
                    value = await value
                except Exception as exc:  # noqa: BLE001
                    error = f"error: tool raised {type(exc).__name__}: {exc}"
            conversation.append(_tool_message(call, error or _as_content(value)))
    raise _limit(max_steps, conversation)
