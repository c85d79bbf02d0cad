"""frames.ask and frames.escalate against the real local OpenAI-compatible server (tiny seeded
chat models on 127.0.0.1): one journaled call per row keyed by its index, failed rows carrying
their error while the run goes on, bounded concurrency, and a rerun after Ctrl-C or SIGKILL
asking only the rows the journal does not hold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from jevlaya_lab import Broker, FrameError, LLMConfig
from jevlaya_lab.frames import ask, escalate
from jevlaya_lab.local import FaultProfile, serve, tiny_chat_model


@pytest.fixture(scope="module")
def server():
    with serve({"a": tiny_chat_model(seed=0, name="a")}) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _healthy(server):
    server.set_fault("a", None)
    yield
    server.set_fault("a", None)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


def _broker(server, journal: Path, **kwargs) -> Broker:
    kwargs.setdefault("store_text", True)
    return Broker(journal, models=[LLMConfig(name="a", base_url=server.base_url, model="a", parallel=64)],
                  catalog=[], **kwargs)


def _frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"body": [f"ticket number {i} about my order" for i in range(n)]},
                        index=pd.Index([100 + i for i in range(n)], name="ticket"))


def test_every_row_is_answered_and_journaled_with_its_index(server, journal):
    df = _frame(6)
    with _broker(server, journal) as broker:
        out = ask(df, "Summarise: {body}", broker=broker, concurrency=3, max_tokens=4, progress=False)
        rows = broker.calls(operation="frames.ask")
    assert out.index.equals(df.index)
    assert list(out.columns) == ["answer", "model", "latency", "error", "resumed"]
    assert out["answer"].notna().all() and out["error"].isna().all()
    assert (out["model"] == "a").all() and (out["latency"] > 0).all() and not out["resumed"].any()
    assert sorted(r["trace_id"].rsplit(":", 1)[1] for r in rows) == [str(i) for i in df.index]
    assert {r["prompt_text"] for r in rows} == {f"Summarise: {b}" for b in df["body"]}


def test_a_prompt_function_and_bad_prompts(server, journal):
    df = _frame(2)
    with _broker(server, journal) as broker:
        out = ask(df, lambda row: f"Row {row.name}: {row['body']}", broker=broker, max_tokens=2, progress=False)
        assert out["answer"].notna().all()
        assert {r["prompt_text"] for r in broker.calls()} == {f"Row {i}: {b}" for i, b in zip(df.index, df["body"])}
        with pytest.raises(FrameError, match="names column 'text', which the frame lacks"):
            ask(df, "Summarise: {text}", broker=broker)
        with pytest.raises(FrameError, match="for row 101 the prompt function returned NoneType"):
            ask(df, lambda row: None if row.name == 101 else "hi", broker=broker)
        with pytest.raises(FrameError, match="appears more than once"):
            ask(pd.concat([df, df]), "{body}", broker=broker)
        with pytest.raises(FrameError, match="no rows"):
            ask(df.iloc[:0], "{body}", broker=broker)
        with pytest.raises(ValueError, match="concurrency"):
            ask(df, "{body}", broker=broker, concurrency=0)
    with _broker(server, journal, store_text=False) as plain, \
            pytest.raises(FrameError, match="store_text=True"):
        ask(df, "{body}", broker=plain, resume=True)


def test_a_failed_row_carries_its_error_and_the_run_goes_on(server, journal):
    server.set_fault("a", FaultProfile(status=400, every=3))  # every third request is rejected
    df = _frame(9)
    with _broker(server, journal) as broker:
        out = ask(df, "{body}", broker=broker, concurrency=1, max_tokens=2, progress=False, max_attempts=1)
    failed = out[out["error"].notna()]
    assert len(failed) == 3 and out["answer"].notna().sum() == 6
    assert failed["error"].str.startswith("ProviderError: ").all()
    assert failed["answer"].isna().all() and failed["model"].isna().all()


def test_concurrency_is_bounded(server, journal):
    server.set_fault("a", FaultProfile(latency=0.15))
    seen, lock, active = [], threading.Lock(), [0]
    df = _frame(12)
    with _broker(server, journal) as broker:
        real = broker.ask

        def counting(*args, **kwargs):
            with lock:
                active[0] += 1
                seen.append(active[0])
            try:
                return real(*args, **kwargs)
            finally:
                with lock:
                    active[0] -= 1

        broker.ask = counting  # observe the calls frames makes; the broker does the work
        out = ask(df, "{body}", broker=broker, concurrency=4, max_tokens=2, progress=False)
    assert out["answer"].notna().all()
    assert max(seen) == 4  # four calls did run at once (each takes 0.15 s), and never more


def test_a_rerun_resumes_from_the_journal(server, journal):
    df = _frame(5)
    with _broker(server, journal) as broker:
        first = ask(df.iloc[:3], "{body}", broker=broker, max_tokens=3, progress=False)
    with _broker(server, journal) as broker:  # a new process would open the journal the same way
        again = ask(df, "{body}", broker=broker, max_tokens=3, progress=False)
        calls = broker.calls(operation="frames.ask")
    assert list(again["resumed"]) == [True, True, True, False, False]
    assert list(again["answer"].iloc[:3]) == list(first["answer"])
    assert len(calls) == 5  # the three answered rows were not asked again
    with _broker(server, journal) as broker:
        changed = ask(df.iloc[:1], "Again: {body}", broker=broker, max_tokens=3, progress=False)
    assert not changed["resumed"].iloc[0]  # another prompt is another call


# 40 rows at 0.3 s each keep the child busy for 12 s or more, so the signal lands mid-run
ROWS = 40
# The child is a user's script in a terminal, where Ctrl-C raises KeyboardInterrupt. Python keeps
# SIGINT ignored in a process that starts with it ignored, as a job started in the background of a
# non-interactive shell does (a CI launcher may run the suite so): the child would then ignore the
# signal, answer every row and exit 0 (seen twice as "assert 0 != 0", and once as a 60 s timeout).
CHILD = textwrap.dedent("""
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import sys, pandas as pd
    from jevlaya_lab import Broker, LLMConfig
    from jevlaya_lab.frames import ask
    url, journal, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    df = pd.DataFrame({"body": [f"ticket number {i} about my order" for i in range(rows)]},
                      index=pd.Index([100 + i for i in range(rows)], name="ticket"))
    broker = Broker(journal, models=[LLMConfig(name="a", base_url=url, model="a")], catalog=[], store_text=True)
    print("ready", flush=True)
    ask(df, "{body}", broker=broker, concurrency=1, max_tokens=3, progress=False)
    broker.close()
""")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_an_interrupted_run_is_resumed_without_asking_answered_rows_again(server, journal, stop):
    server.set_fault("a", FaultProfile(latency=0.3))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, server.base_url, str(journal), str(ROWS)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # stop it once a few rows are in the journal
            if journal.exists():
                with _broker(server, journal) as peek:
                    if len(peek.calls(operation="frames.ask", status="ok")) >= 3:
                        break
            time.sleep(0.3)
        assert child.poll() is None, "the child finished before it could be interrupted"
        child.send_signal(stop)
        child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode != 0
    server.set_fault("a", None)
    with _broker(server, journal) as broker:
        before = broker.calls(operation="frames.ask", status="ok")
        out = ask(_frame(ROWS), "{body}", broker=broker, max_tokens=3, progress=False)
        after = broker.calls(operation="frames.ask", status="ok")
    answered_before = {r["trace_id"] for r in before}
    assert 3 <= len(answered_before) < ROWS
    assert int(out["resumed"].sum()) == len(answered_before)
    assert out["answer"].notna().all()
    assert len(after) == ROWS  # one answered call per row, none asked twice
    assert len({r["trace_id"] for r in after}) == ROWS


def test_escalate_asks_only_the_abstained_rows_and_says_which_stage_answered(server, journal, questions,
                                                                             tiny_dir):
    from jevlaya_lab.frames import decide

    df = pd.DataFrame({"body": ["I want a refund for my order, it is late", "the app crashes when I log in",
                                "hello, my invoice is wrong", "win a free cruise now, click here",
                                "where is my parcel?", "please cancel my subscription"]},
                      index=pd.Index([f"T-{i}" for i in range(6)]))
    threshold = 0.5215
    decided = decide(df, questions(), checkpoint=tiny_dir, state="body", min_confidence=threshold, progress=False)
    abstained = decided[["intent"]].isna().any(axis=1)
    assert 0 < abstained.sum() < len(df)
    with _broker(server, journal) as broker:
        out = escalate(df, questions(), "Which team handles this ({intent})? {body}", broker=broker,
                       checkpoint=tiny_dir, state="body", min_confidence=threshold, on=["intent"],
                       max_tokens=3, progress=False)
        calls = broker.calls(operation="frames.ask")
    assert out.index.equals(df.index)
    assert list(out["stage"]) == ["ask" if a else "decide" for a in abstained]
    assert out.loc[abstained, "answer"].notna().all() and out.loc[~abstained, "answer"].isna().all()
    pd.testing.assert_frame_equal(out[decided.columns], decided)
    assert sorted(r["trace_id"].rsplit(":", 1)[1] for r in calls) == sorted(repr(i) for i in df.index[abstained])
    assert all("(nan)" in r["prompt_text"] for r in calls)  # the abstained guess is missing in the prompt
    with pytest.raises(TypeError, match="min_confidence"):
        escalate(df, questions(), "{body}", broker=None, checkpoint=tiny_dir, state="body", min_confidence=None)
