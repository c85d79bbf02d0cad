"""Front-end assets of the views: ``common.js`` (DOM helpers) + ``<view>.js`` + ``widgets.css``.

Everything ships inside the package (no CDN). The helpers build the DOM with ``textContent``
semantics only (``Node.append(string)``), so state and model text can never become markup.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

HERE = Path(__file__).parent


@cache
def esm(view: str) -> str:
    """The ES module of one view: the shared helpers followed by the view's ``render``."""
    return (HERE / "common.js").read_text("utf-8") + "\n" + (HERE / f"{view}.js").read_text("utf-8")


@cache
def css() -> str:
    return (HERE / "widgets.css").read_text("utf-8")
