"""``HookOptions``: one value for the hook settings of a call, equivalent to the keywords.

The Agent, the Router and ``predict_long`` take ``hook_options=HookOptions(...)`` or the same
settings as keywords; both run the same hooks in the same order through the one lifecycle.
"""

from __future__ import annotations

import pytest

from jevlaya_lab.decisions.router import Router
from jevlaya_lab.hooks import BaseHook, HookOptions, HookRunner


class Log(BaseHook):
    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def on_predict_start(self, ctx):
        self.log.append((self.name, "start"))

    def on_predict_end(self, ctx):
        self.log.append((self.name, "end"))


def test_hook_options_run_the_same_hooks_in_the_same_order_as_the_keywords(tiny_agent, questions):
    by_keywords, by_options = [], []
    tiny_agent.predict("my card was charged twice", questions, hooks=[Log("a", by_keywords)],
                       on_predict_start=lambda ctx: by_keywords.append(("fn", "start")))
    options = HookOptions(hooks=[Log("a", by_options)],
                          on_predict_start=lambda ctx: by_options.append(("fn", "start")))
    tiny_agent.predict("my card was charged twice", questions, hook_options=options)
    assert by_options == by_keywords == [("a", "start"), ("fn", "start"), ("a", "end")]


def test_options_and_keywords_combine_but_one_setting_given_twice_is_refused(tiny_agent, questions):
    log: list = []
    result = tiny_agent.predict("hello", questions, hook_options=HookOptions(hooks=[Log("a", log)]),
                                hooks_raise=False)
    assert set(result["answers"]) == set(questions) and log == [("a", "start"), ("a", "end")]
    with pytest.raises(TypeError, match="hooks given both in hook_options and as keywords"):
        tiny_agent.predict("hello", questions, hook_options=HookOptions(hooks=[]), hooks=[Log("b", log)])
    with pytest.raises(TypeError, match="unexpected keyword argument 'hook'"):
        tiny_agent.predict("hello", questions, hook=[Log("b", log)])
    with pytest.raises(TypeError, match="hooks_concurrent applies to the installed hooks only"):
        tiny_agent.predict("hello", questions, hook_options=HookOptions(hooks_concurrent=False))


def test_predict_long_and_the_router_take_hook_options(tiny_agent, questions):
    log: list = []
    long_state = " ".join(["the invoice was charged twice and nobody answers my emails"] * 60)
    result = tiny_agent.predict_long(long_state, questions, hook_options=HookOptions(hooks=[Log("a", log)]))
    assert result["usage"]["windows"] > 1 and log == [("a", "start"), ("a", "end")]
    router = Router({"tiny": tiny_agent.model_id}, default="tiny")
    router.attach("tiny", tiny_agent)
    log.clear()
    routed = router.predict_batch([{"state": "a", "questions": questions}, {"state": "b", "questions": questions}],
                                  hook_options=HookOptions(hooks=[Log("r", log)]))
    assert [r["routing"]["model"] for r in routed] == ["tiny", "tiny"]
    assert log == [("r", "start"), ("r", "start"), ("r", "end"), ("r", "end")]


def test_a_runner_takes_options_or_keywords_not_both():
    runner = HookRunner(options=HookOptions(hooks_raise=False, hooks_concurrent=False, hooks_timeout=2.0))
    assert (runner.hooks_raise, runner.hooks_concurrent, runner.hooks_timeout) == (False, False, 2.0)
    assert HookRunner().hooks_raise is True
    with pytest.raises(TypeError, match="not both"):
        HookRunner(options=HookOptions(), hooks_raise=False)
