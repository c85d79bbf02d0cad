"""The ``jevlaya-lab`` command.

Each subcommand lives next to the code it drives; this module only maps names to
``module:function`` entries that take the remaining argv and return an exit code, so importing
the CLI stays cheap and adding a subcommand is one line here.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (entry point "module:function", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("jevlaya_lab.decisions.training.cli:main", "train a bundled decision checkpoint (mini-en, mini-multi)"),
    "ask": ("jevlaya_lab.broker.cli:main", "one answer from the LLM pool (local SmolLM2 without keys), streamed"),
    "llms": ("jevlaya_lab.broker.cli:llms_command",
             "the LLM pool (llms list) and which provider keys are set (llms env, never their values)"),
    "serve": ("jevlaya_lab.local.cli:main",
              "serve local chat models over an OpenAI-compatible API, with fault profiles"),
    "predict": ("jevlaya_lab.commands.decisions:predict_command",
                "answer typed questions about states with a decision checkpoint (JSON lines)"),
    "route": ("jevlaya_lab.commands.decisions:route_command",
              "show which checkpoint the Router picks for a state, and why"),
    "notebooks": ("jevlaya_lab.notebooks:notebooks_command",
                  "list or run the tutorial notebooks (each ends with regression checks)"),
    "demo": ("jevlaya_lab.notebooks:demo_command", "run the quickstart tour offline and write a report to reports/"),
    "lab": ("jevlaya_lab.notebooks:lab_command", "JupyterLab on 127.0.0.1 with the tutorials (notebooks/) open"),
    "cache": ("jevlaya_lab.commands.cache:cache_command",
              "what jevlaya_lab built in its cache folder (sizes, last use); --prune DAYS removes the unused"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print("usage: jevlaya-lab <command> [options]\n\ncommands:")
        for name, (_, text) in sorted(COMMANDS.items()):
            print(f"  {name:<12} {text}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"jevlaya-lab: unknown command {name!r}; choose one of: {', '.join(sorted(COMMANDS))}",
              file=sys.stderr)
        return 2
    module, func = COMMANDS[name][0].split(":")
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
