"""One truth about what the pool can call: a catalog model without its key is not in the pool, its
phase says ``no key``, ``count()`` leaves it out and ``usable`` agrees with ``in_pool``/``phase``."""

from __future__ import annotations

import pytest

from jevlaya_lab import Broker, NoLLMAvailableError

CATALOG = [
    {"name": "prov/a", "base_url": "https://api.example.invalid/v1", "model": "a", "api_key_ref": "JV_TEST_KEY_A"},
    {"name": "prov/b", "base_url": "https://api.example.invalid/v1", "model": "b", "api_key_ref": "JV_TEST_KEY_B"},
    {"name": "local/tiny", "base_url": "local://tiny", "model": "tiny"},
]


def agree(broker: Broker) -> dict:
    snap = broker.snapshot()
    in_pool = {name for name, row in snap.items() if row["in_pool"]}
    assert broker.count() == len(in_pool)
    assert set(snap.usable) <= in_pool
    for name, row in snap.items():
        assert (name in snap.usable) == (row["in_pool"] and row["phase"] == "available"), (name, row)
    return snap


def test_keyless_catalog_models_are_not_counted_or_shown_as_available(tmp_path, monkeypatch):
    monkeypatch.delenv("JV_TEST_KEY_A", raising=False)
    monkeypatch.delenv("JV_TEST_KEY_B", raising=False)
    monkeypatch.chdir(tmp_path)
    with Broker(tmp_path / "j.db", catalog=CATALOG) as broker:
        snap = agree(broker)
        assert snap.usable == ["local/tiny"] and broker.count() == 1
        assert snap["prov/a"]["phase"] == "no key" and not snap["prov/a"]["in_pool"]
        assert snap["prov/a"]["key"] == "missing"
    with Broker(tmp_path / "k.db", catalog=CATALOG, secrets={"JV_TEST_KEY_A": "sk-abcdef123456"}) as broker:
        snap = agree(broker)  # a key resolves: that model joins, the embedded fallback leaves
        assert snap.usable == ["prov/a"] and snap["prov/a"]["phase"] == "available"
        assert snap["prov/b"]["phase"] == "no key" and not snap["local/tiny"]["in_pool"]


def test_without_keys_or_local_models_the_error_names_the_keys(tmp_path, monkeypatch):
    monkeypatch.delenv("JV_TEST_KEY_A", raising=False)
    monkeypatch.delenv("JV_TEST_KEY_B", raising=False)
    monkeypatch.chdir(tmp_path)
    with Broker(tmp_path / "j.db", catalog=CATALOG, local=False) as broker:
        assert broker.count() == 0
        with pytest.raises(NoLLMAvailableError, match="JV_TEST_KEY_A, JV_TEST_KEY_B") as info:
            broker.ask("hi")
        assert info.value.reason == "no_keys"
