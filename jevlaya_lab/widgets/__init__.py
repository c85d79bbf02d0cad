"""Views for the notebook: answers, routing, hook timelines, streams and the journal.

Every view keeps its state in synced traits (``view.get_state()``), escapes all state and model
text, and ships its front end inside the package. The widget libraries are imported on first
use of a view, so ``import jevlaya_lab.widgets`` (and ``render``) stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

_VIEWS = {
    "AnswersView": "jevlaya_lab.widgets.answers",
    "RoutingView": "jevlaya_lab.widgets.routing",
    "HookTimeline": "jevlaya_lab.widgets.timeline",
    "StreamView": "jevlaya_lab.widgets.stream",
    "JournalDashboard": "jevlaya_lab.widgets.dashboard",
    "mimebundle": "jevlaya_lab.widgets.render",
    "rich": "jevlaya_lab.widgets.render",
}
__all__ = sorted(_VIEWS)


def __getattr__(name: str) -> Any:
    if name not in _VIEWS:
        raise AttributeError(f"module 'jevlaya_lab.widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(_VIEWS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
