"""Every README example that shows its output gives that output: the Python blocks are read
from README.md, run in order, and each shown result is compared with what the code returns.

A shown result is a comment under an expression (``# -> {...}`` or ``# "text"``) or at the end
of its line (``expr   # 'multilingual'``); the part after a ``;`` in such a comment is prose.
A block runs up to its last shown result (what follows needs the hub or a provider key)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), flags=re.S)


def _shown(comment: str):
    text = comment.strip()[1:].strip()
    if text.startswith("->"):
        text = text[2:].strip()
    text = text.split(";", 1)[0].strip()
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False, None


def checks(block: str) -> list[tuple[str, str, object]]:
    """(code to run first, expression, shown value) for each shown result in ``block``."""
    lines = block.splitlines()
    found = []
    for i, line in enumerate(lines):
        code, _, trailing = line.partition("  # ")
        if trailing:
            ok, value = _shown("# " + trailing)
            if ok and isinstance(value, (str, dict)) and code.strip():
                found.append(("\n".join(lines[:i]), code.strip(), value))
                continue
        if line.lstrip().startswith("#") and i > 0:
            ok, value = _shown(line)
            if ok:
                start = i - 1  # the expression may span lines: take the statement ending there
                while start > 0:
                    try:
                        ast.parse("\n".join(lines[start:i]), mode="eval")
                        break
                    except SyntaxError:
                        start -= 1
                found.append(("\n".join(lines[:start]), "\n".join(lines[start:i]), value))
    return found


ALL = [(n, c) for n, block in enumerate(python_blocks()) for c in checks(block)]


def test_the_readme_shows_results_to_check():
    shown = [expr for _, (_, expr, _) in ALL]
    assert any("decide" in e for e in shown) and any(".reason" in e for e in shown), shown


@pytest.mark.integration
@pytest.mark.parametrize("block,check", ALL, ids=[f"block{n}-{c[1][:30]}" for n, c in ALL])
def test_a_readme_result_is_what_the_code_gives(block, check):
    blocks = python_blocks()
    namespace: dict = {}
    for earlier in blocks[:block]:  # names defined by earlier blocks (agent, router), without output
        if earlier.startswith("from jevlaya_lab import load"):
            exec(compile(earlier, "README", "exec"), namespace)
    setup, expression, shown = check
    exec(compile(setup, "README", "exec"), namespace)
    assert eval(compile(expression, "README", "eval"), namespace) == shown
