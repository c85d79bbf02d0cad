"""Workbench benchmark: journal analysis cost, hook-timeline overhead and stream throttling.

Run: ``.venv/bin/python bench/workbench.py`` (under a minute on 2 CPU cores; ``--quick`` for a
smoke run). Prints a table and writes ``bench/results/workbench.json``.

1. ``analysis.load_journal`` + ``summary`` + the per-model helpers on real SQLite journals of
   1k / 10k / 100k attempt rows, against the named alternative ``pandas.read_sql_query`` of the
   raw ``attempts`` table (ratio = our full analysis / the bare read).
2. µs per hook event of ``HookTimeline`` (a live widget) against ``EventRecorder`` (the
   built-in recording hook), on the same ``PredictContext`` objects.
3. Trait pushes a ``StreamView``-style ``Throttle`` makes for 2,000 deltas arriving over ~1 s,
   at throttle 0 (every delta), 0.05 s (the default) and 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from jevlaya_lab import analysis  # noqa: E402
from jevlaya_lab.hooks import PredictContext  # noqa: E402
from jevlaya_lab.hooks.recorder import EventRecorder  # noqa: E402
from jevlaya_lab.journal import open_store  # noqa: E402
from jevlaya_lab.widgets.throttle import Throttle  # noqa: E402

STATUSES = ["ok"] * 85 + ["rate_limited"] * 5 + ["unavailable"] * 4 + ["error"] * 2 + \
    ["superseded"] * 4


def synthetic_journal(path: Path, rows: int, seed: int = 0) -> None:
    """``rows`` attempts over 5 models and 3 operations, written through the journal Store."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    attempts, ratings = [], []
    for i in range(rows):
        status = rng.choice(STATUSES)
        trace = uuid.UUID(int=rng.getrandbits(128)).hex if status != "superseded" or not attempts \
            else attempts[-1]["trace_id"]
        row = {"call_id": uuid.UUID(int=rng.getrandbits(128)).hex, "trace_id": trace,
               "llm_name": f"model-{rng.randrange(5)}", "operation": rng.choice(["qa", "sum", "code"]),
               "scope": None, "status": status,
               "called_at": (start + timedelta(seconds=i)).isoformat(),
               "latency_ms": rng.lognormvariate(6, 0.5), "first_token_ms": rng.lognormvariate(5, 0.5),
               "http_status": {"ok": 200, "rate_limited": 429, "unavailable": 503}.get(status),
               "error_detail": None if status == "ok" else f"{status}: simulated",
               "prompt_tokens": rng.randrange(10, 500), "completion_tokens": rng.randrange(1, 300)}
        attempts.append(row)
        if status == "ok" and rng.random() < 0.2:
            ratings.append({"call_id": row["call_id"], "trace_id": trace, "llm_name": row["llm_name"],
                            "operation": row["operation"], "score": rng.random(),
                            "rated_at": row["called_at"]})
    store = open_store(path)
    store.append(attempts, ratings)
    store.close()


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bench_analysis(sizes: list[int], repeats: int) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            db = Path(tmp) / f"journal-{n}.db"
            synthetic_journal(db, n)

            def ours() -> None:
                j = analysis.load_journal(db)
                analysis.summary(j)
                analysis.calls_per_model(j)
                analysis.latency_percentiles(j)
                analysis.error_rates(j)
                analysis.race_wins(j)

            def bare() -> None:
                with sqlite3.connect(db) as con:
                    pd.read_sql_query("SELECT * FROM attempts", con)

            t_ours, t_bare = best_of(ours, repeats), best_of(bare, repeats)
            t_load = best_of(lambda: analysis.load_journal(db), repeats)
            out.append({"rows": n, "load_ms": round(t_load * 1e3, 1),
                        "full_analysis_ms": round(t_ours * 1e3, 1),
                        "read_sql_query_ms": round(t_bare * 1e3, 1),
                        "ratio_full_vs_read_sql": round(t_ours / t_bare, 2)})
    return out


def bench_hooks(events: int) -> dict:
    from jevlaya_lab.widgets import HookTimeline

    contexts = [PredictContext(states=["s"], questions={}, model="m") for _ in range(events // 2)]

    def drive(hook) -> float:
        started = time.perf_counter()
        for ctx in contexts:
            hook.on_predict_start(ctx)
            hook.on_predict_end(ctx)
        return (time.perf_counter() - started) / (2 * len(contexts)) * 1e6

    recorder_us = statistics.median(drive(EventRecorder()) for _ in range(3))
    timeline_us = statistics.median(drive(HookTimeline(throttle=0.1, max_events=events))
                                    for _ in range(3))
    return {"events": 2 * len(contexts), "event_recorder_us": round(recorder_us, 2),
            "hook_timeline_us": round(timeline_us, 2),
            "ratio_timeline_vs_recorder": round(timeline_us / recorder_us, 2)}


def bench_throttle(deltas: int, seconds: float) -> list[dict]:
    out = []
    for interval in (0.0, 0.05, 0.2):
        pushes = []
        throttle = Throttle(lambda: pushes.append(time.perf_counter()), interval)
        gap = seconds / deltas
        started = time.perf_counter()
        for i in range(deltas):
            while time.perf_counter() - started < i * gap:
                pass
            throttle.mark()
        throttle.flush()
        out.append({"throttle_s": interval, "deltas": deltas, "pushes": len(pushes)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    results = {
        "analysis": bench_analysis(sizes, repeats=2 if args.quick else 3),
        "hooks": bench_hooks(2_000 if args.quick else 20_000),
        "throttle": bench_throttle(2_000, 0.3 if args.quick else 1.0),
    }
    print(f"{'rows':>8} {'load ms':>9} {'analysis ms':>12} {'read_sql ms':>12} {'ratio':>6}")
    for r in results["analysis"]:
        print(f"{r['rows']:>8} {r['load_ms']:>9} {r['full_analysis_ms']:>12} "
              f"{r['read_sql_query_ms']:>12} {r['ratio_full_vs_read_sql']:>6}")
    h = results["hooks"]
    print(f"\nhook event: EventRecorder {h['event_recorder_us']} µs, HookTimeline "
          f"{h['hook_timeline_us']} µs (x{h['ratio_timeline_vs_recorder']}) over {h['events']} events")
    print("\nthrottle: " + ", ".join(f"{t['throttle_s']} s -> {t['pushes']} pushes"
                                     for t in results["throttle"]) + " for 2000 deltas")
    out = ROOT / "bench" / "results" / "workbench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
