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
    """The default registry works offline (bundled checkpoints); English text loads only
    the English checkpoint, and the context manager unloads it."""
    loads = Loads()
    questions = triage_questions()
    with Router(hooks=[loads]) as router:
        # a clear-cut refund ("charged twice ... refund it" reads as billing just as well)
        result = router.predict("I returned the blender three weeks ago and still have not received my money "
                                "back. Please refund me.", questions)
        assert result["routing"]["model"] == "english" and result["model"] == "english"
        assert set(result["answers"]) == set(questions)
        assert result["answers"]["intent"]["choice"] == "refund"
        assert result["usage"]["input_tokens"] > 0
        assert router.loaded == ("english",)
    assert loads.events == [("load", "english"), ("evict", "english")]


def test_default_router_answers_other_languages_offline_with_mini_multi():
    """``multilingual`` is the bundled mini-multi offline; Spanish, Russian and
    Japanese states in one batch are answered by it alone, with complete, normalised answers."""
    import math

    questions = triage_questions()
    states = {
        "es": "Quiero cancelar mi suscripción ya mismo, no pienso pagar ni un mes más.",
        "ru": "Не могу войти в аккаунт: код подтверждения по SMS так и не пришёл.",
        "ja": "注文した荷物がまだ届きません。追跡番号を確認してもらえますか？",
    }
    loads = Loads()
    with Router(hooks=[loads]) as router:
        results = router.predict_batch([{"state": s, "questions": questions} for s in states.values()])
        for (lang, _), result in zip(states.items(), results):
            assert result["routing"]["model"] == "multilingual", (lang, result["routing"])
            assert result["routing"]["detection"]["language"] == lang
            assert set(result["answers"]) == set(questions)
            probs = result["answers"]["intent"]["probabilities"]
            assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-3)
        assert router.loaded == ("multilingual",)
    assert loads.events == [("load", "multilingual"), ("evict", "multilingual")]
