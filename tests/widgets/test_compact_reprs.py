"""Lists of results and broker.snapshot() show as a compact table (a row per state / model) with a
one-line text form in a notebook, instead of a long pretty-printed dump; to code they stay a
plain list and a plain dict."""

from __future__ import annotations

import json
import re

from jevlaya_lab import Agent, Broker
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.display import MIME

QUESTIONS = {"team": {"type": "choice", "instructions": "Who handles this?", "criteria": ["billing", "technical"]},
             "urgent": {"type": "noul", "instructions": "It is urgent."}}


def test_predict_batch_shows_one_row_per_state(tmp_path):
    agent = Agent(make_tiny_checkpoint(tmp_path / "tiny-en", seed=0))
    states = ["I was charged twice", "The app crashes", "Hello", "Where is <b>it</b>?"]
    results = agent.predict_batch(states, QUESTIONS, min_confidence=0.9)
    assert isinstance(results, list) and results == [dict(r) for r in results]
    json.dumps(results)
    bundle = results._repr_mimebundle_()
    text = bundle["text/plain"]
    assert "\n" not in text and len(text) < 200 and text.startswith("<4 result(s) from tiny-en")
    assert "abstained" in text
    html = bundle["text/html"]
    assert html.count("<tr>") == 1 + len(states)  # header + one per state
    assert "<th style" in html and ">team<" in html and ">urgent<" in html
    assert "<b>it</b>" not in html  # nothing of a state is rendered as markup
    assert len(bundle[MIME]["data"]) == len(states)


def test_snapshot_shows_one_row_per_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    catalog = [{"name": f"prov/m{i}", "base_url": "https://api.example.invalid/v1", "model": f"m{i}",
                "api_key_ref": "JV_NO_SUCH_KEY"} for i in range(8)] + [
        {"name": "local/tiny", "base_url": "local://tiny", "model": "tiny"}]
    monkeypatch.delenv("JV_NO_SUCH_KEY", raising=False)
    with Broker(tmp_path / "j.db", catalog=catalog) as broker:
        snap = broker.snapshot()
        bundle = snap._repr_mimebundle_()
    assert isinstance(snap, dict) and len(snap) == 9
    text = bundle["text/plain"]
    assert "\n" not in text and text == ("<PoolSnapshot: 1 of 9 models usable (local/tiny); "
                                         "journal: 0 written, 0 waiting, 0 failed>")
    html = bundle["text/html"]
    assert html.count("<tr>") == 1 + 9
    assert re.search(r"<td[^>]*>prov/m0</td><td[^>]*><span[^>]*>no key</span></td><td[^>]*>no</td>", html)
    json.dumps(bundle[MIME])
