"""Property tests: any argument either passes validation or raises a documented exception that
names the field (never an IndexError, KeyError or a crash deep inside the engine)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jevlaya_lab.broker import AsyncBroker
from jevlaya_lab.broker.errors import NoLLMAvailableError

ANY = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True),
                st.text(max_size=5), st.lists(st.integers(), max_size=2))

FIELDS = {"wait": "wait", "fastest_of": "fastest_of", "operation": "operation",
          "trace_id": "trace_id", "stream_selection_window": "stream_selection_window"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(FIELDS)), value=ANY, streaming=st.booleans())
def test_any_call_argument_is_accepted_or_named_in_a_documented_error(tmp_path: Path, field,
                                                                      value, streaming) -> None:
    async def main() -> None:
        async with AsyncBroker(tmp_path / "p.db", models=[], catalog=[]) as broker:
            kwargs = {field: value}
            try:
                if streaming:
                    async for _ in broker.stream("hi", **kwargs):
                        pass
                elif field != "stream_selection_window":
                    await broker.ask("hi", **kwargs)
            except NoLLMAvailableError as exc:  # valid input, empty pool
                assert exc.reason == "empty_pool"
            except (ValueError, TypeError) as exc:
                assert FIELDS[field] in str(exc)
    asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(score=ANY)
def test_any_score_is_recorded_or_named_in_a_value_error(score) -> None:
    from jevlaya_lab.broker.validation import check_score

    try:
        value = check_score(score)
    except ValueError as exc:
        assert "score=" in str(exc)
    else:
        assert 0.0 <= value <= 1.0
