"""The row helpers both journal backends share (``jevlaya_lab.journal.rows``)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import jevlaya_lab.journal as journal
from jevlaya_lab.journal import postgresql, sqlite
from jevlaya_lab.journal.rows import (
    MODEL_FIELDS,
    equality_filters,
    model_from_row,
    model_values,
    utc_now,
)
from jevlaya_lab.journal import JournalUnavailableError


def test_model_values_fill_the_documented_defaults_in_column_order() -> None:
    values = model_values({"name": "a", "base_url": "http://x/v1", "model": "m"})
    assert dict(zip(MODEL_FIELDS, values, strict=True)) == {
        "name": "a", "base_url": "http://x/v1", "model": "m", "api_key_ref": None,
        "parallel": 4, "weight": 0.5, "labels": "[]"}


def test_model_from_row_reads_a_dict_row_and_a_sqlite_row_alike() -> None:
    entry = {"name": "a", "base_url": "http://x/v1", "model": "m", "api_key_ref": "k",
             "parallel": "2", "weight": 1, "labels": ["fast", "cheap"]}
    expected = {**entry, "parallel": 2, "weight": 1.0, "labels": ("fast", "cheap"),
                "origin": "user"}
    as_dict = {**dict(zip(MODEL_FIELDS, model_values(entry), strict=True)), "origin": "user"}
    assert model_from_row(as_dict) == expected

    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    db.execute(f"CREATE TABLE models ({', '.join(MODEL_FIELDS)}, origin)")
    db.execute(f"INSERT INTO models VALUES ({', '.join('?' * (len(MODEL_FIELDS) + 1))})",
               (*model_values(entry), "user"))
    assert model_from_row(db.execute("SELECT * FROM models").fetchone()) == expected


def test_equality_filters_use_the_drivers_placeholder_and_skip_none() -> None:
    assert equality_filters("?", call_id="c", trace_id=None, status="ok") == (
        ["call_id = ?", "status = ?"], ["c", "ok"])
    assert equality_filters("%s", call_id=None, scope="s") == (["scope = %s"], ["s"])
    assert equality_filters("?") == ([], [])


def test_utc_now_is_iso_text_in_utc() -> None:
    stamp = datetime.fromisoformat(utc_now())
    assert stamp.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - stamp) < timedelta(seconds=5)


def test_both_backends_use_the_one_copy_of_the_helpers() -> None:
    for backend in (sqlite, postgresql):
        assert backend.model_values is model_values and backend.model_from_row is model_from_row
        assert backend.equality_filters is equality_filters and backend.utc_now is utc_now
        assert not hasattr(backend, "_filters") and not hasattr(backend, "_model_values")


def test_journal_unavailable_error_is_exported_by_the_journal_package() -> None:
    assert journal.JournalUnavailableError is JournalUnavailableError
    assert "JournalUnavailableError" in journal.__all__
    assert all(hasattr(journal, name) for name in journal.__all__)
