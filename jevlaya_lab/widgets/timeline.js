// HookTimeline: a trace view. The rows come from Python (timeline.trace_rows): a Router call
// nests its load / evict rows and its requests' runs (route mark, then the predict span), and
// the Agent runs it caused one level further in. Markers that would overlap are stacked, a
// legend names every mark, a table lists every event, clicking a span zooms to it.
const MARKS = {
  on_route: ["jv-tick", "on_route (router picked a checkpoint)"],
  on_load: ["jv-tick jv-load", "on_load (checkpoint built)"],
  on_evict: ["jv-tick jv-evict", "on_evict (checkpoint dropped)"],
  on_predict_start: ["jv-tick jv-start", "on_predict_start / on_predict_end"],
  on_error: ["jv-tick jv-error", "on_error"],
};
const ROW_PX = 14;
const MARK_PX = 10;

function tip(e) {
  const lines = [`${e.event} @ ${fmt(e.t_ms, 2)} ms`, `model: ${e.model ?? "–"}`];
  if (e.model_path && e.model_path !== e.model) lines.push(`path: ${e.model_path}`);
  if (e.run_id) lines.push(`run: ${e.run_id}`);
  if (e.n_states != null) lines.push(`states: ${e.n_states}`);
  if (e.elapsed_ms != null) lines.push(`elapsed: ${fmt(e.elapsed_ms, 2)} ms`);
  if (e.usage) lines.push(`usage: ${JSON.stringify(e.usage)}`);
  if (e.error) lines.push(`error: ${e.error}`);
  return lines.join("\n");
}

// Stack marks so none covers another: a mark goes to the lowest slot whose last mark ends
// at least MARK_PX to its left.
function slots(xsPx) {
  const order = xsPx.map((x, i) => [x, i]).sort((a, b) => a[0] - b[0]);
  const ends = [];
  const out = new Array(xsPx.length);
  for (const [x, i] of order) {
    let s = ends.findIndex((end) => x - end >= MARK_PX + 1);
    if (s < 0) { s = ends.length; ends.push(x); } else ends[s] = x;
    out[i] = s;
  }
  return out;
}

function render({ model, el }) {
  let zoom = null;  // [t0, t1] in ms, or null for everything
  const cleanup = live(model, el, ["events", "rows"], () => draw());
  function draw() {
    const events = model.get("events");
    const end = Math.max(1, ...events.map((e) => e.t_ms));
    const [t0, t1] = zoom ?? [0, end];
    const width = Math.max(200, (el.clientWidth || 900) * 0.7);
    const x = (t) => (t - t0) / Math.max(t1 - t0, 1e-6);
    const pct = (f) => `${(100 * f).toFixed(3)}%`;
    const rows = model.get("rows").map((row) => {
      const track = h("div", { class: "jv-lane", "data-lane": row.label, "data-depth": row.depth });
      let height = ROW_PX;
      if (row.span) {
        const a = Math.max(0, x(row.span[0]));
        const b = Math.min(1, x(row.span[1] ?? end));
        if (b >= 0 && a <= 1) {
          const spanClass = row.kind === "call" ? "jv-span jv-router" : row.failed ? "jv-span jv-error" : "jv-span";
          const spanTip = row.kind === "call" ? `${row.label} (${row.title})`
            : row.tip != null ? tip(events[row.tip]) : row.title;
          track.append(h("div", {
            class: spanClass, title: spanTip,
            style: `left:${pct(a)};width:${pct(Math.max(b - a, 0))};top:2px`,
            onclick: () => {
              const pad = Math.max((row.span[1] ?? end) - row.span[0], 0.01) * 0.1;
              zoom = [Math.max(0, row.span[0] - pad), (row.span[1] ?? end) + pad];  // time starts at 0
              el.replaceChildren(draw());
            },
          }));
        }
      }
      const marks = row.marks.map((i) => events[i]).filter((e) => e && x(e.t_ms) >= 0 && x(e.t_ms) <= 1);
      const stack = slots(marks.map((e) => x(e.t_ms) * width));
      marks.forEach((e, i) => {
        const top = 3 + (row.span ? ROW_PX : 0) + stack[i] * (MARK_PX + 2);
        height = Math.max(height, top + MARK_PX + 2);
        track.append(h("div", { class: MARKS[e.event][0], title: tip(e),
          style: `left:${pct(x(e.t_ms))};top:${top}px`, "data-event": e.event }));
      });
      track.style.height = `${height}px`;
      return h("tr", {},
        h("td", { class: "jv-lane-name", title: row.title,
          style: `padding-left:${4 + row.depth * 16}px` }, row.label),
        h("td", { style: "width:100%" }, track));
    });
    const legend = h("div", { class: "jv-legend" },
      h("span", {}, h("span", { class: "jv-span" }), "predict (start → end, click to zoom)"),
      h("span", {}, h("span", { class: "jv-span jv-router" }), "router call (what it caused is nested below it)"),
      Object.values(MARKS).map(([cls, text]) => h("span", {}, h("span", { class: cls }), text)));
    const table = h("table", { class: "jv-table jv-events" },
      h("thead", {}, h("tr", {}, ["t (ms)", "event", "call", "run", "model", "states", "elapsed (ms)", "error"]
        .map((c, i) => h("th", { class: [0, 5, 6].includes(i) ? "jv-n" : null }, c)))),
      h("tbody", {}, events.map((e) => h("tr", { class: e.event === "on_error" ? "jv-err" : null },
        h("td", { class: "jv-n" }, fmt(e.t_ms, 2)), h("td", {}, e.event),
        h("td", { title: e.parent_id ?? "" }, e.parent_id ? String(e.parent_id).slice(0, 8) : "–"),
        h("td", { title: e.run_id ?? "" }, e.run_id ? String(e.run_id).slice(0, 8) : "–"),
        h("td", { title: e.model_path ?? "" }, e.model ?? "–"), h("td", { class: "jv-n" }, e.n_states ?? "–"),
        h("td", { class: "jv-n" }, fmt(e.elapsed_ms, 2)), h("td", {}, e.error ?? "")))));
    const runs = new Set(events.filter((e) => e.run_id).map((e) => e.run_id)).size;
    return h("div", { class: "jv-card jv-timeline" },
      h("div", { class: "jv-muted" }, `${runs} run${runs === 1 ? "" : "s"} · ${events.length} event${events.length === 1 ? "" : "s"} · ${fmt(end, 1)} ms`,
        zoom ? " · zoomed " : " ",
        zoom ? h("button", { onclick: () => { zoom = null; el.replaceChildren(draw()); } }, "show all") : null),
      legend,
      h("div", { class: "jv-axis" }, h("span", {}, `${fmt(t0, 2)} ms`), h("span", {}, `${fmt(t1, 2)} ms`)),
      h("table", { style: "width:100%;border-collapse:collapse" }, rows),
      h("details", { open: "" }, h("summary", {}, "events"), table));
  }
  return cleanup;
}
export default { render };
