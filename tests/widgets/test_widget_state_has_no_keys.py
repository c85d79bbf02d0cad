"""Keys never appear in widget state or reprs: a keyed local server, a right and a wrong key."""

from __future__ import annotations

import json
from pathlib import Path

from jevlaya_lab import analysis
from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.local import serve, tiny_chat_model
from jevlaya_lab.widgets import JournalDashboard, StreamView

RIGHT = "sk-right-0123456789abcdef"
WRONG = "sk-wrong-0123456789abcdef"


def test_stream_view_and_dashboard_state_never_hold_the_key(tmp_path: Path) -> None:
    with serve({"k": tiny_chat_model(seed=3, name="k")}, api_key=RIGHT) as locked:
        entry = LLMConfig(name="k", base_url=locked.base_url, model="k", api_key_ref="TEST_KEY")
        seen = []
        for key in (RIGHT, WRONG):
            with Broker(tmp_path / f"{key[:8]}.db", models=[entry], secrets={"TEST_KEY": key},
                        catalog=[]) as b:
                view = StreamView(b, "hello", max_tokens=4)
                assert view.wait(30)
                dash = JournalDashboard(b)
                seen.append(json.dumps(view.get_state(), default=str) + repr(view) + repr(dash)
                            + dash.readout.value
                            + json.dumps(analysis.summary(dash.journal)))
                assert view.status == ("done" if key == RIGHT else "error")
                view.close()
    for text in seen:
        assert RIGHT not in text and WRONG not in text
    assert "AuthError" in seen[1] or "401" in seen[1]
