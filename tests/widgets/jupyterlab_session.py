"""A real JupyterLab on 127.0.0.1 driven by headless Debian Chromium, for the tutorial tests.

``JupyterLabServer`` starts ``python -m jupyter lab`` from this interpreter with a token, every
Jupyter directory (runtime, config, data, workspaces, user settings) in a temporary folder, a
copy of the tutorials as its root and ``--allow-root``; it stops the server through its own
``/api/shutdown`` (which shuts the kernels down) and then by its pid. Its user settings render
every cell (no windowing, so every view exists in the DOM), and turn off news and update checks
and the extension manager's PyPI look-ups (offline).

``LabPage`` wraps one Chromium page on the running JupyterLab: it opens a notebook, runs all
cells through the application's own commands (what Run ▸ Run All Cells calls), waits for the
kernel, and reads the notebook's outputs and the browser console. ``CONTRAST_JS`` computes, for
every element that shows text inside a view, the WCAG contrast of its text colour against the
background it is drawn on (ancestor backgrounds composited, opacity applied).
Only for tests.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"  # Debian's; never a downloaded browser
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-quic"]
DARK = "JupyterLab Dark"
LIGHT = "JupyterLab Light"
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False, "fetchNews": "false"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_fast_parameters(source: Path, target: Path) -> None:
    """Copy a tutorial with ``fast = True`` in its parameters cell (it defaults to the real
    models), as papermill injects it elsewhere."""
    import nbformat

    book = nbformat.read(source, as_version=4)
    cells = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1 and "fast = False" in cells[0].source, source
    cells[0].source = cells[0].source.replace("fast = False", "fast = True")
    nbformat.write(book, target)


class JupyterLabServer:
    """``with JupyterLabServer(root, notebooks) as lab: lab.url("name.ipynb")``."""

    def __init__(self, root: Path, notebooks: list[Path], *, timeout: float = 60.0) -> None:
        self.root = Path(root)
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.timeout = timeout
        self.dirs = {name: self.root / name for name in
                     ("runtime", "config", "data", "workspaces", "settings", "notebooks")}
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        for nb in notebooks:  # tiny models here: the real ones run in the Binder image test
            with_fast_parameters(nb, self.dirs["notebooks"] / nb.name)
        for rel, value in SETTINGS.items():
            path = self.dirs["settings"] / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value), "utf-8")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "jupyterlab.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "", workspace: str | None = None) -> str:
        """The URL of ``path`` in JupyterLab; a fresh ``workspace`` restores no other tabs."""
        where = f"workspaces/{workspace}/tree" if workspace else "tree"
        return f"{self.base}/lab/{where}/{path}?token={self.token}"

    def __enter__(self) -> JupyterLabServer:
        env = {**os.environ,
               "JUPYTER_RUNTIME_DIR": str(self.dirs["runtime"]),
               "JUPYTER_CONFIG_DIR": str(self.dirs["config"]),
               "JUPYTER_DATA_DIR": str(self.dirs["data"]),
               "JUPYTERLAB_WORKSPACES_DIR": str(self.dirs["workspaces"]),
               "JUPYTERLAB_SETTINGS_DIR": str(self.dirs["settings"]),
               "JUPYTER_PLATFORM_DIRS": "1", "OMP_NUM_THREADS": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        # the tutorials' kernel ("python3") is this interpreter, with the same PYTHONPATH
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
               f"--port={self.port}", "--port-retries=0", "--allow-root",
               f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.dirs['notebooks']}",
               "--LabApp.expose_app_in_browser=True",
               "--LabApp.extension_manager=readonly",
               "--LabApp.news_url=", "--ServerApp.shutdown_no_activity_timeout=900"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.dirs["notebooks"], start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}):\n"
                                   + self.log.read_text(errors="replace")[-3000:])
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}",
                                            timeout=2):
                    return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {self.timeout} s:\n"
                           + self.log.read_text(errors="replace")[-3000:])

    def api(self, method: str, path: str) -> Any:
        req = urllib.request.Request(f"{self.base}/api/{path}?token={self.token}",
                                     method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=20) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def stop_kernels(self) -> None:
        """End every session and its kernel (one tutorial's kernel at a time stays alive)."""
        for session in self.api("GET", "sessions"):
            self.api("DELETE", f"sessions/{session['id']}")

    def stop(self) -> None:
        """Shut the server (and its kernels) down, then make sure its pid is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            req = urllib.request.Request(f"{self.base}/api/shutdown?token={self.token}",
                                         method="POST", data=b"")
            urllib.request.urlopen(req, timeout=10).close()
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def __exit__(self, *exc: Any) -> None:
        self.stop()


NOTEBOOK = "window.__jvNotebook"  # the panel open() opened
KERNEL_IDLE = (f"(() => {{ const w = {NOTEBOOK}; const k = w && w.sessionContext && "
               "w.sessionContext.session && w.sessionContext.session.kernel; "
               "return !!k && k.status === 'idle'; })()")
NOT_RUNNING = (f"{KERNEL_IDLE} && ![...{NOTEBOOK}.node.querySelectorAll('.jp-InputPrompt')]"
               ".some((e) => e.textContent.includes('*'))")
FINISHED = f"""(() => {{
  const cells = [...{NOTEBOOK}.content.model.cells].filter((c) => c.type === "code");
  const last = cells[cells.length - 1];
  const failed = cells.some((c) => c.toJSON().outputs.some((o) => o.output_type === "error"));
  return ({NOT_RUNNING}) && (failed || last.toJSON().execution_count != null);
}})()"""
OUTPUTS_JS = f"""() => {{
  const out = [];
  let i = 0;
  for (const cell of {NOTEBOOK}.content.model.cells) {{
    if (cell.type === "code") out.push({{index: i, source: cell.sharedModel.getSource(),
                                          outputs: cell.toJSON().outputs}});
    i += 1;
  }}
  return out;
}}"""

# WCAG 2 contrast of each text-bearing element in the views against what it is drawn on.
CONTRAST_JS = r"""(selector) => {
  const parse = (c) => {
    const m = c.match(/rgba?\(([^)]+)\)/);
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => {  // top composited over an opaque bottom
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const bg = parse(getComputedStyle(e).backgroundColor);
      if (bg[3] > 0) layers.push(bg);
      if (bg[3] >= 1) break;
    }
    let color = [255, 255, 255, 1];
    for (const layer of layers.reverse()) color = over(layer, color);
    return color;
  };
  const opacity = (el) => {
    let o = 1;
    for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);
    return o;
  };
  const lum = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const results = [];
  for (const root of document.querySelectorAll(selector)) {
    for (const el of [root, ...root.querySelectorAll("*")]) {
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own || el.closest("svg")) continue;
      const style = getComputedStyle(el);
      if (style.visibility === "hidden" || style.display === "none" || !el.getClientRects().length) continue;
      const bg = background(el);
      const fg = over(parse(style.color), bg);
      const text = over([...fg.slice(0, 3), opacity(el)], bg);
      const [l1, l2] = [lum(text), lum(bg)].sort((a, b) => b - a);
      results.push({ text: el.textContent.trim().slice(0, 60), tag: el.tagName,
        cls: String(el.className), ratio: (l1 + 0.05) / (l2 + 0.05),
        color: style.color, background: `rgb(${bg.slice(0, 3).map(Math.round).join(",")})` });
    }
  }
  return results;
}"""


class LabPage:
    """One Chromium page on a running JupyterLab; collects console errors as it goes."""

    def __init__(self, page: Any, lab: JupyterLabServer) -> None:
        self.page = page
        self.lab = lab
        self.console_errors: list[str] = []
        self.opened = 0
        page.on("console", self._on_console)
        # with the stack: a page error says where it was thrown (our views or the front end)
        page.on("pageerror", lambda exc: self.console_errors.append(f"pageerror: {exc}\n{exc.stack}"))

    def _on_console(self, msg: Any) -> None:
        if msg.type == "error":
            self.console_errors.append(f"console.error: {msg.text}")

    def start(self, theme: str) -> None:
        """Load JupyterLab and switch to ``theme``."""
        from playwright.sync_api import Error as PlaywrightError

        for attempt in range(2):
            try:
                self.page.goto(self.lab.url())
                self.page.wait_for_function("window.jupyterapp && window.jupyterapp.started !== undefined"
                                            " && document.querySelector('#jp-main-dock-panel')",
                                            timeout=60_000)
                self.page.evaluate("async () => { await window.jupyterapp.started; await "
                                   "window.jupyterapp.restored; }")
                break
            except PlaywrightError as exc:
                # a fresh JupyterLab may reload its page while it starts ("Resulting promise was
                # garbage collected"): load it once more; any other failure is raised at once
                if attempt or "garbage collected" not in str(exc):
                    raise
        self.set_theme(theme)

    def set_theme(self, theme: str) -> None:
        self.theme_name = theme
        self.page.evaluate("(t) => window.jupyterapp.commands.execute("
                           "'apputils:change-theme', {theme: t})", theme)
        self._wait_theme()

    def _wait_theme(self) -> None:
        theme = self.theme_name
        light = "true" if theme == LIGHT else "false"
        self.page.wait_for_function(
            f"document.body.dataset.jpThemeLight === '{light}' && "
            f"document.body.dataset.jpThemeName === {json.dumps(theme)}", timeout=20_000)

    def open(self, name: str) -> None:
        """Open notebook ``name`` by its URL (shutting down the previous one's kernel), wait
        for its kernel and check the theme survived the reload."""
        self.lab.stop_kernels()
        self.opened += 1  # its own workspace: JupyterLab reopens no earlier notebook
        self.page.goto(self.lab.url(name, workspace=f"jv{self.opened}"))
        self.page.wait_for_function(
            "window.jupyterapp && window.jupyterapp.shell.currentWidget && "
            f"window.jupyterapp.shell.currentWidget.context && "
            f"window.jupyterapp.shell.currentWidget.context.path === {json.dumps(name)}",
            timeout=60_000)
        self.page.evaluate(f"() => {{ {NOTEBOOK} = window.jupyterapp.shell.currentWidget; }}")
        self.page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        self._wait_theme()
        # JupyterLab saved an earlier run's outputs into the file: start from none
        self.page.evaluate("() => window.jupyterapp.commands.execute("
                           "'notebook:clear-all-cell-outputs')")
        self.page.wait_for_function(f"![...{NOTEBOOK}.content.model.cells].some((c) => "
                                    "c.type === 'code' && c.toJSON().outputs.length)",
                                    timeout=10_000)

    def run_all(self, timeout_s: float = 300.0) -> float:
        """Run every cell (Run ▸ Run All Cells) and wait until the kernel is done: the last
        code cell has run, or a cell failed (which stops the run)."""
        started = time.monotonic()
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        for _ in range(2):  # twice, a moment apart: idle between two cells is not the end
            self.page.wait_for_function(FINISHED, timeout=timeout_s * 1000, polling=250)
            self.page.wait_for_timeout(400)
        return time.monotonic() - started

    def outputs(self) -> list[dict[str, Any]]:
        return self.page.evaluate(OUTPUTS_JS)

    def notebook(self) -> Any:
        """The open notebook's DOM node (a playwright locator)."""
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first

    def contrast(self, selector: str) -> list[dict[str, Any]]:
        return self.page.evaluate(CONTRAST_JS, selector)
