"""Read statements' reference statistics kept in the cache folder (decisions.line_store), on a tiny
checkpoint whose reader reads statements against four reference texts."""

from __future__ import annotations

import json
import warnings

import torch

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import save_checkpoint
from jevlaya_lab.decisions.line_store import FOLDER, LineStore
from jevlaya_lab.decisions.testing import fixed_prior_parts

UNSEEN = "The writer attaches a photograph."
OTHER = "The writer is in a hurry."
REFERENCE = ["where is my parcel", "thanks for the quick help", "my card was charged twice", "can we talk tomorrow"]
STATES = ["my invoice is wrong", "the app crashes at login", "hi, please refund me"]
PRIOR = {"rank": 0, "reference": 3, "anchors": 2, "gate": [0.9, 60.0], "fallback": [1.5, 0.25, 0.0],
         "reader": {"layers": 1, "blend": [0.5, 2.0, -0.75]}}


def _checkpoint(path, line=True, seed=0):
    """A tiny checkpoint whose reader differs from the encoder's top layer; with ``line``, it reads
    an unseen statement against REFERENCE."""
    parts = fixed_prior_parts(PRIOR, anchors=("The customer asks for money back.", "refund"),
                              unseen=(UNSEEN, OTHER), num_layers=2)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in parts.model.reader.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    saved = save_checkpoint(path, *parts)
    if line:
        data = json.loads((saved / "rl_agent_config.json").read_text())
        data["similarity_prior"]["reader"].update(line=[1.3, -0.2], reference=REFERENCE)
        (saved / "rl_agent_config.json").write_text(json.dumps(data))
    return saved


def _ask(agent, statement=UNSEEN):
    """The statement's answers on STATES, and how many reader passes the call made."""
    calls = []
    handle = agent.decision_model.reader.register_forward_hook(lambda *_: calls.append(1))
    try:
        answers = [r["answers"]["q"]["noul"] for r in agent.predict_batch(STATES, {"q": {"type": "noul",
                                                                                          "instructions": statement}})]
    finally:
        handle.remove()
    return answers, len(calls)


def _files(home):
    return sorted((home / FOLDER).glob("*.json"))


def test_a_new_agent_reads_a_statements_statistics_from_the_cache_folder(tmp_path, monkeypatch):
    """The first Agent reads the statement against the references (one more reader pass) and keeps
    its two numbers in ``lines/``; a second Agent over the same checkpoint, with nothing in memory,
    reads the file instead, and answers exactly as the first."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    path = _checkpoint(tmp_path / "ck")
    first, first_passes = _ask(Agent(path))
    assert first_passes == 2  # the states, then the four reference texts
    (kept,) = _files(tmp_path / "home")
    value = json.loads(kept.read_text())
    assert set(value) == {"mean", "spread"} and value["spread"] > 0
    again, passes = _ask(Agent(path))
    assert passes == 1 and again == first
    assert _files(tmp_path / "home") == [kept]


def test_a_changed_reader_or_statement_never_reads_another_ones_numbers(tmp_path, monkeypatch):
    """The file name covers the reader's weights and the statement: another reader (same config,
    other weights) and another statement each read the references anew and keep a file of their own."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    one, other = _checkpoint(tmp_path / "one", seed=0), _checkpoint(tmp_path / "two", seed=1)
    answers, _ = _ask(Agent(one))
    theirs, passes = _ask(Agent(other))
    assert passes == 2 and theirs != answers
    _, passes = _ask(Agent(one), OTHER)
    assert passes == 2
    assert len(_files(tmp_path / "home")) == 3


def test_a_damaged_file_is_read_anew_and_rewritten(tmp_path, monkeypatch):
    """A file cut short or holding a spread of 0 is not trusted: the statement is read against the
    references again, with the same answers, and the file is whole again."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    path = _checkpoint(tmp_path / "ck")
    first, _ = _ask(Agent(path))
    (kept,) = _files(tmp_path / "home")
    for damage in ('{"mean": 0.5, "spr', '{"mean": 0.5, "spread": 0}', '{"mean": "NaN", "spread": 1}'):
        kept.write_text(damage)
        again, passes = _ask(Agent(path))
        assert passes == 2 and again == first
        assert json.loads(kept.read_text())["spread"] > 0


def test_a_folder_that_cannot_be_written_costs_time_only_and_warns_once(tmp_path, monkeypatch):
    """With ``$JEVLAYA_HOME`` under a plain file, nothing can be kept: the answers are those of a
    writable folder, and one RuntimeWarning names the folder and the fix for two statements."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    path = _checkpoint(tmp_path / "ck")
    want, _ = _ask(Agent(path))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("JEVLAYA_HOME", str(blocker / "home"))
    agent = Agent(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, passes = _ask(agent)
        _ask(agent, OTHER)
    assert got == want and passes == 2
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and str(blocker / "home" / FOLDER) in said[0] and "JEVLAYA_HOME" in said[0]


def test_without_a_line_nothing_is_kept(tmp_path, monkeypatch):
    """A reader without a line reads no reference text, so the folder stays empty."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    _, passes = _ask(Agent(_checkpoint(tmp_path / "ck", line=False)))
    assert passes == 1 and _files(tmp_path / "home") == []


def test_the_store_keeps_exact_floats_and_refuses_what_is_not_two_numbers(tmp_path):
    """Round trip to the last bit; a missing key or a non-number reads as absent."""
    store = LineStore(tmp_path)
    value = (0.1 + 0.2, 1 / 3)
    assert store.put("k", value) == value and store.get("k") == value
    assert store.get("missing") is None
    (tmp_path / "bad.json").write_text('{"mean": [1], "spread": 1}')
    assert store.get("bad") is None
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_quantised_encoder_keeps_numbers_of_its_own(tmp_path, monkeypatch):
    """``quantize="int8"`` changes the encoder under the reader, hence the statement's vector and its
    numbers: it keeps a file of its own beside the float one's."""
    monkeypatch.setenv("JEVLAYA_HOME", str(tmp_path / "home"))
    path = _checkpoint(tmp_path / "ck")
    _ask(Agent(path))
    _ask(Agent(path, quantize="int8"))
    assert len(_files(tmp_path / "home")) == 2


def _hammer(folder: str, value: float, rounds: int) -> list[str]:
    """Write ``(value, value)`` under one key and read it back, ``rounds`` times; what was read wrong."""
    store, wrong = LineStore(folder), []
    for _ in range(rounds):
        store.put("shared", (value, value))
        got = store.get("shared")
        if got is None or got[0] != got[1] or got[0] not in (1.5, 2.5):
            wrong.append(repr(got))
    return wrong


def test_processes_writing_one_statement_at_once_never_read_half_a_file(tmp_path):
    """Two worker processes (as Dask workers asking one statement) write and read the same file 3000
    times each: every read finds one writer's whole numbers, never a torn or empty file, and no
    temporary file is left behind."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(_hammer, [(str(tmp_path), 1.5, 3000), (str(tmp_path), 2.5, 3000)])
    assert results == [[], []]
    assert [p.name for p in tmp_path.iterdir()] == ["shared.json"]
