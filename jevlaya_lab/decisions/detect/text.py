"""The text of a state that detection reads: its string leaves, and the sample of them it judges."""

from __future__ import annotations

from typing import Any, Iterator

import regex

SAMPLE_CHARS = 4000  # characters read per state (about what a 512-token model keeps, with margin)


def string_leaves(state: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """Yield ``(path, text)`` for every string (or decoded bytes) inside ``state``.

    Dict keys are not read; values are visited in order. The walk is iterative, so deeply
    nested states cannot hit the recursion limit, and a container seen twice is read once.
    """
    stack: list[tuple[str, Any]] = [(path, state)]
    seen: set[int] = set()
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            yield where, node
        elif isinstance(node, (bytes, bytearray)):
            yield where, bytes(node).decode("utf-8", errors="replace")
        elif isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, dict):
                children = [(f"{where}{_key_path(k)}", v) for k, v in node.items()]
            else:
                children = [(f"{where}[{i}]", v) for i, v in enumerate(node)]
            stack.extend(reversed(children))


def _key_path(key: Any) -> str:
    text = str(key)
    return f".{text}" if text.isidentifier() else f"[{text!r}]"


def sample_leaves(state: Any, budget: int = SAMPLE_CHARS) -> list[tuple[str, str]]:
    """The string leaves detection reads: at most ``budget`` characters, taken from the part of
    the state the model keeps when it truncates (the start of a str/dict, the newest turns of a
    list), so a long document costs no more than the text that can influence the answer."""
    if isinstance(state, str):  # most states: one leaf, nothing to walk
        return [("$", state[:budget])] if budget > 0 else []
    if type(state) is dict and all(type(value) is str for value in state.values()):
        leaves = [(f"${_key_path(key)}", value) for key, value in state.items()]  # a flat record
    else:
        leaves = list(string_leaves(state))
    if isinstance(state, (list, tuple)):
        leaves.reverse()
    sampled, left = [], budget
    for path, text in leaves:
        if left <= 0:
            break
        sampled.append((path, text[:left]))
        left -= len(text)
    if isinstance(state, (list, tuple)):
        sampled.reverse()
    return sampled


_NON_ASCII_LETTER = regex.compile(r"(?V1)[\p{L}--\p{ASCII}]")


def letters_are_ascii(text: str) -> bool:
    """Whether every letter of ``text`` is ASCII: ASCII text, or text whose other characters
    are all signs (typographic quotes and dashes, ``…``, no-break spaces, emoji). Such text has
    the letters and words of ASCII text: a sign splits words as a space does, and no sign
    lowers to a letter (checked over all of Unicode in the tests)."""
    return text.isascii() or not _NON_ASCII_LETTER.search(text)
