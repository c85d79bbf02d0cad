"""Catalog ``sync()``: the seed says the model list updates automatically.
What it syncs from (the configured catalog source: a URL, a file or a list) is documented in
``jevlaya_lab.broker.catalog``. Here a real catalog server on 127.0.0.1 changes its list, and
the brokers' models answer from the real local LLM server. (llmbroker's ``sync()`` reads only
its own curated presets from its own site, so there is no differential scenario beyond the
pinned difference in ``test_broker_differential.py``.)"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.broker import Broker, LLMConfig
from jevlaya_lab.broker.catalog import CATALOG_URL_ENV, SyncReport
from jevlaya_lab.local import FaultProfile


class CatalogSite:
    """A catalog URL whose model list the test changes (``models``), on 127.0.0.1."""

    def __init__(self) -> None:
        self.models: list[dict[str, Any]] = []
        self.requests = 0
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                site.requests += 1
                body = json.dumps({"models": site.models}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/catalog.json"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(timeout=5)


@pytest.fixture
def site() -> Iterator[CatalogSite]:
    s = CatalogSite()
    yield s
    s.stop()


def entry(server: Any, name: str, model: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "base_url": server.base_url, "model": model, **more}


@pytest.fixture
def open_broker(db: Path) -> Iterator[Any]:
    made: list[Broker] = []

    def make(**kwargs: Any) -> Broker:
        kwargs.setdefault("local", False)
        b = Broker(db, **kwargs)
        made.append(b)
        b.count()  # open it now: the registry is read from the catalog as it is
        return b
    yield make
    for b in made:
        b.close()


def test_sync_adds_updates_and_removes_catalog_models(site, server, open_broker) -> None:
    site.models = [entry(server, "cat/a", "a")]
    b = open_broker(catalog=site.url)
    assert b.llm_names == ["cat/a"] and b.ask("x").llm_name == "cat/a"
    site.models = [entry(server, "cat/a", "a"), entry(server, "cat/b", "b")]
    report = b.sync()
    assert report == SyncReport(site.url, True, added=("cat/b",), active_before=1,
                                active_after=2)
    assert b.llm_names == ["cat/a", "cat/b"] and b.last_sync_report == report
    b.disable_llm("cat/a")
    assert b.ask("x").llm_name == "cat/b"
    site.models = [entry(server, "cat/b", "c", weight=0.9)]  # b now serves model c
    report = b.sync()
    assert (report.added, report.updated, report.removed) == ((), ("cat/b",), ("cat/a",))
    assert b.llm_names == ["cat/b"] and b.get("cat/b").config.model == "c"
    before = server.request_count("c")
    assert b.ask("x").llm_name == "cat/b" and server.request_count("c") == before + 1
    assert b.sync() == SyncReport(site.url, True, active_before=1, active_after=1)


def test_a_synced_list_is_what_the_next_broker_opens_with(site, server, db, open_broker) -> None:
    site.models = [entry(server, "cat/a", "a")]
    b = open_broker(catalog=site.url)
    site.models = [entry(server, "cat/b", "b")]
    b.sync()
    b.close()
    site.stop()  # the next broker cannot reach the site: the database's list stands
    with Broker(db, catalog=site.url, local=False) as again:
        assert again.llm_names == ["cat/b"] and again.ask("x").llm_name == "cat/b"
        assert again.sync().applied is False


def test_an_unreachable_catalog_changes_nothing(site, server, open_broker, caplog) -> None:
    site.models = [entry(server, "cat/a", "a")]
    b = open_broker(catalog=site.url)
    url = site.url
    site.stop()
    with caplog.at_level(logging.WARNING, logger="jevlaya_lab.broker"):
        report = b.sync()
    assert report == SyncReport(url, False, active_before=1, active_after=1)
    assert "is not reachable" in caplog.text and b.ask("x").llm_name == "cat/a"


def test_state_of_the_models_that_stay_is_kept(site, server, open_broker) -> None:
    site.models = [entry(server, "cat/a", "a"), entry(server, "cat/b", "b")]
    b = open_broker(catalog=site.url)
    server.set_fault("a", FaultProfile(status=429, retry_after=60))
    assert b.ask("x").llm_name == "cat/b"
    site.models = [entry(server, "cat/a", "a", weight=0.1), entry(server, "cat/b", "b")]
    assert b.sync().updated == ("cat/a",)
    assert b.get("cat/a").state()["phase"] == "cooling"  # the cooldown survived the update
    assert b.ask("x").llm_name == "cat/b"


def test_the_users_own_models_are_never_touched(site, server, open_broker) -> None:
    site.models = [entry(server, "mine", "c"), entry(server, "cat/b", "b")]
    b = open_broker(catalog=site.url, models=[LLMConfig(**entry(server, "mine", "a"))])
    report = b.sync()
    assert report.added == report.updated == report.removed == ()
    assert b.get("mine").config.model == "a" and b.llm_names == ["mine", "cat/b"]
    site.models = []
    assert b.sync().removed == ("cat/b",) and b.llm_names == ["mine"]


def test_a_call_running_on_a_removed_model_ends_normally(site, server, open_broker) -> None:
    site.models = [entry(server, "cat/a", "a"), entry(server, "cat/b", "b")]
    b = open_broker(catalog=site.url)
    server.set_fault("a", FaultProfile(latency=1.0))
    answers: list[str] = []
    caller = threading.Thread(target=lambda: answers.append(b.ask("x", trace_id="t").llm_name))
    caller.start()
    time.sleep(0.3)
    site.models = [entry(server, "cat/b", "b")]
    assert b.sync().removed == ("cat/a",)
    caller.join(timeout=10)
    assert answers == ["cat/a"]
    assert [(r["llm_name"], r["status"]) for r in b.calls(trace_id="t")] == [("cat/a", "ok")]
    assert b.ask("y").llm_name == "cat/b"


def test_the_list_updates_by_itself_every_sync_interval(site, server, open_broker) -> None:
    site.models = [entry(server, "cat/a", "a")]
    b = open_broker(catalog=site.url, sync_interval=0.3)
    assert b.ask("x").llm_name == "cat/a"
    site.models = [entry(server, "cat/a", "a"), entry(server, "cat/b", "b")]
    time.sleep(0.4)
    b.ask("x")  # a call after the interval starts the sync in the background
    deadline = time.monotonic() + 5
    while "cat/b" not in b.llm_names and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.llm_names == ["cat/a", "cat/b"]
    assert b.last_sync_report is not None and b.last_sync_report.added == ("cat/b",)


def test_without_an_interval_the_list_changes_only_on_sync(site, server, open_broker) -> None:
    site.models = [entry(server, "cat/a", "a")]
    b = open_broker(catalog=site.url, sync_interval=None)
    requests = site.requests
    site.models = [entry(server, "cat/b", "b")]
    time.sleep(0.2)
    assert b.ask("x").llm_name == "cat/a" and site.requests == requests
    assert b.sync().added == ("cat/b",)


def test_sync_from_a_file_or_a_list_and_without_a_source(server, open_broker, tmp_path,
                                                         monkeypatch) -> None:
    monkeypatch.delenv(CATALOG_URL_ENV, raising=False)
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"models": [entry(server, "file/a", "a")]}))
    b = open_broker(catalog=str(path))
    assert b.llm_names == ["file/a"]
    path.write_text(json.dumps({"models": [entry(server, "file/b", "b")]}))
    assert b.sync() == SyncReport(str(path), True, ("file/b",), (), ("file/a",), 1, 1)
    report = b.sync([entry(server, "list/c", "c")])  # another source, given to sync()
    assert report.source == "the catalog list given to the broker" and b.llm_names == ["list/c"]
    with Broker(tmp_path / "plain.db", models=[LLMConfig(**entry(server, "a", "a"))]) as plain:
        assert plain.sync() is None  # nothing configured: the database's list stands


def test_bad_sync_arguments(tmp_path, server) -> None:
    for bad in (0, -1, float("nan"), True, "daily"):
        with pytest.raises(ValueError, match="sync_interval="):
            Broker(tmp_path / "j.db", catalog=[], sync_interval=bad)
    with Broker(tmp_path / "j.db", catalog=[], local=False) as b:
        with pytest.raises(ValueError, match="no such file"):
            b.sync(str(tmp_path / "missing.json"))
