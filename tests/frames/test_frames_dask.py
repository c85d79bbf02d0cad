"""frames.decide on a Dask DataFrame, computed on a real LocalCluster of 2 worker processes on
127.0.0.1: lazy with a declared meta, equal to the pandas run row for row, each worker loading
the checkpoint once, and no row lost or duplicated when a worker is SIGKILLed mid-run.

One cluster serves the whole module: starting one costs seconds."""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import pandas as pd
import pytest

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from jevlaya_lab.frames import decide, worker_models  # noqa: E402

# the slow hook below travels to the workers by value: they cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, worker_dashboard_address=None) as cluster, \
            distributed.Client(cluster, timeout=60) as c:
        c.wait_for_workers(2, timeout=60)
        yield c


def _table(n: int) -> pd.DataFrame:
    words = ["refund", "crash", "invoice", "parcel", "cancel", "login", "spam offer", "export"]
    texts = [f"ticket {i}: my {words[i % len(words)]} problem, case {i * 7 % 13}" for i in range(n)]
    return pd.DataFrame({"body": texts}, index=pd.Index([f"T-{1000 + i}" for i in range(n)], name="ticket"))


def test_lazy_result_with_meta_equals_the_pandas_run_and_each_worker_loads_once(client, questions, tiny_dir):
    table = _table(40)
    expected = decide(table, questions(), checkpoint=tiny_dir, state="body", min_confidence=0.52,
                      batch_size=4, progress=False)
    lazy = decide(dd.from_pandas(table, npartitions=8), questions(), checkpoint=tiny_dir, state="body",
                  min_confidence=0.52, batch_size=4)
    assert isinstance(lazy, dd.DataFrame)
    assert list(lazy.columns) == list(expected.columns)
    assert dict(lazy.dtypes) == dict(expected.dtypes)  # the declared meta, before anything ran
    got = lazy.compute()
    pd.testing.assert_frame_equal(got, expected, check_exact=False, atol=1e-6, rtol=0, check_index_type=False)
    loads = client.run(worker_models)
    assert len(loads) == 2
    per_worker = [info["loads"].get(str(tiny_dir), 0) for info in loads.values()]
    assert max(per_worker) == 1 and sum(per_worker) >= 1  # 8 partitions, at most one load per process


def test_loaded_models_are_refused_for_dask(questions, tiny_dir):
    from jevlaya_lab.decisions.agent import Agent

    with pytest.raises(TypeError, match="checkpoint=<its source>"):
        decide(dd.from_pandas(_table(4), npartitions=2), questions(), agent=Agent(tiny_dir), state="body")


class _Slow:
    """Makes every batch take a while, so a worker can be killed while rows are in flight."""

    def on_predict_start(self, ctx) -> None:
        time.sleep(0.25)


def test_a_worker_killed_mid_run_loses_and_duplicates_no_row(client, questions, tiny_dir):
    table = _table(48)
    expected = decide(table, questions(), checkpoint=tiny_dir, state="body", batch_size=4, progress=False)
    lazy = decide(dd.from_pandas(table, npartitions=16), questions(), checkpoint=tiny_dir, state="body",
                  batch_size=4, hooks=[_Slow()])
    future = client.compute(lazy)
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 60
    victim = None
    while time.monotonic() < deadline and victim is None:  # kill a worker while it runs a partition
        processing = client.processing()
        busy = [address for address, keys in processing.items() if keys and address in pids]
        if busy:
            victim = busy[0]
        else:
            time.sleep(0.05)
    assert victim is not None, "no worker was busy"
    os.kill(pids[victim], signal.SIGKILL)
    got = future.result(timeout=120)
    assert len(got) == len(table) and got.index.is_unique
    pd.testing.assert_frame_equal(got, expected, check_exact=False, atol=1e-6, rtol=0, check_index_type=False)
