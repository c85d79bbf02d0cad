"""Minimal widget hosts for a real browser: serve widgets on 127.0.0.1 without Jupyter.

``WidgetHost`` (anywidgets): the page imports each widget's real ES module and gives its
``render`` a model object with the anywidget front-end API (``get``, ``set``, ``on``,
``save_changes``, ``send``) backed by HTTP: ``GET /state/<i>`` is the widget's
``get_state()``, ``POST /set/<i>`` calls ``set_state`` (so Python observers run, e.g.
RoutingView routes what was typed), ``POST /msg/<i>`` delivers a custom message (the buttons).

``IpywidgetsHost`` (ipywidgets compositions such as ``JournalDashboard``): ``GET /state`` is
the protocol state of every widget in the trees (``get_state()``, children as
``IPY_MODEL_<id>`` references), which the page draws the way ipywidgets' own views do for the
models used here: an ``HTML`` widget's ``value`` becomes the ``innerHTML`` of its element (so
anything the Python side fails to escape becomes live markup), boxes lay out their children, a
``Button`` sends ipywidgets' ``{"event": "click"}`` message to ``POST /msg/<model_id>``, a
``Tab`` shows its titles. Other models (plotly's figures) show as a labelled placeholder: the
@jupyter-widgets manager itself cannot be installed offline.

Both pages poll the state so live updates show. Only for tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANYWIDGET_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>jevlaya widgets</title>
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

IPYWIDGETS_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>jevlaya ipywidgets</title>
<style>body{font-family:sans-serif;margin:12px} .slot{margin-bottom:16px}
.widget-hbox{display:flex;flex-direction:row;gap:8px} .widget-vbox{display:flex;flex-direction:column}
.widget-tab-bar span{margin-right:8px;font-weight:bold}</style>
<style>%(css)s</style></head><body>%(slots)s
<script type="module">
const roots = %(roots)s;
let seen = "", models = {};
function send(id, msg) {
  return fetch(`/msg/${id}`, { method: "POST", body: JSON.stringify(msg) }).then(draw);
}
function view(ref) {
  const id = String(ref).replace("IPY_MODEL_", "");
  const m = models[id], s = m.state;
  const el = document.createElement(m.model_name === "ButtonModel" ? "button" : "div");
  el.dataset.model = m.model_name;
  el.classList.add(...(s._dom_classes || []));
  switch (m.model_name) {
    case "HTMLModel":  // ipywidgets' HTMLView: the value is markup
      el.classList.add("widget-html"); el.innerHTML = s.value; break;
    case "ButtonModel":
      el.textContent = s.description; el.onclick = () => send(id, { event: "click" }); break;
    case "HBoxModel": case "VBoxModel": case "BoxModel":
      el.classList.add(m.model_name === "HBoxModel" ? "widget-hbox" : "widget-vbox");
      el.append(...s.children.map(view)); break;
    case "TabModel": {
      const bar = document.createElement("div"); bar.className = "widget-tab-bar";
      for (const t of s.titles) { const span = document.createElement("span"); span.textContent = t; bar.append(span); }
      el.append(bar, ...(s.children.length ? [view(s.children[s.selected_index ?? 0])] : [])); break;
    }
    default: el.textContent = `[${m.model_name}]`;
  }
  return el;
}
async function draw() {
  const text = await (await fetch("/state")).text();
  if (text === seen) return;
  seen = text; models = JSON.parse(text);
  roots.forEach((ref, i) => document.getElementById(`w${i}`).replaceChildren(view(ref)));
  document.body.dataset.draws = String(Number(document.body.dataset.draws || 0) + 1);
}
await draw();
document.body.dataset.ready = String(roots.length);
setInterval(draw, 200);
</script></body></html>"""


class LoopbackHost:
    """An HTTP server on 127.0.0.1 (a daemon thread) answering ``get(parts)`` and
    ``post(parts, body)`` of a subclass; ``with host: page.goto(host.url)``."""

    def __init__(self) -> None:
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
                found = host.get(self.path.strip("/").split("/"))
                self._reply(*(found or (b"not found", "text/plain", 404)))

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                host.post(self.path.strip("/").split("/"), body)
                self._reply(b"{}", "application/json")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def get(self, parts: list[str]) -> tuple[bytes, str] | None:
        raise NotImplementedError

    def post(self, parts: list[str], body: Any) -> None:
        raise NotImplementedError

    def __enter__(self) -> LoopbackHost:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class WidgetHost(LoopbackHost):
    """``with WidgetHost([w1, w2]) as host: page.goto(host.url)``; ``extra`` HTML snippets
    (e.g. plotly figures with their inlined plotly.js) follow the widgets on the page."""

    def __init__(self, widgets: list[Any], extra: list[str] | None = None) -> None:
        super().__init__()
        self.widgets = widgets
        self.extra = extra or []

    def get(self, parts: list[str]) -> tuple[bytes, str] | None:
        if parts == [""]:
            return self.page().encode(), "text/html; charset=utf-8"
        if parts[0] == "esm":
            widget = self.widgets[int(parts[1].removesuffix(".js"))]
            return str(widget._esm).encode(), "text/javascript; charset=utf-8"
        if parts[0] == "state":
            state = self.widgets[int(parts[1])].get_state()
            state = {k: v for k, v in state.items() if k not in ("_esm", "_css")}
            return json.dumps(state, default=str).encode(), "application/json"
        return None

    def post(self, parts: list[str], body: Any) -> None:
        kind, index = parts
        widget = self.widgets[int(index)]
        if kind == "set":
            widget.set_state(body)
        else:
            widget._handle_custom_msg(body, [])

    def page(self) -> str:
        css = self.widgets[0]._css if self.widgets else ""
        slots = "".join(f'<div class="slot" id="w{i}"></div>' for i in range(len(self.widgets)))
        extra = "".join(f'<div class="extra">{html}</div>' for html in self.extra)
        return ANYWIDGET_PAGE % {"css": css, "slots": slots, "extra": extra,
                                 "n": len(self.widgets)}


class IpywidgetsHost(LoopbackHost):
    """``with IpywidgetsHost([dashboard]) as host: page.goto(host.url)``; each root widget
    is drawn into ``#w<i>``."""

    def __init__(self, widgets: list[Any], css: str = "") -> None:
        super().__init__()
        self.widgets = widgets
        self.css = css

    def models(self) -> dict[str, Any]:
        """Every widget in the trees by ``model_id``."""
        return {w.model_id: w for w in walk(self.widgets)}

    def get(self, parts: list[str]) -> tuple[bytes, str] | None:
        if parts == [""]:
            slots = "".join(f'<div class="slot jevlaya" id="w{i}"></div>'
                            for i in range(len(self.widgets)))
            roots = json.dumps([f"IPY_MODEL_{w.model_id}" for w in self.widgets])
            page = IPYWIDGETS_PAGE % {"css": self.css, "slots": slots, "roots": roots}
            return page.encode(), "text/html; charset=utf-8"
        if parts == ["state"]:
            state = {model_id: {"model_name": w._model_name, "state": protocol_state(w)}
                     for model_id, w in self.models().items()}
            return json.dumps(state, default=str).encode(), "application/json"
        return None

    def post(self, parts: list[str], body: Any) -> None:
        kind, model_id = parts
        widget = self.models()[model_id]
        if kind == "set":
            widget.set_state(body)
        else:
            widget._handle_custom_msg(body, [])


def protocol_state(widget: Any) -> dict[str, Any]:
    """What the kernel sends a front end for ``widget`` (anywidget code left out)."""
    return widget.get_state(key=[k for k in widget.keys if k not in ("_esm", "_css")])


def walk(widgets: list[Any]) -> Iterator[Any]:
    """The widgets and every widget their traits hold (children, layout, style, ...)."""
    from ipywidgets import Widget

    for widget in widgets:
        yield widget
        for name in widget.keys:
            value = getattr(widget, name, None)
            held = value if isinstance(value, (list, tuple)) else [value]
            yield from walk([v for v in held if isinstance(v, Widget)])
