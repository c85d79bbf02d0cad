"""``jevlaya-lab ask``: one routed answer from the pool, streamed to the terminal; and
``jevlaya-lab llms list`` / ``llms env``: the pool and the provider keys (never their values).

    jevlaya-lab ask "Write a haiku about brokers"            # local SmolLM2 when no keys exist
    jevlaya-lab ask --fastest-of 2 --wait 20 --operation write "..."
    jevlaya-lab ask --db ./broker.db --calls 5 "..."         # then print the last journal rows

The answer streams to stdout; the model, call id and usage go to stderr, so the text can be
piped. Exit code 1 (with the error on stderr) when no model could answer.
"""

from __future__ import annotations

import argparse
import json
import sys

from jevlaya_lab.broker.errors import LLMRequestError, StreamReplacementError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jevlaya-lab ask", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt")
    parser.add_argument("--db", help="SQLite journal (default: the per-user broker.db)")
    parser.add_argument("--operation", help="label for ratings and learned quality")
    parser.add_argument("--wait", type=float, help="seconds for the whole answer")
    parser.add_argument("--fastest-of", type=int, help="race this many models")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--calls", type=int, default=0, metavar="N",
                        help="print the last N journal rows afterwards (JSON lines)")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from jevlaya_lab.broker.sync import Broker

    with Broker(args.db) as broker:
        try:
            with broker.stream(args.prompt, operation=args.operation, wait=args.wait,
                               fastest_of=args.fastest_of, max_tokens=args.max_tokens) as stream:
                try:
                    for delta in stream:
                        sys.stdout.write(delta)
                        sys.stdout.flush()
                except StreamReplacementError as exc:
                    sys.stdout.write("\n--- replaced by the answer that finished first ---\n")
                    sys.stdout.write(exc.replacement.text)
            sys.stdout.write("\n")
            print(f"[{stream.llm_name} call_id={stream.call_id} usage={stream.usage}]",
                  file=sys.stderr)
        except LLMRequestError as exc:
            print(f"jevlaya-lab ask: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        for row in reversed(broker.calls(limit=args.calls)) if args.calls else []:
            print(json.dumps(row, default=str), file=sys.stderr)
    return 0


def _llms_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jevlaya-lab llms", description="The LLM pool: 'list' shows every registry model "
        "(in the pool or not, key, cooldown, why it cannot start); 'env' shows which provider "
        "keys are set and where from, never their values.")
    parser.add_argument("what", choices=("list", "env"))
    parser.add_argument("--db", help="SQLite journal (default: the per-user broker.db)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


def llms_command(argv: list[str]) -> int:
    args = _llms_parser().parse_args(argv)
    from jevlaya_lab.broker.sync import Broker

    with Broker(args.db) as broker:
        snapshot = broker.snapshot()
        if args.what == "list":
            rows = [{"name": name, "model": s["model"], "base_url": s["base_url"],
                     "in_pool": s["in_pool"], "key": s["key"], "disabled": s["disabled"],
                     "cooling_until": s["cooldown_until"], "unavailable": s["unavailable"]}
                    for name, s in snapshot.items()]
        else:
            refs: dict[str, list[str]] = {}
            for name, s in snapshot.items():
                ref = s["api_key_ref"]
                if ref:
                    refs.setdefault(ref, []).append(name)
            rows = [{"key": ref, "set": broker.engine.keys.source(ref) is not None,
                     "from": broker.engine.keys.source(ref), "models": names}
                    for ref, names in sorted(refs.items())]
    for row in rows:
        if args.json:
            print(json.dumps(row, default=str))
        elif args.what == "list":
            state = "in pool" if row["in_pool"] else "not in pool"
            notes = [f"key {row['key']}"] + (["disabled"] if row["disabled"] else []) + (
                [f"cooling until {row['cooling_until']:%H:%M:%S}"] if row["cooling_until"]
                else []) + ([f"cannot start: {row['unavailable']}"] if row["unavailable"]
                            else [])
            print(f"{row['name']:<32} {state:<12} {', '.join(notes)}")
        else:
            where = f"set ({row['from']})" if row["set"] else "missing"
            print(f"{row['key']:<24} {where:<20} {', '.join(row['models'])}")
    return 0
