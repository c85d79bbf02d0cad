"""A minimal anywidget host for a real browser: serves widgets on 127.0.0.1 without Jupyter.

The page imports each widget's real ES module and gives its ``render`` a model object with the
anywidget front-end API (``get``, ``set``, ``on``, ``save_changes``, ``send``) backed by HTTP:
``GET /state/<i>`` is the widget's ``get_state()``, ``POST /set/<i>`` calls ``set_state`` (so
Python observers run, e.g. RoutingView routes what was typed), ``POST /msg/<i>`` delivers a
custom message (the buttons). The page polls the state so live updates show. Only for tests.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>jevlaya widgets</title>
<style>body{font-family:sans-serif;margin:12px} .slot{margin-bottom:16px}</style>
<style>%(css)s</style></head><body>%(slots)s%(extra)s
<script type="module">
const n = %(n)d;
async function mount(i) {
  const listeners = {};
  let state = await (await fetch(`/state/${i}`)).json();
  const pending = {};
  const fire = (next) => {
    const old = state; state = next;
    for (const k of Object.keys(next)) {
      if (JSON.stringify(old[k]) !== JSON.stringify(next[k])) (listeners[`change:${k}`] || []).forEach((cb) => cb());
    }
  };
  const refresh = async () => fire(await (await fetch(`/state/${i}`)).json());
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state = { ...state, [k]: v }; pending[k] = v; },
    on: (evt, cb) => { (listeners[evt] = listeners[evt] || []).push(cb); },
    off: () => {},
    save_changes: async () => {
      const body = JSON.stringify(pending); for (const k in pending) delete pending[k];
      await fetch(`/set/${i}`, { method: "POST", body }); await refresh();
    },
    send: async (msg) => { await fetch(`/msg/${i}`, { method: "POST", body: JSON.stringify(msg) }); await refresh(); },
  };
  const mod = await import(`/esm/${i}.js`);
  await mod.default.render({ model, el: document.getElementById(`w${i}`) });
  setInterval(refresh, 200);
}
for (let i = 0; i < n; i++) await mount(i);
document.body.dataset.ready = String(n);
</script></body></html>"""


class WidgetHost:
    """``with WidgetHost([w1, w2]) as host: page.goto(host.url)``; ``extra`` HTML snippets
    (e.g. plotly figures with their inlined plotly.js) follow the widgets on the page."""

    def __init__(self, widgets: list[Any], extra: list[str] | None = None) -> None:
        self.widgets = widgets
        self.extra = extra or []
        host = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _reply(self, body: bytes, ctype: str, status: int = 200) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                parts = self.path.strip("/").split("/")
                if self.path == "/":
                    self._reply(host.page().encode(), "text/html; charset=utf-8")
                elif parts[0] == "esm":
                    widget = host.widgets[int(parts[1].removesuffix(".js"))]
                    self._reply(str(widget._esm).encode(), "text/javascript; charset=utf-8")
                elif parts[0] == "state":
                    state = host.widgets[int(parts[1])].get_state()
                    state = {k: v for k, v in state.items() if k not in ("_esm", "_css")}
                    self._reply(json.dumps(state, default=str).encode(), "application/json")
                else:
                    self._reply(b"not found", "text/plain", 404)

            def do_POST(self) -> None:  # noqa: N802
                kind, index = self.path.strip("/").split("/")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                widget = host.widgets[int(index)]
                if kind == "set":
                    widget.set_state(body)
                else:
                    widget._handle_custom_msg(body, [])
                self._reply(b"{}", "application/json")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def page(self) -> str:
        css = self.widgets[0]._css if self.widgets else ""
        slots = "".join(f'<div class="slot" id="w{i}"></div>' for i in range(len(self.widgets)))
        extra = "".join(f'<div class="extra">{html}</div>' for html in self.extra)
        return PAGE % {"css": css, "slots": slots, "extra": extra, "n": len(self.widgets)}

    def __enter__(self) -> WidgetHost:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
