"""A provider that echoes the API key near the point where error text is clipped leaks no part of
it: redaction comes before every clip.

The key has no well-known prefix, so only knowing the key (not its shape) can catch it; the echo
sits just before, across and just after each clip point (120 characters of a garbage body, 300
of an error detail). "No part" means no run of 6 or more consecutive characters of the key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.errors import LLMRequestError
from jevlaya_lab.secrets import MIN_SECRET_RUN
from jevlaya_lab.secrets import clip_scrubbed as clip_redacted
from jevlaya_lab.secrets import scrub_secrets as redact_secrets
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model

KEY = "Prov1derToken9XqZ7wLmK2vB8nR4tY6u"


def key_runs(text: str, key: str = KEY) -> list[str]:
    """Every piece of ``key`` of MIN_SECRET_RUN characters that occurs in ``text``."""
    return [key[i:i + MIN_SECRET_RUN] for i in range(len(key) - MIN_SECRET_RUN + 1)
            if key[i:i + MIN_SECRET_RUN] in text]


@pytest.fixture(scope="module")
def echoing() -> Iterator[Any]:
    with serve({"p": tiny_chat_model(3, name="p")}, api_key=KEY) as srv:
        yield srv


PROFILES = [FaultProfile(garbage=True, echo_key=at) for at in (100, 110, 115, 119, 125)] + \
           [FaultProfile(status=400, echo_key=at) for at in (280, 290, 299, 305)] + \
           [FaultProfile(status=500, echo_key=at) for at in (0, 295)]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("profile", PROFILES, ids=str)
def test_no_part_of_an_echoed_key_reaches_errors_rows_files_or_logs(
        echoing: Any, tmp_path: Path, caplog: Any, profile: FaultProfile, stream: bool) -> None:
    caplog.set_level(logging.DEBUG)
    echoing.set_fault("p", profile)
    db = tmp_path / "j.db"
    model = LLMConfig(name="p", base_url=echoing.base_url, model="p", api_key_ref="P_KEY")
    with Broker(db, models=[model], secrets={"P_KEY": KEY}, catalog=[]) as broker:
        with pytest.raises(LLMRequestError) as info:
            if stream:
                "".join(broker.stream("hi", wait=1))
            else:
                broker.ask("hi", wait=1)
        rows = broker.calls()
        texts = [str(info.value), repr(info.value), repr(getattr(info.value, "errors", ())),
                 str(rows), str(broker.snapshot())]
    assert rows and rows[0]["error_detail"], rows  # the provider's text was journaled, redacted
    limit = 120 if profile.garbage else 300
    if profile.echo_key < limit:  # the echo lies inside a clip: its redaction mark shows somewhere
        assert "*" in "".join(texts), texts
    files = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("j.db"))
    texts += [files.decode("latin-1"), caplog.text]
    for text in texts:
        assert key_runs(text) == [], text[:400]


def test_the_fault_really_echoes_the_key(echoing: Any) -> None:
    import httpx

    echoing.set_fault("p", FaultProfile(status=400, echo_key=10))
    response = httpx.post(f"{echoing.base_url}/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                          json={"model": "p", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert response.json()["error"]["message"].startswith(f"simulated {KEY} was used")
    echoing.set_fault("p", None)


def test_redaction_before_the_clip_catches_a_key_that_the_clip_would_cut() -> None:
    for at in range(100, 121):
        text = "x" * at + KEY + " was refused"
        assert clip_redacted(text, 120, KEY) == (text[:at] + "*** was refused")[:120]  # not one key character


def test_partial_and_truncated_echoes_are_redacted_too() -> None:
    text = f"key {KEY[:12]}... was refused; tail ...{KEY[-8:]} and {KEY[7:20]}"
    clean = redact_secrets(text, KEY)
    assert key_runs(clean) == [] and clean == "key ***... was refused; tail ...*** and ***"
    assert redact_secrets("short 12345 stays", "12345") == "short *** stays"
    assert redact_secrets("nothing here", KEY) == "nothing here"
