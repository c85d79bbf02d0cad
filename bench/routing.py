"""Routing benchmark: cost of ``Router.route()`` and the gain of ``predict_batch`` over ``predict``.

Run: ``.venv/bin/python bench/routing.py`` (about a minute on 2 CPU cores). Prints a table and
writes ``bench/results/routing.json``.

1. µs per ``route()`` (detection included, nothing loaded) for a short English message, a long
   English document, a long non-English document and a mixed-script ticket.
2. Requests per second for one mixed batch routed by detection to two tiny checkpoints
   (English and Spanish states) with ``predict_batch`` versus one ``predict`` call per request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jevlaya_lab.decisions.router import Router  # noqa: E402

ENGLISH = ("I was charged twice for invoice 4411 last month and the support page keeps telling me "
           "that my account is locked, so I would like a refund and someone to call me back. ")
SPANISH = ("Me cobraron dos veces la factura 4411 el mes pasado y la página de soporte dice que mi "
           "cuenta está bloqueada, así que quiero un reembolso y que alguien me llame. ")
STATES = {
    "short": "refund please, charged twice",
    "long_en": {"subject": "Billing problem", "body": ENGLISH * 60},  # ~2,000 words
    "long_es": {"subject": "Problema de facturación", "body": SPANISH * 60},
    "mixed_script": {
        "subject": "Invoice 4411 charged twice",
        "body": ENGLISH * 3,
        "customer_note": "Меня зовут Иван Петров, прошу вернуть деньги.",
        "agent_note": "請求書4411の二重請求について確認してください。",
    },
}
QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "bug": "something is broken", "other": ""}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "somewhat urgent", "very urgent"]},
    "angry": {"type": "noul", "instructions": "The customer is angry."},
}


def time_route(router: Router, state, repeats: int = 5, budget_s: float = 0.4) -> float:
    """Median µs per route() over `repeats` timed loops of about `budget_s` each."""
    router.route(state)
    n, started = 0, time.perf_counter()
    while time.perf_counter() - started < budget_s / 4:
        router.route(state)
        n += 1
    loops = max(1, n * 4)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(loops):
            router.route(state)
        samples.append((time.perf_counter() - t0) / loops * 1e6)
    return statistics.median(samples)


def _probabilities(answer: dict) -> dict:
    return answer.get("probabilities") or {"true": answer["noul"]}


def bench_batch(n_requests: int, repeats: int) -> dict:
    import torch

    from jevlaya_lab.decisions.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: make_tiny_checkpoint(Path(tmp) / name, seed=seed, hidden_size=64, num_layers=2,
                                             num_heads=2)
                  for seed, name in enumerate(("english", "multilingual"))}
        router = Router(models, max_loaded=2)
        requests = [{"state": f"{(ENGLISH if i % 2 else SPANISH)[: 80 + 7 * i]} #{i}", "questions": QUESTIONS}
                    for i in range(n_requests)]
        used = {d.model for d in router.route_batch(requests)}
        assert used == {"english", "multilingual"}, used
        router.preload()
        router.predict_batch(requests)  # warm-up
        batch_s, sorted_s, single_s = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            batched = router.predict_batch(requests)
            batch_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            router.predict_batch(requests, sort_by_length=True, batch_size=8)
            sorted_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            singles = [router.predict(r["state"], r["questions"]) for r in requests]
            single_s.append(time.perf_counter() - t0)
        for a, b in zip(batched, singles):  # same answers either way
            for qid in QUESTIONS:
                pa, pb = (_probabilities(x["answers"][qid]) for x in (a, b))
                assert all(abs(pa[k] - pb[k]) < 2e-3 for k in pa), (qid, pa, pb)
    b, b8, s = (statistics.median(x) for x in (batch_s, sorted_s, single_s))
    return {"requests": n_requests, "checkpoints": 2, "questions": len(QUESTIONS),
            "predict_batch_s": round(b, 4), "predict_batch_sorted_bs8_s": round(b8, 4),
            "predict_each_s": round(s, 4),
            "predict_batch_req_per_s": round(n_requests / b, 1),
            "predict_batch_sorted_bs8_req_per_s": round(n_requests / b8, 1),
            "predict_each_req_per_s": round(n_requests / s, 1), "speedup": round(s / b, 2),
            "speedup_sorted_bs8": round(s / b8, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    router = Router()  # default registry; route() never loads, so no checkpoint is needed
    route_us = {name: round(time_route(router, state), 1) for name, state in STATES.items()}
    decisions = {name: router.route(state).model for name, state in STATES.items()}
    batch = bench_batch(args.requests, args.repeats)

    print("route() cost (median µs per call, detection included)")
    print(f"  {'state':<14}{'chars':>8}{'µs/route':>12}  model")
    for name, state in STATES.items():
        chars = len(json.dumps(state, ensure_ascii=False)) if not isinstance(state, str) else len(state)
        print(f"  {name:<14}{chars:>8}{route_us[name]:>12.1f}  {decisions[name]}")
    print(f"\npredict_batch vs predict per request ({batch['requests']} requests, 2 tiny checkpoints, "
          f"{batch['questions']} questions)")
    print(f"  {'mode':<22}{'seconds':>10}{'req/s':>10}")
    print(f"  {'predict_batch':<22}{batch['predict_batch_s']:>10.3f}{batch['predict_batch_req_per_s']:>10.1f}")
    print(f"  {'  sorted, batch_size=8':<22}{batch['predict_batch_sorted_bs8_s']:>10.3f}"
          f"{batch['predict_batch_sorted_bs8_req_per_s']:>10.1f}")
    print(f"  {'predict per request':<22}{batch['predict_each_s']:>10.3f}{batch['predict_each_req_per_s']:>10.1f}")
    print(f"  speedup: {batch['speedup']}x (sorted, batch_size=8: {batch['speedup_sorted_bs8']}x)")

    out = ROOT / "bench" / "results" / "routing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"route_us": route_us, "route_model": decisions, "batch": batch}, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
