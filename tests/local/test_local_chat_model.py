"""ChatModel and tiny_chat_model: determinism, max_tokens, streaming pieces, stop, sampling, errors."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from jevlaya_lab.local import ChatRequestError, tiny_chat_model
from jevlaya_lab.local.decoding import TextStream
from jevlaya_lab.local.queueing import FairLock
from jevlaya_lab.local.tiny import byte_level_tokenizer

USER = [{"role": "user", "content": "hello there"}]


def test_tiny_model_is_a_real_gpt2_with_a_byte_level_tokenizer() -> None:
    model = tiny_chat_model(0)
    assert type(model.model).__name__ == "GPT2LMHeadModel"
    assert model.name == "tiny-0"
    assert tiny_chat_model(3, name="alpha").name == "alpha"
    # byte-level: any text round-trips, including characters split over several byte tokens
    text = "naïve 世界 🙂"
    ids = model.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text.encode())
    assert model.tokenizer.decode(ids) == text


def test_same_seed_same_answer_different_seeds_differ() -> None:
    answers = [tiny_chat_model(seed).generate(USER).text for seed in (0, 0, 1, 2)]
    assert answers[0] == answers[1]
    assert len(set(answers[1:])) == 3


def test_tiny_answers_are_never_empty_and_default_to_16_tokens() -> None:
    for seed in range(8):
        generation = tiny_chat_model(seed).generate([{"role": "user", "content": f"question {seed}"}])
        assert generation.text.strip(), "contract: at least one visible token"
        assert not generation.text.startswith(" ")
        assert generation.completion_tokens == 16
        assert generation.finish_reason == "length"
        assert generation.prompt_tokens > 0


def test_max_tokens_is_honoured() -> None:
    model = tiny_chat_model(0)
    for n in (1, 3, 40):
        generation = model.generate(USER, max_tokens=n)
        assert generation.completion_tokens == n
        assert len(generation.text) == n  # one ASCII letter or space per token


def test_on_token_is_called_per_token_and_pieces_make_the_text() -> None:
    pieces: list[str] = []
    generation = tiny_chat_model(1).generate(USER, max_tokens=12, on_token=pieces.append)
    assert len(pieces) == 12
    assert "".join(pieces) == generation.text


def test_on_token_exception_stops_generation_and_propagates() -> None:
    seen: list[str] = []

    def on_token(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 3:
            raise RuntimeError("client went away")

    with pytest.raises(RuntimeError, match="client went away"):
        tiny_chat_model(0).generate(USER, max_tokens=10, on_token=on_token)
    assert len(seen) == 3


def test_stop_sequence_ends_the_answer_and_is_never_streamed() -> None:
    model = tiny_chat_model(0)
    full = model.generate(USER, max_tokens=16).text
    stop = full[5:7]  # something the greedy answer is known to contain
    cut = full[: full.index(stop)]
    pieces: list[str] = []
    generation = model.generate(USER, max_tokens=16, stop=[stop, "never-there"], on_token=pieces.append)
    assert generation.text == cut
    assert generation.finish_reason == "stop"
    assert "".join(pieces) == cut
    assert stop not in "".join(pieces)


def test_text_stream_holds_back_partial_characters_and_stop_prefixes() -> None:
    tokenizer = byte_level_tokenizer()
    ids = tokenizer("é!x", add_special_tokens=False)["input_ids"]  # é is two byte tokens
    stream = TextStream(tokenizer, stop=["!x"])
    assert stream.push(ids[0]) == ""      # half of é: nothing to show yet
    assert stream.push(ids[1]) == "é"
    assert stream.push(ids[2]) == ""      # "!" may start the stop sequence "!x"
    assert stream.push(ids[3]) == ""      # ... and it does
    assert stream.stopped and stream.text == "é"
    held = TextStream(tokenizer, stop=["!x"])
    for token in tokenizer("a!", add_special_tokens=False)["input_ids"]:
        held.push(token)
    assert held.finish() == "!"           # a stop prefix that never completed is released at the end
    assert held.text == "a!"


def test_sampling_is_reproducible_with_a_seed() -> None:
    model = tiny_chat_model(0)
    a = model.generate(USER, temperature=1.0, seed=7).text
    b = model.generate(USER, temperature=1.0, seed=7).text
    c = model.generate(USER, temperature=1.0, seed=8).text
    assert a == b
    assert a != c
    assert a != model.generate(USER).text  # greedy differs from sampled
    # top_p close to 0 keeps only the most likely token: sampling becomes greedy
    assert model.generate(USER, temperature=1.0, top_p=1e-6, seed=3).text == model.generate(USER).text


def test_a_vanishing_temperature_is_greedy_not_a_crash() -> None:
    model = tiny_chat_model(0)
    assert model.generate(USER, temperature=1e-300, seed=1).text == model.generate(USER).text


def test_generation_does_not_touch_the_global_torch_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    tiny_chat_model(5).generate(USER, temperature=1.0, seed=1)
    assert torch.equal(torch.rand(1), expected)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"seed": 1.5}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"stop": ""}, "stop"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
])
def test_bad_parameters_raise_chat_request_error_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ChatRequestError) as info:
        tiny_chat_model(0).generate(USER, **kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}=")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("messages", "field"), [
    ([], "messages"),
    ("hello", "messages"),
    ([{"content": "no role"}], "messages[0].role"),
    (["plain string"], "messages[0]"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0]"),
])
def test_bad_messages_raise_chat_request_error_naming_the_field(messages: object, field: str) -> None:
    with pytest.raises(ChatRequestError) as info:
        tiny_chat_model(0).generate(messages)  # type: ignore[arg-type]
    assert info.value.field == field


def test_text_parts_and_null_content_are_accepted() -> None:
    model = tiny_chat_model(0)
    parts = [{"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}]
    assert model.generate(parts).text == model.generate(USER).text
    assert model.generate([*USER, {"role": "assistant", "content": None}, *USER]).text


def test_prompt_longer_than_the_context_is_rejected_with_the_limit() -> None:
    model = tiny_chat_model(0)
    with pytest.raises(ChatRequestError, match="at most 4095 prompt tokens") as info:
        model.generate([{"role": "user", "content": "x" * 5000}])
    assert info.value.field == "messages"


def test_fair_lock_serves_waiters_in_arrival_order() -> None:
    lock = FairLock()
    order: list[int] = []
    lock.acquire()
    threads = []
    for i in range(6):
        thread = threading.Thread(target=lambda i=i: (lock.acquire(), order.append(i), lock.release()))
        thread.start()
        threads.append(thread)
        while lock.waiting < i + 1:  # make sure thread i is queued before starting the next
            threading.Event().wait(0.001)
    lock.release()
    for thread in threads:
        thread.join(5)
    assert order == list(range(6))
    with pytest.raises(RuntimeError, match="unlocked"):
        lock.release()


def test_fair_lock_waiter_that_gives_up_leaves_the_queue() -> None:
    lock = FairLock()
    lock.acquire()
    assert lock.acquire(timeout=0.05) is False
    assert lock.waiting == 0
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=10)))
    waiter.start()
    while lock.waiting < 1:
        threading.Event().wait(0.001)
    lock.release()  # handed straight to the remaining waiter
    waiter.join(5)
    assert got == [True]
    lock.release()
    assert lock.acquire(timeout=0) is True


def test_concurrent_generate_calls_all_complete_identically() -> None:
    model = tiny_chat_model(2)
    expected = model.generate(USER).text
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(model.generate(USER).text)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [expected] * 8


_ALPHABET = "ab é世🙂\n"


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=_ALPHABET, max_size=12),
       stops=st.lists(st.text(alphabet=_ALPHABET, min_size=1, max_size=3), max_size=3))
def test_streamed_pieces_always_equal_the_final_text(text: str, stops: list[str]) -> None:
    """Pieces never split a character, never show a stop sequence, and add up to the answer."""
    tokenizer = _BYTE_TOKENIZER
    stream = TextStream(tokenizer, stops)
    pieces = []
    for token in tokenizer(text, add_special_tokens=False)["input_ids"]:
        pieces.append(stream.push(token))
        if stream.stopped:
            break
    pieces.append(stream.finish())
    expected = text
    for end in range(len(text) + 1):  # generation halts as soon as any stop sequence has appeared
        hits = [text[:end].find(stop) for stop in stops if stop in text[:end]]
        if hits:
            expected = text[: min(hits)]
            break
    assert "".join(pieces) == stream.text == expected
    assert "\ufffd" not in "".join(pieces)


_BYTE_TOKENIZER = byte_level_tokenizer()
