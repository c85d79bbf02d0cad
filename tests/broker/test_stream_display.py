"""Streams display in Jupyter: ``_repr_mimebundle_`` on ``Stream`` and ``AsyncStream``.

Against the real local server: a stream shows its model, state (open / finished / failed /
cancelled), the text so far (escaped, clipped when long) and its lanes, in any state, without
starting the stream or waiting on the broker's loop.
"""

from __future__ import annotations

import asyncio
import html
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from jevlaya_lab.broker import LLMConfig, streaming
from jevlaya_lab.broker.errors import StreamInterruptedError, StreamReplacementError
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model
from jevlaya_lab.local.chat_model import ChatModel

MIME = "application/vnd.jevlaya+json"
PAYLOAD = "<script>alert(1)</script> & <b>bold</b>"


def shown(stream: Any) -> tuple[str, str, dict[str, Any]]:
    bundle = stream._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", MIME}
    assert bundle[MIME]["kind"] == "stream"
    return bundle["text/plain"], bundle["text/html"], bundle[MIME]["data"]


class _Scripted:
    """Logits processor: the model may only produce the next byte of ``text``."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(c)[0]) for c in text]
        self.vocab = len(tokenizer)

    def __call__(self, step: int, logits: torch.Tensor) -> torch.Tensor:
        allowed = torch.full((self.vocab,), float("-inf"))
        allowed[self.ids[min(step, len(self.ids) - 1)]] = 0.0
        return logits + allowed


@pytest.fixture(scope="module")
def xss_server() -> Iterator[Any]:
    """A second local server whose one model (a real tiny transformer) streams ``PAYLOAD``."""
    tiny = tiny_chat_model(seed=7)
    model = ChatModel(tiny.model, tiny.tokenizer, name="xss", default_max_tokens=len(PAYLOAD),
                      logits_processor=_Scripted(tiny.tokenizer, PAYLOAD))
    with serve([model]) as srv:
        yield srv


def test_display_before_iteration_does_not_start_the_stream(broker) -> None:
    b = broker("a")
    stream = b.stream("write")
    for _ in range(2):
        plain, page, data = shown(stream)
        assert data["state"] == "open" and not data["started"] and data["llm_name"] is None
        assert data["lanes"] == [] and data["text"] == ""
        assert "open, not started" in plain and "no model yet" in page and "(no text yet)" in page
    assert stream._stream._core.started_at is None and b.calls() == []  # no request was made
    parts = list(stream)
    assert parts and stream.text == "".join(parts)


def test_display_mid_stream_shows_the_text_so_far_and_the_running_lane(broker, server) -> None:
    server.set_fault("a", FaultProfile(token_delay=0.02))
    b = broker("a")
    with b.stream("write") as stream:
        parts = [next(stream) for _ in range(3)]
        plain, page, data = shown(stream)
        so_far = "".join(parts)
        assert data["state"] == "open" and data["deltas"] == 3 and data["text"] == so_far
        assert data["llm_name"] == "a" and data["call_id"] == stream.call_id
        assert [(la["llm_name"], la["state"], la["shown"]) for la in data["lanes"]] == [
            ("a", "running", True)]
        assert "open, 3 delta(s) read" in plain and repr(so_far) in plain
        assert "lanes: a running (shown)" in plain
        assert html.escape(so_far) in page and "<b>a</b>" in page
        rest = list(stream)
    assert rest, "displaying must not consume deltas"


def test_display_of_a_finished_stream_names_the_complete_answer(broker) -> None:
    b = broker("a")
    with b.stream("write") as stream:
        parts = list(stream)
    plain, page, data = shown(stream)
    assert data["state"] == "finished" and data["deltas"] == len(parts)
    assert data["text"] == "".join(parts) == stream.text
    assert data["lanes"] == [{"llm_name": "a", "state": "complete", "shown": True,
                              "winner": True, "first_token_ms": data["lanes"][0]["first_token_ms"],
                              "chars": len(stream.text)}]
    assert data["lanes"][0]["first_token_ms"] > 0
    assert plain.startswith("<Stream a: finished after") and "finished after" in page


def test_display_of_a_stream_closed_mid_answer_says_cancelled(broker, server) -> None:
    server.set_fault("a", FaultProfile(token_delay=0.05))
    b = broker("a")
    stream = b.stream("write")
    parts = [next(stream), next(stream)]
    stream.close()
    plain, _, data = shown(stream)
    assert data["state"] == "cancelled" and data["text"] == "".join(parts)
    assert [(la["llm_name"], la["state"]) for la in data["lanes"]] == [("a", "cancelled")]
    assert "cancelled after 2 delta(s)" in plain


def test_display_of_a_stream_closed_before_reading_says_cancelled(broker) -> None:
    stream = broker("a").stream("write")
    stream.close()
    _, _, data = shown(stream)
    assert data["state"] == "cancelled" and data["lanes"] == []


def test_display_of_a_broken_answer_says_failed_and_keeps_the_parts(broker, server) -> None:
    server.set_fault("a", FaultProfile(cut_after=4))
    b = broker("a")
    stream = b.stream("write")
    parts = []
    with pytest.raises(StreamInterruptedError):
        for delta in stream:
            parts.append(delta)
    _, _, data = shown(stream)
    assert data["state"] == "failed" and data["text"] == "".join(parts)
    # the lane shows the status its journal row got (a cut connection: unavailable)
    assert [(la["llm_name"], la["state"]) for la in data["lanes"]] == [
        ("a", b.calls()[0]["status"])]


def test_display_of_a_stream_no_model_could_start_says_failed(broker, dead_url) -> None:
    b = broker(models=[LLMConfig(name="dead", base_url=dead_url, model="m")])
    stream = b.stream("write")
    with pytest.raises(Exception):  # noqa: B017 - which error is the broker's business
        list(stream)
    plain, _, data = shown(stream)
    assert data["state"] == "failed" and data["llm_name"] is None
    assert [(la["llm_name"], la["state"]) for la in data["lanes"]] == [("dead", "unavailable")]
    assert "lanes: dead unavailable" in plain


def test_display_after_the_broker_closed_does_not_raise(broker, server) -> None:
    server.set_fault("a", FaultProfile(token_delay=0.05))
    b = broker("a")
    stream = b.stream("write")
    next(stream)
    b.close()
    _, _, data = shown(stream)
    assert data["state"] == "cancelled"


def test_display_escapes_script_in_streamed_text(broker, xss_server) -> None:
    b = broker(models=[LLMConfig(name="xss", base_url=xss_server.base_url, model="xss")])
    with b.stream("write") as stream:
        first = [next(stream) for _ in range(3)]
        _, page, _ = shown(stream)
        assert "".join(first) == PAYLOAD[:3] and "&lt;sc" in page and "<sc" not in page
        list(stream)
    plain, page, data = shown(stream)
    assert data["text"] == PAYLOAD
    assert "<script" not in page and "<b>bold" not in page
    assert html.escape(PAYLOAD) in page
    assert repr(PAYLOAD) in plain  # plain text is text: shown as it is


def test_long_text_is_clipped_to_its_start_and_end(broker, monkeypatch) -> None:
    b = broker("a")
    with b.stream("write", max_tokens=400) as stream:
        text = "".join(stream)
    assert len(text) == 400
    plain, page, data = shown(stream)
    assert data["text"] == text  # the JSON payload keeps everything
    head = text[:streaming.DISPLAY_TEXT_CHARS - streaming.DISPLAY_TEXT_CHARS // 4]
    assert repr(head) in plain and "... [100 characters] ..." in plain
    assert html.escape(text) in page  # 400 characters fit the HTML view
    monkeypatch.setattr(streaming, "DISPLAY_HTML_CHARS", 100)
    _, page, _ = shown(stream)
    assert html.escape(text) not in page and "300 characters left out" in page
    assert html.escape(text[:75]) in page and html.escape(text[-25:]) in page


def test_display_does_not_wait_for_a_pull_in_progress(broker, server) -> None:
    """A sync stream shows from another thread while its reader waits on the broker's loop."""
    server.set_fault("a", FaultProfile(token_delay=1.0))
    b = broker("a")
    stream = b.stream("write")
    parts = [next(stream)]
    pulling = threading.Event()

    def read_one() -> None:
        pulling.set()
        parts.append(next(stream))

    reader = threading.Thread(target=read_one)
    reader.start()
    pulling.wait(5)
    time.sleep(0.05)  # the reader is now inside next(), waiting for the slow second delta
    _, _, data = shown(stream)
    still_pulling = reader.is_alive()
    reader.join(10)
    stream.close()
    assert still_pulling and data["text"] == parts[0] and data["state"] == "open"


def test_async_stream_display_lists_every_lane_of_a_race(abroker) -> None:
    async def main() -> None:
        async with abroker("a", "b") as broker:
            stream = broker.stream("write", fastest_of=2, stream_selection_window=0)
            plain, _, data = shown(stream)
            assert data["state"] == "open" and plain.startswith("<AsyncStream ?: open, not")
            first = await stream.__anext__()
            _, page, data = shown(stream)
            assert sorted(la["llm_name"] for la in data["lanes"]) == ["a", "b"]
            assert sum(la["shown"] for la in data["lanes"]) == 1
            assert data["text"].startswith(first) and "<table" in page
            try:
                async for _ in stream:
                    pass
            except StreamReplacementError:
                pass
            _, _, data = shown(stream)
            assert data["state"] == "finished" and data["text"] == stream.text
            assert [la["winner"] for la in data["lanes"]].count(True) == 1
            winner = next(la for la in data["lanes"] if la["winner"])
            assert winner["llm_name"] == stream.llm_name and winner["state"] == "complete"
            other = await stream.another()  # waits for the other lane to complete
            _, _, data = shown(stream)
            assert other is not None and data["text"] == stream.text  # still the winner's
            assert [la["state"] for la in data["lanes"]] == ["complete", "complete"]
            await stream.aclose()
            _, _, data = shown(stream)
            assert data["state"] == "finished"  # closing after the end cancels nothing
    asyncio.run(main())
