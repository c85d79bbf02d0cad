"""The decision commands: ``jevlaya-lab predict`` (an Agent answers states, one JSON line each)
and ``jevlaya-lab route`` (which checkpoint the Router picks, and why; never loads a model).

They read arguments and print; the engines they drive (:mod:`jevlaya_lab.decisions.agent`,
:mod:`jevlaya_lab.decisions.router`) are imported when a command runs, so ``jevlaya-lab --help``
stays cheap. Bad input prints one line on stderr and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["predict_command", "route_command"]


def _read_questions(args: Any) -> dict[str, Any]:
    if args.preset:
        from jevlaya_lab.decisions import presets

        maker = getattr(presets, f"{args.preset}_questions", None)
        if maker is None:
            raise ValueError(f"--preset {args.preset!r} is unknown; choose one of "
                             "triage, email, guard, moderation, router")
        return maker()
    text = args.questions
    if not text.lstrip().startswith("{"):
        text = Path(text).expanduser().read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--questions is not valid JSON ({exc}); pass a JSON object or a file "
                         "holding one") from None


def _read_states(args: Any) -> list[Any]:
    states: list[Any] = list(args.state or [])
    for index, text in enumerate(args.state_json or []):
        try:
            states.append(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ValueError(f"--state-json #{index + 1} is not valid JSON ({exc})") from None
    if args.states_file:
        path = Path(args.states_file).expanduser()
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if path.suffix == ".jsonl":
            for number, line in enumerate(lines, 1):
                try:
                    states.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number} is not valid JSON ({exc})") from None
        else:
            states.extend(lines)
    if not states and not sys.stdin.isatty():
        states.extend(line for line in sys.stdin.read().splitlines() if line.strip())
    if not states:
        raise ValueError("no states given; use --state TEXT, --state-json JSON, --states-file PATH "
                         "or pipe lines on stdin")
    return states


def predict_command(argv: list[str]) -> int:
    """``jevlaya-lab predict``: answer typed questions about states; one JSON result per line."""
    from jevlaya_lab.decisions.agent import Agent
    from jevlaya_lab.hooks.recorder import EventRecorder

    parser = argparse.ArgumentParser(
        prog="jevlaya-lab predict",
        description="Answer typed questions about states with a decision checkpoint. States come "
                    "from --state/--state-json/--states-file or stdin lines; results are JSON lines.")
    parser.add_argument("--model", default="mini-en",
                        help="checkpoint directory, bundled name (mini-en, mini-multi) or hub id")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--questions", help="questions as a JSON object, or a path to a JSON file")
    group.add_argument("--preset", help="triage, email, guard, moderation or router")
    parser.add_argument("--state", action="append", help="a text state (repeatable)")
    parser.add_argument("--state-json", action="append", help="a JSON state: dict or list (repeatable)")
    parser.add_argument("--states-file", help="one state per line (.jsonl: one JSON state per line)")
    parser.add_argument("--max-len", type=int)
    parser.add_argument("--head-max-len", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--min-confidence", type=float)
    parser.add_argument("--device")
    parser.add_argument("--events", action="store_true", help="print the hook timeline to stderr")
    args = parser.parse_args(argv)
    recorder = EventRecorder()
    try:
        questions = _read_questions(args)
        states = _read_states(args)
        agent = Agent(args.model, device=args.device, hooks=[recorder] if args.events else None)
        results = agent.predict_batch(states, questions, batch_size=args.batch_size,
                                      max_len=args.max_len, head_max_len=args.head_max_len,
                                      min_confidence=args.min_confidence)
    except (TypeError, ValueError, OSError, RuntimeError) as exc:
        print(f"jevlaya-lab predict: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(json.dumps(result, ensure_ascii=False))
    if args.events:
        origin = recorder.events[0].t if recorder.events else 0.0
        for event in recorder.events:
            print(f"{(event.t - origin) * 1000:9.2f} ms  {event.event:<17} run={(event.run_id or '-')[:8]} "
                  f"model={event.model}", file=sys.stderr)
    return 0


def route_command(argv: list[str]) -> int:
    """``jevlaya-lab route``: print the routing decision for a text or JSON state (never loads)."""
    parser = argparse.ArgumentParser(prog="jevlaya-lab route",
                                     description="Show which checkpoint the Router picks for a state, and why.")
    parser.add_argument("state", nargs="?", help="the state text; '-' or nothing reads stdin")
    parser.add_argument("--json", action="store_true", help="parse the state as JSON (dict or list)")
    parser.add_argument("--model")
    parser.add_argument("--task")
    parser.add_argument("--lang")
    parser.add_argument("--laya", action="store_true", help="use the public Laya hub registry")
    parser.add_argument("--explain", action="store_true", help="include every step of the decision chain")
    args = parser.parse_args(argv)
    from jevlaya_lab.decisions.router import Router

    text = sys.stdin.read() if args.state in (None, "-") else args.state
    try:
        state = json.loads(text) if args.json else text
        router = Router.laya() if args.laya else Router()
        decision = router.route(state, model=args.model, task=args.task, lang=args.lang, explain=args.explain)
    except (TypeError, ValueError) as exc:
        print(f"jevlaya-lab route: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(decision, ensure_ascii=False, indent=2))
    return 0
