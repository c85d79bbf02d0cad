"""FaultProfile validation, parsing and call selection (every=N, seeded probability)."""

from __future__ import annotations

import pytest

from jevlaya_lab.local import FAULT_PRESETS, FaultProfile, FaultProfileError
from jevlaya_lab.local.faults import FaultSwitch


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"latency": -1}, "latency"),
    ({"token_delay": float("inf")}, "token_delay"),
    ({"status": 200}, "status"),
    ({"status": "429"}, "status"),
    ({"retry_after": 2}, "retry_after"),
    ({"status": 429, "retry_after": -1}, "retry_after"),
    ({"cut_after": -1}, "cut_after"),
    ({"every": 0}, "every"),
    ({"probability": 1.5}, "probability"),
    ({"garbage": "yes"}, "garbage"),
    ({"status": 500, "empty": True}, "status, garbage and empty"),
])
def test_impossible_profiles_are_rejected_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(FaultProfileError, match=field):
        FaultProfile(**kwargs)


def test_parse_reads_presets_and_key_value_overrides() -> None:
    assert FaultProfile.parse("rate-limited") == FAULT_PRESETS["rate-limited"]
    assert FaultProfile.parse("rate-limited,every=3") == FaultProfile(status=429, retry_after=2.0, every=3)
    assert FaultProfile.parse("status=503, retry-after=1.5, cut_after=none") == FaultProfile(status=503, retry_after=1.5)
    assert FaultProfile.parse("garbage=true,probability=0.5,seed=4") == FaultProfile(garbage=True, probability=0.5, seed=4)
    with pytest.raises(FaultProfileError, match="preset 'nope' is unknown"):
        FaultProfile.parse("nope")
    with pytest.raises(FaultProfileError, match="colour=red"):
        FaultProfile.parse("colour=red")
    with pytest.raises(FaultProfileError, match="latency='soon'"):
        FaultProfile.parse("latency=soon")


@pytest.mark.parametrize("profile", [FaultProfile(), *FAULT_PRESETS.values(),
                                     FaultProfile(garbage=True, every=3, seed=2, cut_after=0)])
def test_str_is_compact_and_parses_back(profile: FaultProfile) -> None:
    assert "FaultProfile" not in str(profile)
    assert FaultProfile.parse(str(profile)) == profile


def test_every_n_applies_on_calls_n_2n_3n() -> None:
    switch = FaultSwitch(FaultProfile(status=503, every=3))
    hits = [switch.next_call() is not None for _ in range(9)]
    assert hits == [False, False, True] * 3


def test_probability_is_deterministic_given_the_seed() -> None:
    def pattern(seed: int) -> list[bool]:
        switch = FaultSwitch(FaultProfile(status=500, probability=0.5, seed=seed))
        return [switch.next_call() is not None for _ in range(40)]

    assert pattern(1) == pattern(1)
    assert pattern(1) != pattern(2)
    assert 5 < sum(pattern(1)) < 35
    always = FaultSwitch(FaultProfile(status=500, probability=0.0))
    assert all(always.next_call() is None for _ in range(10))


def test_fault_profiles_and_the_server_import_without_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; from jevlaya_lab.local import FaultProfile, serve, Server, FAULT_PRESETS; "
            "FaultProfile.parse('cut'); assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
