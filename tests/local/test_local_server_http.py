"""The local server at the HTTP level: endpoints, errors, streaming, every fault, concurrency, stop."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from jevlaya_lab.local import FaultProfile, UnknownModelError, serve, tiny_chat_model

from .conftest import USER, chat_body


def post(server: Any, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30, **kwargs)


def sse_events(response: httpx.Response) -> list[Any]:
    """Decoded ``data:`` payloads of an SSE response (``[DONE]`` kept as a string)."""
    events = []
    for line in response.text.split("\n"):
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream_deltas(server: Any, body: dict[str, Any]) -> tuple[list[str], BaseException | None]:
    """Read a streaming answer line by line; return the content deltas and the error that ended it."""
    deltas: list[str] = []
    try:
        with httpx.stream("POST", f"{server.base_url}/chat/completions", json={**body, "stream": True},
                          timeout=30) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[6:])["choices"]
                    if choices and choices[0]["delta"].get("content"):
                        deltas.append(choices[0]["delta"]["content"])
    except httpx.TransportError as exc:
        return deltas, exc
    return deltas, None


def test_base_url_binds_loopback_and_lists_models(server: Any) -> None:
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    listing = httpx.get(f"{server.base_url}/models").json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["tiny-0", "tiny-1"]
    assert httpx.get(f"{server.base_url}/models/tiny-1").json()["id"] == "tiny-1"


def test_non_streaming_completion_has_the_openai_shape(server: Any) -> None:
    body = post(server, chat_body(max_tokens=5)).json()
    expected = server.model_for("tiny-0").generate(USER, max_tokens=5)  # the same model, in-process
    assert body["object"] == "chat.completion"
    assert body["model"] == "tiny-0"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected.text, "refusal": None}
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": expected.prompt_tokens, "completion_tokens": 5, "total_tokens": expected.prompt_tokens + 5}


def test_the_model_field_picks_the_served_model(server: Any) -> None:
    answers = {name: post(server, chat_body(name)).json()["choices"][0]["message"]["content"] for name in ("tiny-0", "tiny-1")}
    assert answers["tiny-0"] == server.model_for("tiny-0").generate(USER).text
    assert answers["tiny-1"] == server.model_for("tiny-1").generate(USER).text


def test_streaming_sends_role_content_finish_usage_and_done(server: Any) -> None:
    response = post(server, chat_body(stream=True, stream_options={"include_usage": True}, max_tokens=6))
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert len(content) == 6
    assert "".join(content) == server.model_for("tiny-0").generate(USER, max_tokens=6).text
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6


def test_streaming_without_include_usage_has_no_usage_chunk(server: Any) -> None:
    events = sse_events(post(server, chat_body(stream=True, max_tokens=2)))
    assert all(e == "[DONE]" or e["choices"] for e in events)


def test_connections_are_kept_alive_across_streams(server: Any) -> None:
    with httpx.Client(timeout=30) as client:
        for _ in range(3):
            client.post(f"{server.base_url}/chat/completions", json=chat_body(stream=True)).raise_for_status()
            client.post(f"{server.base_url}/chat/completions", json=chat_body()).raise_for_status()
    assert server.request_count("tiny-0") == 6


@pytest.mark.no_model
def test_unknown_model_is_an_openai_style_404(server: Any) -> None:
    response = post(server, chat_body("gpt-9"))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "gpt-9" in error["message"] and "tiny-0" in error["message"]
    with pytest.raises(UnknownModelError, match="gpt-9"):
        server.request_count("gpt-9")


@pytest.mark.parametrize(("extra", "param"), [
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"messages": []}, "messages"),
    ({"n": 2}, "n"),
    ({"stream": "yes"}, "stream"),
])
def test_bad_fields_are_a_400_naming_the_param(server: Any, extra: dict, param: str) -> None:
    response = post(server, {**chat_body(), **extra})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(f"{param}=")


@pytest.mark.no_model
def test_invalid_json_and_unknown_routes(server: Any) -> None:
    response = httpx.post(f"{server.base_url}/chat/completions", content=b"{not json", timeout=10)
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
    assert httpx.get(f"{server.base_url}/nothing").status_code == 404
    assert httpx.post(f"{server.base_url}/completions", json={}).status_code == 404


def test_api_key_is_checked_when_set(start_server: Any) -> None:
    server = start_server(api_key="sekret")
    assert post(server, chat_body()).status_code == 401
    assert post(server, chat_body(), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{server.base_url}/models").status_code == 401
    response = post(server, chat_body(), headers={"Authorization": "Bearer sekret"})
    assert response.status_code == 200
    assert "sekret" not in repr(server)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_fault_status_is_an_openai_style_error(start_server: Any, status: int) -> None:
    server = start_server(faults={"tiny-1": FaultProfile(status=status)})
    response = post(server, chat_body("tiny-1"))
    assert response.status_code == status
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert "retry-after" not in response.headers
    assert post(server, chat_body("tiny-0")).status_code == 200  # faults are per model


def test_fault_429_sends_retry_after(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(status=429, retry_after=7)})
    response = post(server, chat_body())
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["type"] == "rate_limit_error"
    streamed = post(server, chat_body(stream=True))  # a streaming request gets the same error, not SSE
    assert streamed.status_code == 429 and streamed.headers["retry-after"] == "7"


def test_fault_garbage_is_a_200_that_is_not_a_completion(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(garbage=True)})
    response = post(server, chat_body())
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()
    streamed = post(server, chat_body(stream=True))
    assert streamed.status_code == 200
    data = [line for line in streamed.text.split("\n") if line.startswith("data: ")]
    assert data and "[DONE]" not in streamed.text
    with pytest.raises(json.JSONDecodeError):
        json.loads(data[0][6:])


def test_fault_empty_is_a_200_completion_with_empty_content(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(empty=True)})
    body = post(server, chat_body()).json()
    assert body["choices"][0]["message"]["content"] == ""
    assert body["usage"]["completion_tokens"] == 0 and body["usage"]["prompt_tokens"] > 0
    events = sse_events(post(server, chat_body(stream=True, stream_options={"include_usage": True})))
    assert events[-1] == "[DONE]"
    assert not any(e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content") for e in events)


@pytest.mark.parametrize("cut_after", [0, 1, 4])
def test_fault_cut_after_closes_the_stream_after_n_deltas(start_server: Any, cut_after: int) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(cut_after=cut_after)})
    deltas, error = stream_deltas(server, chat_body())
    assert len(deltas) == cut_after
    assert isinstance(error, httpx.RemoteProtocolError)  # the body ended without its last chunk
    assert "".join(deltas) == server.model_for("tiny-0").generate(USER).text[: len("".join(deltas))]


def test_fault_cut_after_drops_a_non_streaming_request(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(cut_after=2)})
    with pytest.raises(httpx.RemoteProtocolError):
        post(server, chat_body())
    server.set_fault("tiny-0", None)
    assert post(server, chat_body()).status_code == 200  # the server itself is fine afterwards


def test_fault_latency_delays_the_whole_answer(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(latency=0.3)})
    started = time.perf_counter()
    assert post(server, chat_body()).status_code == 200
    assert time.perf_counter() - started >= 0.3


def test_fault_first_token_and_token_delays_pace_the_stream(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(first_token_delay=0.3, token_delay=0.05)})
    arrivals = []
    started = time.perf_counter()
    with httpx.stream("POST", f"{server.base_url}/chat/completions",
                      json=chat_body(stream=True, max_tokens=4), timeout=30) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                arrivals.append(time.perf_counter() - started)
    assert len(arrivals) == 4
    assert arrivals[0] >= 0.3
    assert all(later - earlier >= 0.04 for earlier, later in zip(arrivals, arrivals[1:]))


def test_fault_every_n_hits_calls_n_and_2n_only(start_server: Any) -> None:
    server = start_server(faults={"tiny-0": FaultProfile(status=503, every=2)})
    statuses = [post(server, chat_body()).status_code for _ in range(5)]
    assert statuses == [200, 503, 200, 503, 200]
    assert server.request_count("tiny-0") == 5


def test_fault_probability_is_reproducible_with_its_seed(start_server: Any) -> None:
    def statuses() -> list[int]:
        server = start_server(faults={"tiny-0": FaultProfile(status=500, probability=0.5, seed=11)})
        return [post(server, chat_body(max_tokens=1)).status_code for _ in range(12)]

    first = statuses()
    assert first == statuses()
    assert {200, 500} == set(first)


def test_set_fault_at_run_time_and_request_count(server: Any) -> None:
    assert server.fault("tiny-0") is None
    server.set_fault("tiny-0", FaultProfile(status=429, retry_after=1))
    assert post(server, chat_body()).status_code == 429
    assert server.fault("tiny-0") == FaultProfile(status=429, retry_after=1)
    server.set_fault("tiny-0", None)
    assert post(server, chat_body()).status_code == 200
    assert (server.request_count("tiny-0"), server.request_count("tiny-1")) == (2, 0)
    with pytest.raises(UnknownModelError):
        server.set_fault("nope", FaultProfile())


def test_concurrent_streaming_clients_all_get_complete_answers(start_server: Any) -> None:
    server = start_server(faults={"tiny-1": FaultProfile(token_delay=0.01)})
    expected = {name: server.model_for(name).generate(USER).text for name in ("tiny-0", "tiny-1")}
    results: list[tuple[str, str, BaseException | None]] = []

    def client(name: str) -> None:
        deltas, error = stream_deltas(server, chat_body(name))
        results.append((name, "".join(deltas), error))

    threads = [threading.Thread(target=client, args=(f"tiny-{i % 2}",)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 12
    for name, text, error in results:
        assert error is None and text == expected[name]
    assert server.request_count("tiny-0") == server.request_count("tiny-1") == 6


@pytest.mark.transformers_only  # holds ChatModel's lock; llama.cpp decodes concurrent answers together
def test_requests_for_one_model_queue_first_come_first_served(start_server: Any) -> None:
    # each answer takes >= 0.1 s, so answers finish far apart and clients see them in queue order
    server = start_server(faults={"tiny-0": FaultProfile(token_delay=0.1)})
    model = server.model_for("tiny-0")
    finished: list[int] = []

    def client(i: int) -> None:
        post(server, chat_body(max_tokens=2)).raise_for_status()
        finished.append(i)

    threads = []
    model._lock.acquire()  # keep the model busy so that every request has to queue
    try:
        for i in range(5):
            thread = threading.Thread(target=client, args=(i,))
            thread.start()
            threads.append(thread)
            deadline = time.monotonic() + 10
            while model.waiting < i + 1 and time.monotonic() < deadline:
                time.sleep(0.002)
            assert model.waiting == i + 1
    finally:
        model._lock.release()
    for thread in threads:
        thread.join(30)
    assert finished == [0, 1, 2, 3, 4]


def test_stop_frees_the_port_and_is_idempotent() -> None:
    server = serve([tiny_chat_model(0)])
    port = server.port
    with httpx.Client(timeout=10) as client:  # an idle keep-alive connection must not block stop
        client.get(f"{server.base_url}/models").raise_for_status()
        server.stop()
        server.stop()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)


def test_stop_aborts_a_stream_in_progress() -> None:
    server = serve([tiny_chat_model(0)], faults={"tiny-0": FaultProfile(token_delay=0.5)})
    outcome: list[tuple[list[str], BaseException | None]] = []
    reader = threading.Thread(target=lambda: outcome.append(stream_deltas(server, chat_body(max_tokens=50))))
    reader.start()
    time.sleep(0.3)
    started = time.perf_counter()
    server.stop()
    reader.join(10)
    assert time.perf_counter() - started < 5
    deltas, error = outcome[0]
    assert len(deltas) < 50 and isinstance(error, httpx.TransportError)


def test_context_manager_stops_and_default_host_is_loopback() -> None:
    with serve({"a": tiny_chat_model(0), "b": tiny_chat_model(0)}) as server:
        assert server.host == "127.0.0.1"
        assert server.model_names == ["a", "b"]
        assert post(server, chat_body("b")).status_code == 200
    assert server.stopping.is_set()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", server.port))


def test_serve_rejects_bad_arguments_with_the_field() -> None:
    from jevlaya_lab.local import ChatRequestError

    with pytest.raises(ChatRequestError, match="models="):
        serve([])
    with pytest.raises(ChatRequestError, match="two models share this name"):
        serve([tiny_chat_model(0), tiny_chat_model(0)])
    with pytest.raises(ChatRequestError, match="port="):
        serve([tiny_chat_model(0)], port=70000)
    with pytest.raises(UnknownModelError, match="'other'"):
        serve([tiny_chat_model(0)], faults={"other": FaultProfile()})
    with serve([tiny_chat_model(0)]) as busy, pytest.raises(OSError, match="choose another port"):
        serve([tiny_chat_model(0)], port=busy.port)


def test_a_prompt_too_long_for_the_model_is_a_400_even_when_streaming(server: Any) -> None:
    for stream in (False, True):
        # " x" is one token for a byte-level BPE and a character one alike: 5,000 overflow either context
        response = post(server, {"model": "tiny-0", "messages": [{"role": "user", "content": " x" * 5000}],
                                 "stream": stream})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "messages"
        assert re.search(r"at most \d+ prompt tokens", response.json()["error"]["message"])


@pytest.mark.transformers_only  # a torch model whose forward fails
def test_a_model_failure_is_a_500_or_an_error_event_mid_stream(start_server: Any) -> None:
    from jevlaya_lab.local import ChatModel

    tiny = tiny_chat_model(0)

    def explode(step: int, logits: Any) -> Any:
        if step == 2:
            raise RuntimeError("weights on fire")
        return logits

    server = start_server([ChatModel(tiny.model, tiny.tokenizer, name="broken", logits_processor=explode)])
    response = post(server, chat_body("broken"))
    assert response.status_code == 500
    assert "weights on fire" in response.json()["error"]["message"]
    events = sse_events(post(server, chat_body("broken", stream=True)))
    assert "weights on fire" in events[-1]["error"]["message"]
    assert "[DONE]" not in events and events[0]["choices"][0]["delta"]["role"] == "assistant"


def test_a_client_that_disconnects_stops_its_generation(start_server: Any) -> None:
    # the abandoned answer would hold the model for 200 x 0.05 s = 10 s if it kept generating
    server = start_server(faults={"tiny-0": FaultProfile(token_delay=0.05)})
    with httpx.stream("POST", f"{server.base_url}/chat/completions",
                      json=chat_body(stream=True, max_tokens=200), timeout=30) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # leaving the block closes the connection mid-answer
    server.set_fault("tiny-0", None)
    started = time.perf_counter()
    assert post(server, chat_body(max_tokens=1)).status_code == 200
    assert time.perf_counter() - started < 5


@pytest.mark.no_model
def test_a_burst_of_new_connections_is_queued_not_reset(server: Any) -> None:
    """50 callers connecting at the same instant (the Broker's throughput case) all get answers."""
    import socket

    sockets = []
    try:
        # connect all at once: the kernel completes each handshake into the listen backlog; a
        # backlog that is too small drops SYNs, and the client's retry comes only after 1 s
        for _ in range(100):
            sockets.append(socket.create_connection(("127.0.0.1", server.port), timeout=0.9))
        for sock in sockets:
            sock.settimeout(10)
        request = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        for sock in sockets:
            sock.sendall(request)
        for sock in sockets:
            status_line = sock.makefile("rb").readline()
            assert status_line.startswith(b"HTTP/1.") and b" 200 " in status_line, status_line
    finally:
        for sock in sockets:
            sock.close()
