"""Integration: the default Router over the bundled offline checkpoints."""

import pytest

from jevlaya_lab.decisions.presets import triage_questions
from jevlaya_lab.decisions.router import Router
from jevlaya_lab.hooks import BaseHook

pytestmark = pytest.mark.integration


class Loads(BaseHook):
    def __init__(self):
        self.events = []

    def on_load(self, name, agent):
        self.events.append(("load", name))

    def on_evict(self, name, agent):
        self.events.append(("evict", name))


def test_default_router_answers_english_offline_with_the_bundled_checkpoint():
    """Spec §4: the default registry works offline (bundled checkpoints); English text loads only
    the English checkpoint, and the context manager unloads it."""
    loads = Loads()
    questions = triage_questions()
    with Router(hooks=[loads]) as router:
        result = router.predict("I was charged twice for invoice 4411, please refund the second charge.",
                                questions)
        assert result["routing"]["model"] == "english" and result["model"] == "english"
        assert set(result["answers"]) == set(questions)
        assert result["answers"]["intent"]["choice"] == "refund"
        assert result["usage"]["input_tokens"] > 0
        assert router.loaded == ("english",)
    assert loads.events == [("load", "english"), ("evict", "english")]
