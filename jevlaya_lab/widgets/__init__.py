"""Views for the notebook: answers, routing, hook timelines, streams and the journal.

Every view keeps its state in synced traits (``view.get_state()``), escapes all state and model
text, and ships its front end inside the package. The widget libraries are imported on first
use of a view, so ``import jevlaya_lab.widgets`` (and ``render``) stay light.
"""

from __future__ import annotations

from jevlaya_lab._lazy import lazy_attributes

_VIEWS = {
    "AnswersView": "jevlaya_lab.widgets.answers",
    "RoutingView": "jevlaya_lab.widgets.routing_view",
    "HookTimeline": "jevlaya_lab.widgets.timeline",
    "StreamView": "jevlaya_lab.widgets.stream",
    "JournalDashboard": "jevlaya_lab.widgets.dashboard",
    "LabelView": "jevlaya_lab.widgets.labels",
    "mimebundle": "jevlaya_lab.widgets.render",
    "rich": "jevlaya_lab.widgets.render",
}
__all__ = sorted(_VIEWS)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _VIEWS)
