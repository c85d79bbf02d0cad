"""Find the first place in a nested value that no model can read: a string UTF-8 cannot encode
(a lone surrogate, which a tokenizer rejects and a JSON body cannot carry) or nesting deeper than
a bound. The Broker (prompts, messages, tools) and the decisions (states) both refuse such input
before any work; each phrases its own error, naming the field, from what this returns.

The walk is iterative, so a value nested thousands of levels deep is reported, never a
``RecursionError``. Keys of mappings are checked as well as values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Unreadable", "first_unreadable"]


@dataclass(frozen=True)
class Unreadable:
    """Where the walk stopped: ``where`` is ``prefix`` plus the path (``[0]['content']``,
    `` key 'name'``); ``char`` and ``index`` name the bad character, or are ``None`` when the
    value nests deeper than the bound there."""

    where: str
    char: str | None = None
    index: int | None = None


def first_unreadable(value: Any, max_depth: int, prefix: str = "") -> Unreadable | None:
    """The first unreadable place in ``value`` (lists, tuples and mappings are entered), or
    ``None`` when every string encodes and no container sits deeper than ``max_depth``."""
    stack: list[tuple[Any, str, int]] = [(value, prefix, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    return Unreadable(where, item[exc.start], exc.start)
            continue
        if isinstance(item, Mapping):
            children: Any = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        if depth >= max_depth:
            return Unreadable(where)
        for key, child in children:
            if isinstance(key, str):
                stack.append((key, f"{where} key {key[:40]!r}", depth + 1))
            stack.append((child, f"{where}[{key!r}]", depth + 1))
    return None
