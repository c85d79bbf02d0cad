"""The hooks core on its own: validation, ordering, failure and locking rules."""

import threading
import warnings

import pytest

from jevlaya_lab.hooks import HOOK_EVENTS, BaseHook, HookRunner, PredictContext, aggregate_usage


class Log(BaseHook):
    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_predict_start(self, ctx):
        self.log.append(("start", self.name))

    def on_predict_end(self, ctx):
        self.log.append(("end", self.name))


def test_hook_events_are_the_six_of_the_lifecycle_page():
    assert HOOK_EVENTS == ("on_route", "on_load", "on_evict", "on_predict_start", "on_predict_end", "on_error")
    hook = BaseHook()
    for event in HOOK_EVENTS:
        assert callable(getattr(hook, event))


def test_context_fields_in_the_documented_order():
    """The lifecycle page's fields in its order (Laya's), then ``parent_id`` (for nesting)."""
    names = list(PredictContext.__dataclass_fields__)
    assert names == ["states", "questions", "run_id", "results", "decision", "model", "agent", "router",
                     "max_len", "head_max_len", "usage", "started_at", "elapsed_ms", "error", "parent_id"]


def test_context_identity_equality_and_hashing():
    a, b = PredictContext(["x"], {}), PredictContext(["x"], {})
    a.run_id = b.run_id
    assert a != b and a == a
    assert len({a, b}) == 2
    a.results = [{}]  # hash stays stable while fields change
    assert a in {a}


def test_run_id_is_uuid4_hex_and_unique():
    ids = {PredictContext([], {}).run_id for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_skip_accepts_one_result_per_state_or_a_lone_dict_for_one_state():
    ctx = PredictContext(["a", "b"], {})
    ctx.skip([{"answers": {}}, {"answers": {}}])
    assert len(ctx.results) == 2
    one = PredictContext(["a"], {})
    one.skip({"answers": {}})
    assert one.results == [{"answers": {}}]


@pytest.mark.parametrize("results", [[], [{}], [{}, {}, {}]])
def test_skip_with_the_wrong_count_names_the_counts(results):
    ctx = PredictContext(["a", "b"], {})
    with pytest.raises(ValueError, match=r"got \d+ result\(s\) for 2 state\(s\)"):
        ctx.skip(results)
    assert ctx.results is None


def test_aggregate_usage_sums_input_and_output_tokens():
    results = [{"usage": {"input_tokens": 3, "output_tokens": 0}}, {"usage": {"input_tokens": 4}}, {}]
    assert aggregate_usage(results) == {"input_tokens": 7, "output_tokens": 0}


def test_installed_before_per_call_and_list_order_within():
    log = []
    runner = HookRunner([Log("A", log), Log("B", log)])
    calls = runner.call([Log("C", log)])
    calls.emit("on_predict_start", None)
    calls.emit("on_predict_end", None)
    assert log == [("start", "A"), ("start", "B"), ("start", "C"), ("end", "A"), ("end", "B"), ("end", "C")]


def test_none_and_empty_list_add_nothing():
    runner = HookRunner([BaseHook()])
    assert runner.call(None).hooks == runner.installed
    assert runner.call([]).hooks == runner.installed


def test_plain_callables_go_on_the_event_keywords():
    seen = []
    runner = HookRunner(on_predict_start=lambda ctx: seen.append("s"))
    calls = runner.call(on_predict_end=lambda ctx: seen.append("e"))
    calls.emit("on_predict_start", None)
    calls.emit("on_predict_end", None)
    assert seen == ["s", "e"]


def test_misuse_raises_clear_type_errors():
    with pytest.raises(TypeError, match="not an instance; pass Log()"):
        HookRunner([Log])
    with pytest.raises(TypeError, match="bare function"):
        HookRunner([lambda ctx: None])

    class NotCallable:
        on_predict_end = 3

    with pytest.raises(TypeError, match="not callable"):
        HookRunner([NotCallable()])
    with pytest.raises(TypeError, match="implements no hook event"):
        HookRunner([object()])
    with pytest.raises(TypeError, match="hooks=\\[hook\\]"):
        HookRunner(BaseHook())
    with pytest.raises(TypeError, match="on_predict_start="):
        HookRunner(on_predict_start=3)


# -- hooks as laya, validated when they are registered ---------------------------------------------

def test_a_misspelt_event_on_a_basehook_subclass_is_refused_naming_it_and_the_events():
    class Typo(BaseHook):
        def on_predict_strat(self, ctx):
            pass

    for register in (lambda h: HookRunner([h]), lambda h: HookRunner().add_hook(h),
                     lambda h: HookRunner().call([h])):
        with pytest.raises(TypeError, match=r"Typo defines on_predict_strat, which is not a hook event.*"
                                            r"on_route, on_load, on_evict, on_predict_start"):
            register(Typo())


def test_a_non_callable_event_is_refused_at_registration_with_the_valid_events():
    class Broken(BaseHook):
        on_predict_end = "not a method"

    with pytest.raises(TypeError, match=r"Broken.on_predict_end is str, not callable.*valid events"):
        HookRunner().add_hook(Broken())


def test_on_load_takes_the_context_or_the_seed_name_and_agent_pair():
    seen = []

    class LayaStyle(BaseHook):
        def on_load(self, ctx):
            seen.append(("ctx", ctx.model, ctx.agent))

    class SeedStyle:
        def on_load(self, name, agent):
            seen.append(("pair", name, agent))

        def on_evict(self, name, agent=None):  # one required positional: the context form
            seen.append(("evict-ctx", name.model))

    calls = HookRunner([LayaStyle(), SeedStyle()]).call()
    ctx = PredictContext([], {}, model="english", agent="the agent")
    calls.emit("on_load", ctx)
    calls.emit("on_evict", ctx)
    assert seen == [("ctx", "english", "the agent"), ("pair", "english", "the agent"),
                    ("evict-ctx", "english")]


def test_async_event_methods_are_awaited_in_sync_calls_and_inside_a_running_loop():
    import asyncio

    class Remote(BaseHook):
        async def on_predict_end(self, ctx):
            await asyncio.sleep(0.01)
            ctx.results.append("shipped")

    calls = HookRunner([Remote()]).call()
    ctx = PredictContext(["s"], {}, results=[])
    calls.emit("on_predict_end", ctx)
    assert ctx.results == ["shipped"]

    async def inside_a_loop():
        inner = PredictContext(["s"], {}, results=[])
        calls.emit("on_predict_end", inner)
        return inner.results

    assert asyncio.run(inside_a_loop()) == ["shipped"]


def test_hooks_timeout_bounds_each_invocation():
    import time

    class Slow(BaseHook):
        def on_predict_start(self, ctx):
            time.sleep(0.5)

    started = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"hook .*Slow.on_predict_start exceeded hooks_timeout=0.05s"):
        HookRunner([Slow()], hooks_timeout=0.05).call().emit("on_predict_start", None)
    assert time.perf_counter() - started < 0.4
    with pytest.warns(RuntimeWarning, match="exceeded hooks_timeout"):
        HookRunner([Slow()]).call(hooks_raise=False, hooks_timeout=0.05).emit("on_predict_start", None)
    fast = HookRunner([Log("fast", [])], hooks_timeout=0.5).call()
    fast.emit("on_predict_start", None)  # finishing in time is not an error


@pytest.mark.parametrize("bad", [0, -1, True, float("nan"), float("inf"), "1"])
def test_bad_hooks_timeout_values_are_refused(bad):
    with pytest.raises(ValueError, match="hooks_timeout"):
        HookRunner(hooks_timeout=bad)


def test_the_lifecycle_runs_start_error_end_in_the_seed_order():
    log = []

    class Trace(BaseHook):
        def on_predict_start(self, ctx):
            log.append("start")

        def on_error(self, ctx):
            log.append(("error", type(ctx.error).__name__))

        def on_predict_end(self, ctx):
            log.append(("end", ctx.elapsed_ms is not None, ctx.usage))

    calls = HookRunner([Trace()]).call()
    ctx = PredictContext(["s"], {})
    with calls.lifecycle(ctx):
        ctx.results = [{"usage": {"input_tokens": 5, "output_tokens": 0}}]
    failing = PredictContext(["s"], {})
    with pytest.raises(KeyError), calls.lifecycle(failing):
        raise KeyError("boom")
    assert log == ["start", ("end", True, {"input_tokens": 5, "output_tokens": 0}),
                   "start", ("error", "KeyError"), ("end", True, None)]


def test_add_remove_and_hooks_installed():
    runner = HookRunner()
    a, b = BaseHook(), BaseHook()
    runner.add_hook(a)
    with runner.hooks_installed(b):
        assert runner.installed == (a, b)
    assert runner.installed == (a,)
    runner.remove_hook(a)
    assert runner.installed == ()
    with pytest.raises(ValueError, match="not installed"):
        runner.remove_hook(a)


class Boom(BaseHook):
    def on_predict_start(self, ctx):
        raise KeyError("boom")


def test_hooks_raise_stops_at_the_first_failure_and_names_the_hook():
    log = []
    runner = HookRunner([Boom(), Log("after", log)])
    with pytest.raises(KeyError) as info:
        runner.call().emit("on_predict_start", None)
    assert any("Boom.on_predict_start" in note for note in info.value.__notes__)
    assert log == []


def test_hooks_raise_false_warns_once_per_failure_and_continues():
    log = []
    runner = HookRunner([Boom(), Boom(), Log("after", log)], hooks_raise=False)
    with pytest.warns(RuntimeWarning) as record:
        runner.call().emit("on_predict_start", None)
    assert len([w for w in record if "Boom.on_predict_start" in str(w.message)]) == 2
    assert log == [("start", "after")]


def test_per_call_hooks_raise_overrides_the_runner_setting():
    runner = HookRunner([Boom()], hooks_raise=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.call(hooks_raise=False).emit("on_predict_start", None)  # does not raise
    assert [w.category for w in caught] == [RuntimeWarning]
    assert "Boom.on_predict_start raised KeyError" in str(caught[0].message)
    assert "hooks_raise=False" in str(caught[0].message)
    runner = HookRunner([Boom()], hooks_raise=False)
    with pytest.raises(KeyError):
        runner.call(hooks_raise=True).emit("on_predict_start", None)


def test_emit_each_runs_all_and_returns_the_first_failure():
    class EndBoom(BaseHook):
        def __init__(self, tag):
            self.tag = tag

        def on_predict_end(self, ctx):
            raise RuntimeError(self.tag)

    log = []
    runner = HookRunner([EndBoom("first"), Log("x", log), EndBoom("second")])
    failure = runner.call().emit_each("on_predict_end", None)
    assert str(failure) == "first" and log == [("end", "x")]


def test_a_failing_on_error_never_masks_the_original_error():
    class BadOnError(BaseHook):
        def on_error(self, ctx):
            raise ValueError("hook broke")

    seen = []

    class GoodOnError(BaseHook):
        def on_error(self, ctx):
            seen.append(type(ctx.error))

    runner = HookRunner([BadOnError(), GoodOnError()])
    ctx = PredictContext(["s"], {})
    ctx.error = ZeroDivisionError("original")
    runner.call().emit_error(ctx)  # does not raise
    assert seen == [ZeroDivisionError]
    assert any("BadOnError.on_error raised ValueError: hook broke" in n for n in ctx.error.__notes__)
    assert isinstance(ctx.error.__context__, ValueError)


def test_hooks_concurrent_false_serialises_each_invocation_but_allows_reentry():
    runner = HookRunner(hooks_concurrent=False)
    inside, overlap = [0], []
    barrier = threading.Barrier(4)

    class Slow(BaseHook):
        def on_predict_start(self, ctx):
            inside[0] += 1
            overlap.append(inside[0])
            threading.Event().wait(0.01)
            # re-entrant: a hook may dispatch again on the same runner without deadlock
            runner.call([Inner()]).emit("on_predict_end", ctx)
            inside[0] -= 1

    class Inner(BaseHook):
        def on_predict_end(self, ctx):
            pass

    runner.add_hook(Slow())

    def call():
        barrier.wait()
        runner.call().emit("on_predict_start", None)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert overlap == [1, 1, 1, 1]


def test_hooks_concurrent_true_lets_hooks_overlap():
    runner = HookRunner()
    inside, peak = [0], [0]
    lock = threading.Lock()
    barrier = threading.Barrier(3)

    class Slow(BaseHook):
        def on_predict_start(self, ctx):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            barrier.wait(5)  # all three must be inside at once
            with lock:
                inside[0] -= 1

    runner.add_hook(Slow())
    threads = [threading.Thread(target=runner.call().emit, args=("on_predict_start", None))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert peak[0] == 3


def test_concurrent_add_hook_loses_no_hook():
    runner = HookRunner()
    hooks = [BaseHook() for _ in range(400)]
    threads = [threading.Thread(target=lambda chunk=hooks[i::8]: [runner.add_hook(h) for h in chunk])
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(runner.installed) == 400


def test_ready_made_hooks_are_reachable_from_the_hooks_package():
    from jevlaya_lab import hooks
    from jevlaya_lab.hooks.cache import PredictionCache
    from jevlaya_lab.hooks.recorder import EventRecorder

    assert hooks.EventRecorder is EventRecorder and hooks.PredictionCache is PredictionCache


def test_every_ready_made_hook_is_exported_and_a_valid_hook():
    from jevlaya_lab import hooks

    for name in ("EventRecorder", "PredictionCache", "RedactionHook", "AuditHook"):
        cls = getattr(hooks, name)
        assert name in hooks.__all__
        assert any(callable(getattr(cls, event, None)) for event in HOOK_EVENTS), name


def test_listens_names_only_events_some_hook_of_the_call_implements():
    class Router(BaseHook):
        def on_route(self, ctx):
            pass

    runner = HookRunner([Log("a", [])])
    assert runner.call().listens("on_predict_start") and not runner.call().listens("on_route")
    assert runner.call([Router()]).listens("on_route")
    assert not HookRunner().call().listens("on_predict_end")


def test_one_call_scope_gives_every_context_one_parent_id_even_from_threads():
    """The call id is made when the first context asks for it (most route() calls never create
    a context); contexts made in the scope, in threads it starts too, all share that one id,
    nested scopes keep the outer id, and separate scopes get different ids."""
    import contextvars

    from jevlaya_lab.hooks.context import call_scope, current_call

    @call_scope
    def one_call(threads: int) -> list:
        found: list = []
        gate = threading.Barrier(threads)

        def make() -> None:
            gate.wait()
            found.append(PredictContext(["s"], {}).parent_id)

        workers = [threading.Thread(target=contextvars.copy_context().run, args=(make,)) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        found.append(nested())
        return found

    @call_scope
    def nested() -> str | None:
        return current_call()

    assert current_call() is None and PredictContext(["s"], {}).parent_id is None
    first, second = one_call(8), one_call(8)
    assert len(set(first)) == 1 and len(set(second)) == 1 and None not in first
    assert first[0] != second[0] and len(first[0]) == 32
    assert current_call() is None


def test_runner_listens_only_for_events_an_installed_hook_implements():
    """``listens`` lets a Router skip building an ``on_route`` context nobody sees; a hook
    installed later is heard at once."""

    class Routes(BaseHook):
        def on_route(self, ctx):
            pass

    runner = HookRunner()
    assert not runner.listens("on_route")
    runner.add_hook(BaseHook())  # implements nothing
    assert not runner.listens("on_route")
    hook = Routes()
    runner.add_hook(hook)
    assert runner.listens("on_route") and not runner.listens("on_load")
    runner.remove_hook(hook)
    assert not runner.listens("on_route")
