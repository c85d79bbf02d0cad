"""Command-line entry points that drive the engines (the ``jevlaya-lab`` subcommands listed in
:mod:`jevlaya_lab.cli`); each takes the remaining argv and returns an exit code."""
