"""How a result object finds its notebook display without importing the renderer.

Result types live with the engines that make them (``AgentResult`` in
:mod:`jevlaya_lab.decisions.results`, a routing ``Decision``, a Broker answer); the HTML and the
JSON payload are drawn by :mod:`jevlaya_lab.display`. So that no engine imports the renderer,
a result asks this registry for the renderer of its kind when a notebook displays it, and
:mod:`jevlaya_lab.display` registers its renderers when it is imported, which
``jevlaya_lab/__init__.py`` does for every use of the package (it costs no third-party import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MIME = "application/vnd.jevlaya+json"
"""The MIME type of the JSON payload every result and view carries beside its HTML."""
Renderer = Callable[[Any], Any]
_RENDERERS: dict[str, Renderer] = {}


def register_renderer(kind: str, renderer: Renderer) -> None:
    """Make ``renderer`` draw the results of ``kind`` (a later registration replaces it)."""
    _RENDERERS[kind] = renderer


def render(kind: str, data: Any) -> Any:
    """What the renderer of ``kind`` makes of ``data``; a ``LookupError`` naming the kind when
    none is registered (the package's ``__init__`` registers every kind it defines)."""
    try:
        renderer = _RENDERERS[kind]
    except KeyError:
        raise LookupError(f"no renderer registered for {kind!r}; import jevlaya_lab.display "
                          f"(registered: {sorted(_RENDERERS)})") from None
    return renderer(data)
