"""The official ``openai`` client talks to the local server: answers, streams and typed errors."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from jevlaya_lab.local import FaultProfile

from .conftest import USER


def client(server: Any, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=30)


def test_openai_client_lists_models_and_gets_a_completion(server: Any) -> None:
    api = client(server)
    assert [m.id for m in api.models.list()] == ["tiny-0", "tiny-1"]
    reply = api.chat.completions.create(model="tiny-1", messages=USER, max_tokens=7)
    assert reply.choices[0].message.content == server.model_for("tiny-1").generate(USER, max_tokens=7).text
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 7


def test_openai_client_streams_deltas_and_usage(server: Any) -> None:
    stream = client(server).chat.completions.create(model="tiny-0", messages=USER, stream=True,
                                                    stream_options={"include_usage": True})
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        else:
            usage = chunk.usage
    assert "".join(pieces) == server.model_for("tiny-0").generate(USER).text
    assert finish == "length"
    limit = server.model_for("tiny-0").default_max_tokens
    assert usage is not None and usage.completion_tokens == limit and usage.total_tokens > limit


def test_openai_client_honours_stop_and_seeded_sampling(server: Any) -> None:
    api = client(server)
    full = api.chat.completions.create(model="tiny-0", messages=USER).choices[0].message.content
    cut = api.chat.completions.create(model="tiny-0", messages=USER, stop=[full[4:6]])
    assert cut.choices[0].message.content == full[: full.index(full[4:6])]
    assert cut.choices[0].finish_reason == "stop"
    sampled = [api.chat.completions.create(model="tiny-0", messages=USER, temperature=1.0, top_p=0.9, seed=5)
               .choices[0].message.content for _ in range(2)]
    assert sampled[0] == sampled[1] == server.model_for("tiny-0").generate(USER, temperature=1.0, top_p=0.9, seed=5).text


def test_openai_client_raises_its_typed_errors(start_server: Any) -> None:
    server = start_server(faults={"tiny-1": FaultProfile(status=429, retry_after=3)}, api_key="k-123")
    with pytest.raises(openai.AuthenticationError):
        client(server, "wrong").chat.completions.create(model="tiny-0", messages=USER)
    api = client(server, "k-123")
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        api.chat.completions.create(model="missing", messages=USER)
    with pytest.raises(openai.RateLimitError) as info:
        api.chat.completions.create(model="tiny-1", messages=USER)
    assert info.value.response.headers["retry-after"] == "3"
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        api.chat.completions.create(model="tiny-0", messages=USER, max_tokens=0)


def test_openai_client_sees_a_cut_stream_as_an_error(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(cut_after=3)})
    pieces = []
    with pytest.raises(openai.APIError):
        for chunk in client(server).chat.completions.create(model="tiny-0", messages=USER, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    assert len(pieces) == 3
