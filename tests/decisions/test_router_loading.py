"""Router loading (seed "Model lifecycle"): LRU over max_loaded, on_evict
before on_load after the lock is released, shared builds, attach/unload/preload, thread safety."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jevlaya_lab.decisions.errors import CheckpointNotFoundError
from jevlaya_lab.decisions.router import Router
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.hooks import BaseHook

QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the user want?",
                        "criteria": ["refund", "bug", "other"]}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("router-loading")
    return {name: make_tiny_checkpoint(root / name, seed=seed) for seed, name in enumerate("abc")}


class Lifecycle(BaseHook):
    def __init__(self):
        self.events = []
        self._lock = threading.Lock()

    def on_load(self, name, agent):
        with self._lock:
            self.events.append(("load", name))

    def on_evict(self, name, agent):
        with self._lock:
            self.events.append(("evict", name))


def make_router(checkpoints, **kwargs):
    return Router(dict(checkpoints), default="a", **kwargs)


def test_max_loaded_1_evicts_before_loading_the_next(checkpoints):
    """Seed "Model lifecycle": one load that both evicts and builds fires on_evict before on_load."""
    events = Lifecycle()
    router = make_router(checkpoints, max_loaded=1, hooks=[events])
    router.load("a")
    router.load("b")
    assert router.loaded == ("b",)
    assert events.events == [("load", "a"), ("evict", "a"), ("load", "b")]


def test_max_loaded_2_evicts_the_least_recently_used(checkpoints):
    """LRU eviction on load when over max_loaded; loaded lists least recent first."""
    events = Lifecycle()
    router = make_router(checkpoints, max_loaded=2, hooks=[events])
    agent_a = router.load("a")
    router.load("b")
    assert router.load("a") is agent_a  # resident: returned as is, and now most recent
    assert router.loaded == ("b", "a")
    router.load("c")
    assert router.loaded == ("a", "c")
    assert events.events == [("load", "a"), ("load", "b"), ("evict", "b"), ("load", "c")]


def test_predict_batch_across_more_checkpoints_than_max_loaded(checkpoints):
    """A batch over three checkpoints with max_loaded=1 loads each in turn and still answers all."""
    events = Lifecycle()
    router = make_router(checkpoints, max_loaded=1, hooks=[events])
    requests = [{"state": f"s{i}", "questions": QUESTIONS, "model": m} for i, m in enumerate("abca")]
    results = router.predict_batch(requests)
    assert [r["routing"]["model"] for r in results] == list("abca")
    assert events.events == [("load", "a"), ("evict", "a"), ("load", "b"), ("evict", "b"), ("load", "c")]
    assert router.loaded == ("c",)


def test_lifecycle_hooks_run_after_the_lock_is_released_and_may_call_back(checkpoints):
    """Seed: on_load / on_evict run after the Router's lock is released, so a hook may call back
    into the Router (here: load another checkpoint, route and read `loaded`) without deadlock."""
    seen = []

    class CallsBack(BaseHook):
        def on_evict(self, name, agent):
            seen.append(("evict", name, self.router.loaded))

        def on_load(self, name, agent):
            seen.append(("load", name, self.router.loaded, self.router.route("hello", model="c").model))
            if name == "a":
                self.router.load("b")  # re-entrant load from inside on_load

    hook = CallsBack()
    router = make_router(checkpoints, max_loaded=2, hooks=[hook])
    hook.router = router
    done = threading.Event()
    worker = threading.Thread(target=lambda: (router.load("a"), done.set()))
    worker.start()
    assert done.wait(30), "a hook calling back into the Router deadlocked"
    assert ("load", "b", ("a", "b"), "c") in seen and router.loaded == ("a", "b")


def test_concurrent_loads_share_one_build(checkpoints):
    """Concurrent callers of load(name) share one build (one on_load, one Agent)."""
    events = Lifecycle()
    router = make_router(checkpoints, hooks=[events])
    with ThreadPoolExecutor(8) as pool:
        agents = list(pool.map(lambda _: router.load("b"), range(16)))
    assert len({id(a) for a in agents}) == 1
    assert events.events == [("load", "b")]


def test_a_failed_build_raises_in_every_waiter(checkpoints, tmp_path):
    """A failed build raises in every waiter, and a later load tries again."""
    broken = tmp_path / "broken"
    broken.mkdir()
    router = make_router(checkpoints)
    router.register("broken", broken)
    barrier = threading.Barrier(6)

    def attempt(_):
        barrier.wait()
        try:
            router.load("broken")
        except Exception as exc:  # noqa: BLE001 - the test inspects what each waiter got
            return exc
        return None

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(attempt, range(6)))
    assert all(isinstance(o, Exception) and "broken" in str(o) for o in outcomes)
    assert router.loaded == ()
    with pytest.raises(Exception, match="broken"):
        router.load("broken")


def test_unload_fires_on_evict_and_the_context_manager_unloads_all(checkpoints):
    """Seed: unload(name) removes it, then on_evict after the lock; context manager unloads all."""
    events = Lifecycle()
    with make_router(checkpoints, hooks=[events]) as router:
        router.load("a")
        router.load("b")
        assert router.unload("a") == ["a"]
        assert router.unload("a") == []  # not resident: nothing to do
        router.load("c")
    assert router.loaded == ()
    assert events.events == [("load", "a"), ("load", "b"), ("evict", "a"), ("load", "c"),
                             ("evict", "b"), ("evict", "c")]


def test_attach_registers_an_existing_agent_without_on_load(checkpoints):
    """Seed: attach(name, agent) registers an existing agent and does not fire on_load."""
    from jevlaya_lab.decisions.agent import Agent

    events = Lifecycle()
    router = make_router(checkpoints, max_loaded=1, hooks=[events])
    router.load("a")
    mine = Agent(checkpoints["b"], model_id="mine")
    router.attach("custom", mine)
    assert router.loaded == ("custom",) and router.load("custom") is mine
    assert events.events == [("load", "a"), ("evict", "a")]
    result = router.predict("refund please", QUESTIONS, model="custom")
    assert result["routing"]["model"] == "custom" and result["model"] == "mine"
    with pytest.raises(TypeError, match="expected an Agent"):
        router.attach("x", object())


def test_preload_and_its_limit(checkpoints):
    events = Lifecycle()
    router = make_router(checkpoints, max_loaded=2, hooks=[events])
    assert router.preload(["a", "c"]) == ["a", "c"]
    assert router.loaded == ("a", "c")
    with pytest.raises(ValueError, match="exceed max_loaded=2"):
        router.preload()


def test_unregister_unloads_first_and_refuses_the_default(checkpoints):
    events = Lifecycle()
    router = make_router(checkpoints, hooks=[events])
    router.load("b")
    router.unregister("b")
    assert router.loaded == () and events.events == [("load", "b"), ("evict", "b")]
    with pytest.raises(ValueError, match="unknown checkpoint name 'b'"):
        router.load("b")
    with pytest.raises(ValueError, match="it is the Router's default"):
        router.unregister("a")


def test_laya_checkpoints_fail_fast_offline_naming_local_alternatives(monkeypatch):
    """Hub checkpoints offline fail fast with a message naming the local alternatives."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    router = Router.laya()
    started = time.perf_counter()
    with pytest.raises(CheckpointNotFoundError) as info:
        router.load("multilingual")
    assert time.perf_counter() - started < 10
    assert "'convaiinnovations/laya' (subfolder 'multilingual')" in str(info.value)
    assert "mini-en" in str(info.value) or "mini-multi" in str(info.value)


def test_many_threads_route_and_predict_while_loads_and_evictions_happen(checkpoints):
    """Seed "Concurrency": many threads routing and predicting across checkpoints while
    loads and evictions happen (max_loaded=2 over three checkpoints) get the same answers as a
    single thread."""
    reference = make_router(checkpoints, max_loaded=3)
    states = [f"refund order {i}" for i in range(6)]
    expected = {(m, s): reference.predict(s, QUESTIONS, model=m)["answers"] for m in "abc" for s in states}
    events = Lifecycle()
    router = make_router(checkpoints, max_loaded=2, hooks=[events])
    errors = []

    def worker(seed):
        try:
            for step in range(6):
                model = "abc"[(seed + step) % 3]
                state = states[(seed * 7 + step) % len(states)]
                if step % 2:
                    result = router.predict(state, QUESTIONS, model=model)
                    assert result["answers"] == expected[(model, state)]
                else:
                    batch = [{"state": s, "questions": QUESTIONS, "model": m} for m, s in
                             ((model, state), ("abc"[(seed + 1) % 3], states[0]))]
                    for request, result in zip(batch, router.predict_batch(batch)):
                        assert result["answers"] == expected[(request["model"], request["state"])]
                assert router.route(state, model=model).model == model
        except BaseException as exc:  # noqa: BLE001 - collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert any(e[0] == "evict" for e in events.events)
    assert len(router.loaded) <= 2
    loads = sum(e[0] == "load" for e in events.events)
    evictions = sum(e[0] == "evict" for e in events.events)
    assert loads - evictions == len(router.loaded)


def test_device_and_agent_kwargs_reach_the_agent(checkpoints):
    router = make_router(checkpoints, device="cpu", agent_kwargs={"hooks_raise": False})
    agent = router.load("a")
    assert agent.model_id == "a"
    assert str(getattr(agent, "device", "cpu")).startswith("cpu")



def test_a_failing_on_evict_hook_does_not_skip_on_load(checkpoints):
    """Both lifecycle events fire for one load; the first hook failure is raised after both ran,
    and the new checkpoint is resident either way."""
    events = Lifecycle()

    class BadEvict(BaseHook):
        def on_evict(self, name, agent):
            raise RuntimeError("evict hook failed")

    router = make_router(checkpoints, max_loaded=1, hooks=[BadEvict(), events])
    router.load("a")
    with pytest.raises(RuntimeError, match="evict hook failed"):
        router.load("b")
    assert events.events == [("load", "a"), ("evict", "a"), ("load", "b")]
    assert router.loaded == ("b",)
