"""RoutingView through its traits, on a real Router with two tiny checkpoints."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from jevlaya_lab.widgets import RoutingView

from .conftest import XSS


def test_typing_a_state_routes_it_with_reason_scripts_and_language(router: Any) -> None:
    view = RoutingView(router)
    assert view.decision is None
    view.state_text = "Здравствуйте, у меня не работает доставка"
    card = view.get_state()["decision"]
    assert card["model"] == "multilingual" and card["source"] == "detection"
    assert "Cyrillic" in card["reason"]
    assert card["scripts"] == [{"label": "Cyrillic", "p": 1.0}]
    assert [s["step"] for s in card["steps"]][-1] == "detection"
    view.state_text = "My order never arrived and I would like a refund for it please"
    assert view.decision["model"] == "english"


def test_alternatives_say_what_an_explicit_lang_or_model_would_change(router: Any) -> None:
    view = RoutingView(router, "Здравствуйте, у меня не работает доставка")
    alts = {a["given"]: a for a in view.alternatives}
    assert alts["lang='en'"]["model"] == "english" and alts["lang='en'"]["source"] == "lang"
    assert alts["lang='ru'"]["model"] == "multilingual"
    assert alts["model='english'"]["model"] == "english"
    assert "model='multilingual'" not in alts  # already the choice


def test_json_object_text_is_routed_as_a_dict_state(router: Any) -> None:
    view = RoutingView(router, {"message": "Hallo, mein Paket ist nicht angekommen, bitte helfen"})
    assert view.state_text.startswith("{")
    assert view.decision["model"] == "multilingual"


def test_batch_mode_routes_a_dataframe_column_and_counts_per_checkpoint(router: Any) -> None:
    df = pd.DataFrame({"text": ["Where is my parcel? It was due on Monday and it is late.",
                                "Где моя посылка?", "東京の天気はどうですか", XSS]})
    view = RoutingView(router, states=df["text"])
    state = view.get_state()
    assert [r["model"] for r in state["batch"][:3]] == ["english", "multilingual", "multilingual"]
    assert sum(state["counts"].values()) == 4
    assert state["batch"][3]["state"] == XSS  # text, shown as text by the front end
    assert not router.loaded  # routing never loads a checkpoint


def test_bad_state_is_shown_as_an_error_not_raised(router: Any) -> None:
    view = RoutingView(router, "fine")
    view.route(None)
    assert "route['state']" in view.error and "pass a str" in view.error
    view.state_text = "back to fine"
    assert view.error == "" and view.decision["model"]


def test_routing_view_needs_a_router() -> None:
    with pytest.raises(TypeError, match="router=str: expected a jevlaya_lab Router"):
        RoutingView("english")
