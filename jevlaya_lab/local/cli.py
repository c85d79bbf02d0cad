"""``jevlaya-lab serve``: run the local OpenAI-compatible server as a process.

    jevlaya-lab serve                                  # SmolLM2 on 127.0.0.1:8765
    jevlaya-lab serve --model tiny --model tiny:1 --fault tiny-1=rate-limited,every=2
    jevlaya-lab serve --model fast=tiny:3 --model ./my-model --port 0 --stop-after 600

A model is ``[NAME=]SOURCE`` with SOURCE one of ``tiny`` / ``tiny:SEED`` / ``smollm2`` / a model
directory / a ``.gguf`` file / a hub id; a fault is ``NAME=SPEC`` with SPEC a preset and/or
``key=value`` pairs (see ``FaultProfile.parse``). The API key, if any, is read from the
environment variable named by ``--api-key-env`` so it never shows in the process list.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from jevlaya_lab.local.errors import ChatRequestError, FaultProfileError, LocalModelError
from jevlaya_lab.local.faults import FAULT_PRESETS, FaultProfile
from jevlaya_lab.local.generation import ChatBackend
from jevlaya_lab.local.limits import DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT_S

DEFAULT_PORT = 8765


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jevlaya-lab serve", description=__doc__.replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=[], metavar="[NAME=]SOURCE",
                        help="model to serve (repeatable; default: smollm2)")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME=SPEC",
                        help=f"fault profile for a served model (repeatable); presets: {', '.join(FAULT_PRESETS)}")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = any free)")
    parser.add_argument("--api-key-env", metavar="VAR", help="require 'Authorization: Bearer $VAR'")
    parser.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S, metavar="SECONDS",
                        help=f"time a client has to send a whole request (default {DEFAULT_READ_TIMEOUT_S:g})")
    parser.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                        help=f"open connections served at once; more get a 503 (default {DEFAULT_MAX_CONNECTIONS})")
    parser.add_argument("--stop-after", type=float, metavar="SECONDS", help="stop after this many seconds")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="torch threads for generation (1 is fastest when the CPU is shared)")
    parser.add_argument("--backend", choices=("auto", "llama.cpp", "transformers"), default=None,
                        help="how GGUF models (smollm2) run: llama.cpp when installed (auto, the default) "
                             "or transformers; other models always use transformers")
    return parser


def _load(given: str, backend: str | None = None) -> tuple[str, ChatBackend]:
    from jevlaya_lab.local.loading import load_chat_model
    from jevlaya_lab.local.tiny import tiny_chat_model

    name, _, source = given.rpartition("=")
    model: ChatBackend
    if source == "tiny" or source.startswith("tiny:"):
        seed_text = source.partition(":")[2] or "0"
        if not seed_text.isdigit():
            raise ChatRequestError("--model", given, "use tiny:SEED with a whole-number seed, e.g. tiny:3")
        model = tiny_chat_model(int(seed_text), name=name or None)
    else:
        model = load_chat_model(source, name=name or None, backend=backend)
    return model.name, model


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from jevlaya_lab.local.server import serve

    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ChatRequestError("--threads", args.threads, "use a whole number >= 1")
            import torch

            torch.set_num_threads(args.threads)
        faults = {}
        for spec in args.fault:
            name, sep, profile = spec.partition("=")
            if not sep or not name:
                raise FaultProfileError(f"--fault {spec!r} is invalid: use NAME=SPEC, e.g. tiny-1=rate-limited")
            faults[name] = FaultProfile.parse(profile)
        models = dict(_load(given, args.backend) for given in args.model or ["smollm2"])
        api_key = None
        if args.api_key_env:
            api_key = os.environ.get(args.api_key_env)
            if not api_key:
                raise ChatRequestError("--api-key-env", args.api_key_env, "set that environment variable to the key")
        server = serve(models, faults=faults, host=args.host, port=args.port, api_key=api_key,
                       read_timeout=args.read_timeout, max_connections=args.max_connections)
    except (LocalModelError, ChatRequestError, FaultProfileError, LookupError, OSError) as exc:
        print(f"jevlaya-lab serve: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    listed = ", ".join(f"{n} ({getattr(m, 'backend', 'transformers')})"
                       + (f" [fault: {faults[n]}]" if n in faults else "") for n, m in models.items())
    print(f"serving {server.base_url} models: {listed}", flush=True)
    deadline = None if args.stop_after is None else time.monotonic() + args.stop_after
    try:
        while not server.wait(0.5):
            if deadline is not None and time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        pass
    server.stop()
    print("stopped", flush=True)
    return 0
