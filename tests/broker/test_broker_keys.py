"""Keys: scope lookup, sources, 401/403 dropping the key for that caller, and never leaking."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.errors import AuthError, NoLLMAvailableError
from jevlaya_lab.broker.keys import redact
from jevlaya_lab.local import serve, tiny_chat_model

RIGHT = "sk-right-0123456789abcdef"
WRONG = "sk-wrong-0123456789abcdef"


@pytest.fixture(scope="module")
def locked() -> Iterator[Any]:
    with serve({"k": tiny_chat_model(seed=7, name="k")}, api_key=RIGHT) as srv:
        yield srv


def keyed(locked: Any, name: str = "k", ref: str = "TEST_KEY") -> LLMConfig:
    return LLMConfig(name=name, base_url=locked.base_url, model="k", api_key_ref=ref)


def test_scope_key_is_looked_up_first(locked, db: Path) -> None:
    secrets = {"TEST_KEY": WRONG, "team/TEST_KEY": RIGHT}
    with Broker(db, models=[keyed(locked)], secrets=secrets, catalog=[]) as b:
        scoped = b.for_scope("team")
        result = scoped.ask("hello")
        assert result.llm_name == "k"
        result.record_quality(1.0)
        assert b.calls()[0]["scope"] == "team" and b.ratings()[0]["scope"] == "team"


def test_401_drops_the_key_for_that_caller_only_and_fails_over(locked, server, db,
                                                                 cfg) -> None:
    secrets = {"TEST_KEY": WRONG, "team/TEST_KEY": RIGHT}
    with Broker(db, models=[keyed(locked), *cfg("b")], secrets=secrets, catalog=[]) as b:
        assert b.ask("x").llm_name == "b"
        assert [r["status"] for r in b.calls()] == ["ok", "error"]  # newest first
        assert b.calls()[-1]["http_status"] == 401
        assert b.snapshot()["k"]["key"] == "refused" and b.snapshot()["k"]["cooldown_until"] is None
        assert b.ask("x").llm_name == "b"  # dropped: not tried again by this caller
        assert len(b.calls()) == 3
        assert b.for_scope("team").ask("x").llm_name == "k"  # another caller keeps its key


def test_every_key_refused_raises_auth_error(locked, db: Path) -> None:
    with Broker(db, models=[keyed(locked)], secrets={"TEST_KEY": WRONG}, catalog=[]) as b:
        with pytest.raises(AuthError) as info:
            b.ask("x")
        assert info.value.status == 401


def test_keys_from_env_and_dotenv_are_never_copied_to_the_database(locked, tmp_path: Path,
                                                                      monkeypatch) -> None:
    monkeypatch.setenv("ENV_KEY", RIGHT)
    dotenv = tmp_path / ".env"
    dotenv.write_text(f'# comment\nexport DOT_KEY="{RIGHT}"\n')
    models = [keyed(locked, "e", "ENV_KEY"), keyed(locked, "d", "DOT_KEY")]
    with Broker(tmp_path / "j.db", models=models, catalog=[], dotenv=dotenv) as b:
        b.disable_llm("e")
        assert b.ask("x").llm_name == "d"
        b.enable_llm("e")
        b.disable_llm("d")
        assert b.ask("x").llm_name == "e"
    raw = sqlite3.connect(tmp_path / "j.db")
    assert raw.execute("SELECT COUNT(*) FROM keys").fetchone()[0] == 0
    dump = "\n".join(raw.iterdump())
    assert RIGHT not in dump


def test_stored_keys_live_in_the_database(locked, db: Path, monkeypatch) -> None:
    monkeypatch.delenv("TEST_KEY", raising=False)
    with Broker(db, models=[keyed(locked)], catalog=[]) as b:
        b.store_key("TEST_KEY", RIGHT)
        assert b.ask("x").llm_name == "k"


def test_keys_never_reach_rows_reprs_exceptions_or_logs(locked, db: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with Broker(db, models=[keyed(locked)], secrets={"TEST_KEY": WRONG}, catalog=[]) as b:
        with pytest.raises(AuthError) as info:
            b.ask("x")
        scoped = b.for_scope("s")  # a fresh caller: its stream tries the key once more
        stream = scoped.stream("x")
        with pytest.raises(AuthError) as streamed:  # every model refused the key
            "".join(stream)
        texts = [str(info.value), repr(info.value), repr(b), repr(b.engine.keys),
                 repr(keyed(locked)), str(b.calls()), str(b.snapshot()), str(b.stats()),
                 str(streamed.value), repr(streamed.value.detail), repr(stream),
                 repr(stream.lanes), caplog.text]
        assert [r["http_status"] for r in b.calls()] == [401, 401]
    texts.append("\n".join(sqlite3.connect(db).iterdump()))
    for text in texts:
        assert WRONG not in text and RIGHT not in text


def test_redact_scrubs_known_and_key_shaped_secrets() -> None:
    text = f"Incorrect API key provided: {WRONG}. Bearer abcdefghijkl; token limit reached"
    clean = redact(text, WRONG)
    assert WRONG not in clean and "abcdefghijkl" not in clean
    assert "token limit reached" in clean
    assert "sk-***" in redact("key sk-proj-abcdefghijklmnop was refused")


def test_a_refused_key_is_read_again_after_store_key_env_or_dotenv_change(
        locked, tmp_path: Path, monkeypatch) -> None:
    """Parity with llmbroker 1.11: a 401 stops the key, not the model. Once another key resolves (from
    ``store_key``, the environment or a changed ``.env``), the model is asked again; the
    message in between says the key was refused, not that it is missing."""
    import time

    dotenv = tmp_path / ".env"
    dotenv.write_text(f"DOT_KEY={WRONG}\n")
    monkeypatch.setenv("ENV_KEY", WRONG)
    models = [keyed(locked, "by_env", "ENV_KEY"), keyed(locked, "by_dotenv", "DOT_KEY"),
              keyed(locked, "by_store", "STORE_KEY")]
    with Broker(tmp_path / "k.db", models=models, catalog=[], dotenv=dotenv) as b:
        b.store_key("STORE_KEY", WRONG)
        with pytest.raises(AuthError):
            b.ask("x")
        assert {n: b.snapshot()[n]["key"] for n in ("by_env", "by_dotenv", "by_store")} == \
            dict.fromkeys(("by_env", "by_dotenv", "by_store"), "refused")
        with pytest.raises(NoLLMAvailableError, match="was refused") as info:
            b.ask("x")
        assert info.value.reason == "no_keys" and "missing" not in str(info.value)

        b.store_key("STORE_KEY", RIGHT)
        assert b.ask("x").llm_name == "by_store"
        b.disable_llm("by_store")
        monkeypatch.setenv("ENV_KEY", RIGHT)
        assert b.ask("x").llm_name == "by_env"
        b.disable_llm("by_env")
        time.sleep(0.05)
        dotenv.write_text(f"DOT_KEY={RIGHT}\n")
        deadline = time.monotonic() + 5
        while b.snapshot()["by_dotenv"]["key"] != "present" and time.monotonic() < deadline:
            time.sleep(0.2)  # .env is checked for changes about once a second
        assert b.ask("x").llm_name == "by_dotenv"
        assert [r["http_status"] for r in b.calls() if r["status"] == "ok"] == [200] * 3
