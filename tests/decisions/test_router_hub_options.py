"""Router(token=, revision=, revisions=, sha256_digests=, standalone_repos=, preload=)
(Laya 0.4.15's constructor keywords) and load(name, revision=, token=).

Offline, a hub id loads from the local hub cache, so a real cache directory holding two
revisions of one repo (different seeds) shows which revision each load picked. The token is
checked against a real HTTP server on 127.0.0.1 standing in for the hub: it records the
Authorization header of the request the loader sends.
"""

from __future__ import annotations

import hashlib
import http.server
import shutil
import threading

import pytest
import torch

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.errors import CheckpointError, CheckpointNotFoundError
from jevlaya_lab.decisions.router import Router
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.hooks import BaseHook

REPO = "acme/decider"
SHA_MAIN = "a" * 40
SHA_V2 = "b" * 40


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-options")
    return {"main": make_tiny_checkpoint(root / "main", seed=0), "v2": make_tiny_checkpoint(root / "v2", seed=1)}


@pytest.fixture
def hub_cache(sources, tmp_path, monkeypatch):
    """A hub cache with REPO at two commits: ``main`` -> seed 0, tag ``v2`` -> seed 1; hub offline."""
    import huggingface_hub.constants

    cache = tmp_path / "hub-cache"
    repo = cache / "models--acme--decider"
    for sha, which in ((SHA_MAIN, "main"), (SHA_V2, "v2")):
        shutil.copytree(sources[which], repo / "snapshots" / sha)
    # a bundle layout too: at commit main the subfolder "inner" holds the seed-1 checkpoint
    shutil.copytree(sources["v2"], repo / "snapshots" / SHA_MAIN / "inner")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA_MAIN)
    (repo / "refs" / "v2").write_text(SHA_V2)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def fingerprint(agent) -> torch.Tensor:
    return agent.decision_model.scorer[-1].weight.detach().clone()


@pytest.fixture(scope="module")
def expected(sources):
    return {which: fingerprint(Agent(path)) for which, path in sources.items()}


def which(agent, expected) -> str:
    return next(name for name, weights in expected.items() if torch.equal(fingerprint(agent), weights))


def test_a_hub_id_loads_the_revision_asked_for_from_the_local_cache(hub_cache, expected):
    assert which(Agent(REPO), expected) == "main"
    assert which(Agent(REPO, revision="v2"), expected) == "v2"
    assert which(Agent(REPO, revision=SHA_V2), expected) == "v2"
    assert which(Agent(REPO, revision="  "), expected) == "main"  # blank counts as not given


def test_a_subfolder_of_a_hub_repo_loads_from_the_cache_through_agent_register_and_router(hub_cache, expected):
    assert which(Agent(REPO, subfolder="inner"), expected) == "v2"
    router = Router({"x": REPO}, default="x", revision="main")
    router.register("bundled", REPO, subfolder="inner")
    assert router.registered["bundled"].source == (REPO, "inner")
    assert which(router.load("bundled"), expected) == "v2" and which(router.load("x"), expected) == "main"
    router = Router({"x": (REPO, "inner")}, default="x", revision="v2")  # v2 has no "inner"
    with pytest.raises(CheckpointNotFoundError, match="subfolder 'inner'"):
        router.load("x")


def test_router_revision_revisions_register_and_load_take_precedence_in_that_order(hub_cache, expected):
    router = Router({"x": REPO, "y": REPO}, default="x", revision="v2", max_loaded=None)
    assert router.revision == "v2" and router.load_options("x") == {"revision": "v2"}
    assert which(router.load("x"), expected) == "v2"
    # revisions= overrides per checkpoint; a None entry inherits revision= (as Laya)
    router = Router({"x": REPO, "y": REPO}, default="x", revision="v2", revisions={"x": "main", "y": None})
    assert router.revisions == {"x": "main", "y": None} and router.load_options("y") == {"revision": "v2"}
    assert which(router.load("x"), expected) == "main" and which(router.load("y"), expected) == "v2"
    # register(..., revision=) beats both; load(..., revision=) beats everything for that build
    router = Router({"x": REPO}, default="x", revision="v2")
    router.register("z", REPO, revision=SHA_MAIN)
    assert which(router.load("z"), expected) == "main"
    assert which(router.load("x", revision="main"), expected) == "main"
    assert router.load("x", revision="main") is router.load("x")
    with pytest.raises(ValueError, match=r"'x' is resident from revision 'main'; unload\('x'\) first"):
        router.load("x", revision="v2")
    router.unload("x")
    assert which(router.load("x", revision="v2"), expected) == "v2"


def test_predictions_through_the_router_use_the_pinned_revision(hub_cache, sources):
    questions = {"q": {"type": "noul", "instructions": "The message is spam."}}
    with Router({"x": REPO}, default="x", revision="v2") as router:
        got = router.predict("hello there", questions, model="x")
    assert got["answers"] == Agent(sources["v2"]).predict("hello there", questions)["answers"]


class _Hub(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        _Hub.seen.append((self.path, self.headers.get("Authorization")))
        body = b'{"error": "Repository not found"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Code", "RepoNotFound")
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    _Hub.seen = []
    try:
        yield _Hub.seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def repo_requests(seen: list) -> list:
    """The requests about the repo itself (huggingface_hub may also ask the hub for other things)."""
    return [(path, auth) for path, auth in seen if path.startswith("/api/models/")]


def test_the_router_token_reaches_the_hub_request_and_load_can_override_it(fake_hub):
    router = Router({"x": "acme/private"}, default="x", token="hf_router_token", revision="v2")
    assert "hf_router_token" not in repr(router)
    with pytest.raises(Exception):  # noqa: B017 - the fake hub refuses every request
        router.load("x")
    assert repo_requests(fake_hub) == [("/api/models/acme/private/revision/v2", "Bearer hf_router_token")]
    fake_hub.clear()
    with pytest.raises(Exception):  # noqa: B017
        router.load("x", token="hf_call_token", revision="main")
    assert repo_requests(fake_hub) == [("/api/models/acme/private/revision/main", "Bearer hf_call_token")]
    assert router.load_options("x", token="hf_call_token")["token"] == "hf_call_token"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"token": 3}, TypeError, "token: expected a Hugging Face access token as a str"),
    ({"revision": 3}, TypeError, "revision: expected a hub revision"),
    ({"revisions": ["x"]}, TypeError, r"revisions: expected a dict \{checkpoint name: value\}"),
    ({"revisions": {"x": 7}}, TypeError, r"revisions\['x'\]: expected a hub revision"),
    ({"revisions": {"nope": "v2"}}, ValueError, "revisions: model: unknown checkpoint name 'nope'"),
    ({"sha256_digests": {"x": "abc"}}, TypeError, r"sha256_digests\['x'\]: expected a dict"),
    ({"sha256_digests": {"zzz": {}}}, ValueError, "sha256_digests: model: unknown checkpoint name 'zzz'"),
    ({"agent_kwargs": {"revision": "v2"}}, ValueError, "agent_kwargs: the Router sets 'revision' itself"),
    ({"agent_kwargs": {"token": "t", "model_id": "m"}}, ValueError, "sets 'model_id', 'token' itself"),
    ({"standalone_repos": True}, ValueError, "standalone_repos=True: no checkpoint of the public Laya"),
])
def test_bad_hub_options_are_refused_naming_the_field(sources, kwargs, error, message):
    with pytest.raises(error, match=message):
        Router({"x": sources["main"]}, default="x", **kwargs)


def test_register_load_and_agent_check_the_types_too(sources):
    router = Router({"x": sources["main"]}, default="x")
    with pytest.raises(TypeError, match="token: expected"):
        router.register("y", REPO, token=12)
    with pytest.raises(TypeError, match="revision: expected"):
        router.register("y", REPO, revision=["v2"])
    with pytest.raises(TypeError, match="revision: expected"):
        router.load("x", revision=1)
    with pytest.raises(TypeError, match="revision: expected"):
        Agent(REPO, revision=2)
    assert "y" not in router.registered


def test_sha256_digests_pin_each_checkpoint_merged_over_the_shared_pin(sources):
    digest = {which: hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
              for which, path in sources.items()}
    tokenizer = hashlib.sha256((sources["main"] / "tokenizer" / "tokenizer.json").read_bytes()).hexdigest()
    router = Router({"a": sources["main"], "b": sources["v2"]}, default="a",
                    agent_kwargs={"expected_sha256": {"tokenizer/tokenizer.json": tokenizer}},
                    sha256_digests={"a": {"model.safetensors": digest["main"]}, "b": None})
    assert router.load_options("a")["expected_sha256"] == {"tokenizer/tokenizer.json": tokenizer,
                                                           "model.safetensors": digest["main"]}
    router.load("a")
    router.load("b")  # None adds nothing of its own; the shared pin still applies (same tokenizer)
    wrong = Router({"a": sources["main"]}, default="a",
                   sha256_digests={"a": {"model.safetensors": digest["v2"]}})
    with pytest.raises(CheckpointError, match="SHA-256 is"):
        wrong.load("a")
    stale_shared = Router({"a": sources["main"]}, default="a",
                          agent_kwargs={"expected_sha256": {"tokenizer/tokenizer.json": "0" * 64}},
                          sha256_digests={"a": {"model.safetensors": digest["main"]}})
    with pytest.raises(CheckpointError, match="tokenizer.json: SHA-256 is"):  # merged, not replaced
        stale_shared.load("a")


def test_preload_loads_every_checkpoint_at_construction_raising_max_loaded(sources, tmp_path):
    third = make_tiny_checkpoint(tmp_path / "third", seed=2)
    loads = []

    class Loads(BaseHook):
        def on_load(self, ctx):
            loads.append(ctx.model)

    router = Router({"a": sources["main"], "b": sources["v2"], "c": third}, default="a", max_loaded=2,
                    preload=True, hooks=[Loads()])
    assert router.loaded == ("a", "b", "c") and loads == ["a", "b", "c"] and router.max_loaded == 3
    assert Router({"a": sources["main"]}, default="a").loaded == ()


def test_standalone_repos_point_laya_s_checkpoints_at_their_own_repos():
    router = Router.laya(standalone_repos=True)
    assert {name: router.registered[name].source for name in router.registered} == {
        "english": "convaiinnovations/laya", "multilingual": "convaiinnovations/laya-multilingual",
        "typed-decisions": "convaiinnovations/laya-typed-decisions"}
    assert router.resolve("ml") == "multilingual"  # aliases kept
    assert router.route("hola", model="ml")["repo"] == "convaiinnovations/laya-multilingual"
