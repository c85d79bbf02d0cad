"""Property: any request gets a completion or an OpenAI-style 4xx naming the field, never a 500,
an HTML page or a dropped connection (JSON of any shape and depth, raw bytes, odd methods)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jevlaya_lab.local import Server, serve, tiny_chat_model

JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-3, 3) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "", "<script>", "USER"]) | JSON,
                                 "content": st.text(max_size=20) | JSON})
GOOD_MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]),
                                                "content": st.text(max_size=20)}), min_size=1, max_size=3)


GOOD = {
    "model": st.just("tiny-0"),
    "messages": GOOD_MESSAGES,
}
GOOD_OPTIONAL = {
    "max_tokens": st.integers(1, 4),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "seed": st.integers(-3, 3),
    "stop": st.lists(st.text(min_size=1, max_size=3), max_size=4),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "n": st.just(1),
}
FIELDS = {**GOOD, **GOOD_OPTIONAL}
BAD = {
    "model": st.sampled_from(["nope", "", None, 5, ["tiny-0"]]),
    "messages": st.lists(MESSAGE, max_size=3) | JSON,
    "max_tokens": st.integers(-2, 0) | st.integers(4096, 2**70) | JSON,
    "temperature": st.floats(-1, 3) | JSON,
    "top_p": st.floats(-0.5, 1.5) | JSON,
    "seed": st.integers(2**63, 2**70) | st.integers(-(2**70), -(2**63) - 1) | JSON,
    "stream": JSON,
    "stop": JSON,
    "n": st.integers(0, 2) | JSON,
}


@st.composite
def bodies(draw: st.DrawFn) -> Any:
    """A valid request with up to two fields replaced by odd values, or any JSON at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    body = draw(st.fixed_dictionaries(GOOD, optional=GOOD_OPTIONAL))
    for field in draw(st.lists(st.sampled_from(sorted(BAD)), max_size=2, unique=True)):
        body[field] = draw(BAD[field])
    return body


BODY = bodies()


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[Server]:
    with serve([tiny_chat_model(0)]) as server:
        yield server


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODY)
def test_any_request_body_gets_an_answer_or_a_documented_4xx(fuzz_server: Server, body: Any) -> None:
    response = httpx.post(f"{fuzz_server.base_url}/chat/completions", json=body, timeout=30)
    event(f"HTTP {response.status_code}")
    assert response.status_code in (200, 400, 404), response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] in FIELDS or error["param"] is None or error["param"].startswith("messages[")
        assert "=" in error["message"] or "does not exist" in error["message"] or "JSON object" in error["message"]
    elif body.get("stream") is True:
        assert response.text.rstrip().endswith("data: [DONE]")
    else:
        assert response.json()["object"] == "chat.completion"


def nested(depth: int, leaf: str) -> str:
    return "".join("[" if i % 2 else '{"k":' for i in range(depth)) + leaf + "".join(
        "]" if i % 2 else "}" for i in reversed(range(depth)))


def assert_json_error(response: httpx.Response) -> None:
    assert response.headers["content-type"] == "application/json", response.text[:200]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | st.builds(nested, st.integers(1, 5000), st.sampled_from(["1", '"x"', "[]", "{"])))
def test_any_raw_body_gets_a_json_answer_never_a_dropped_connection(fuzz_server: Server, raw: Any) -> None:
    body = raw if isinstance(raw, bytes) else raw.encode()
    response = httpx.post(f"{fuzz_server.base_url}/chat/completions", content=body, timeout=30)
    event(f"HTTP {response.status_code}")
    assert response.status_code in (400, 404), response.text[:200]
    assert_json_error(response)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "X"]),
       path=st.sampled_from(["/v1/models", "/v1/chat/completions", "/", "/v1/models/tiny-0", "/x?y=<b>"]))
def test_any_method_and_path_gets_a_json_answer(fuzz_server: Server, method: str, path: str) -> None:
    response = httpx.request(method, f"http://127.0.0.1:{fuzz_server.port}{path}", json={}, timeout=30)
    event(f"{method} HTTP {response.status_code}")
    if response.status_code != 200:
        assert 400 <= response.status_code < 600
        assert_json_error(response)
