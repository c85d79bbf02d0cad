// HookTimeline: a trace view. Rows nest router → (load / evict) → runs; a run is its
// on_predict_start → on_predict_end span with its markers. Markers that would overlap are
// stacked, a legend names every mark, a table lists every event, clicking a span zooms to it.
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
  if (e.run_id) lines.push(`run: ${e.run_id}`);
  if (e.n_states != null) lines.push(`states: ${e.n_states}`);
  if (e.elapsed_ms != null) lines.push(`elapsed: ${fmt(e.elapsed_ms, 2)} ms`);
  if (e.usage) lines.push(`usage: ${JSON.stringify(e.usage)}`);
  if (e.error) lines.push(`error: ${e.error}`);
  return lines.join("\n");
}

const started = (evs) => evs.some((e) => e.event === "on_predict_start");

// The rows of the trace: [{label, title, depth, span: [t0, t1] | null, spanClass, marks, events}]
function traceRows(events) {
  const runs = new Map();
  const routerEvents = [];
  for (const e of events) {
    if (!e.run_id) { routerEvents.push(e); continue; }
    if (!runs.has(e.run_id)) runs.set(e.run_id, []);
    runs.get(e.run_id).push(e);
  }
  const runRow = (evs, n, depth) => {
    const start = evs.find((e) => e.event === "on_predict_start");
    const stop = evs.find((e) => e.event === "on_predict_end" || e.event === "on_error");
    const failed = evs.some((e) => e.event === "on_error");
    const who = evs.find((e) => e.model)?.model ?? "";
    const states = start && start.n_states != null ? ` · ${start.n_states} states` : "";
    // a request the Router only routed (its predict runs as its own run on the checkpoint)
    const label = start ? `run ${n} · ${who}${states}` : `route → ${who}`;
    return { label, title: `run_id ${evs[0].run_id}`, depth,
      span: start ? [start.t_ms, stop ? stop.t_ms : null] : null,
      spanClass: failed ? "jv-span jv-error" : "jv-span", spanTip: tip(stop || start || evs[0]),
      marks: evs.filter((e) => MARKS[e.event] && e.event !== "on_predict_start"), events: evs };
  };
  const rows = [];
  const routed = [...runs.values()].filter((evs) => evs.some((e) => e.level === "router"));
  const direct = [...runs.values()].filter((evs) => !evs.some((e) => e.level === "router"));
  let n = 0;
  if (routed.length || routerEvents.length) {
    const all = routed.flat().concat(routerEvents);
    const ts = all.map((e) => e.t_ms);
    rows.push({ label: "router", title: "every call through the Router", depth: 0,
      span: [Math.min(...ts), Math.max(...ts)], spanClass: "jv-span jv-router",
      spanTip: `router: ${routed.length} runs, ${routerEvents.length} load/evict events`,
      marks: [], events: [] });
    // load/evict rows and runs, in the order they happened
    const items = routerEvents.map((e) => ({ t: e.t_ms, e }))
      .concat(routed.map((evs) => ({ t: evs[0].t_ms, evs })))
      .sort((a, b) => a.t - b.t);
    for (const item of items) {
      if (item.e) {
        rows.push({ label: `${item.e.event.replace("on_", "")} ${item.e.model ?? ""}`,
          title: item.e.event, depth: 1, span: null, marks: [item.e], events: [item.e] });
      } else {
        rows.push(runRow(item.evs, started(item.evs) ? ++n : n, 1));
      }
    }
  }
  for (const evs of direct) rows.push(runRow(evs, started(evs) ? ++n : n, 0));
  return rows;
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
  const cleanup = live(model, el, ["events"], () => draw());
  function draw() {
    const events = model.get("events");
    const end = Math.max(1, ...events.map((e) => e.t_ms));
    const [t0, t1] = zoom ?? [0, end];
    const width = Math.max(200, (el.clientWidth || 900) * 0.7);
    const x = (t) => (t - t0) / Math.max(t1 - t0, 1e-6);
    const pct = (f) => `${(100 * f).toFixed(3)}%`;
    const rows = traceRows(events).map((row) => {
      const track = h("div", { class: "jv-lane", "data-lane": row.label });
      let height = ROW_PX;
      if (row.span) {
        const a = Math.max(0, x(row.span[0]));
        const b = Math.min(1, x(row.span[1] ?? end));
        if (b >= 0 && a <= 1) {
          track.append(h("div", {
            class: row.spanClass, title: row.spanTip,
            style: `left:${pct(a)};width:${pct(Math.max(b - a, 0))};top:2px`,
            onclick: () => {
              const pad = Math.max((row.span[1] ?? end) - row.span[0], 0.01) * 0.1;
              zoom = [row.span[0] - pad, (row.span[1] ?? end) + pad];
              el.replaceChildren(draw());
            },
          }));
        }
      }
      const marks = row.marks.filter((e) => x(e.t_ms) >= 0 && x(e.t_ms) <= 1);
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
      h("span", {}, h("span", { class: "jv-span jv-router" }), "router call"),
      Object.values(MARKS).map(([cls, text]) => h("span", {}, h("span", { class: cls }), text)));
    const table = h("table", { class: "jv-table jv-events" },
      h("thead", {}, h("tr", {}, ["t (ms)", "event", "run", "model", "states", "elapsed (ms)", "error"]
        .map((c, i) => h("th", { class: [0, 4, 5].includes(i) ? "jv-n" : null }, c)))),
      h("tbody", {}, events.map((e) => h("tr", { class: e.event === "on_error" ? "jv-err" : null },
        h("td", { class: "jv-n" }, fmt(e.t_ms, 2)), h("td", {}, e.event),
        h("td", { title: e.run_id ?? "" }, e.run_id ? String(e.run_id).slice(0, 8) : "–"),
        h("td", {}, e.model ?? "–"), h("td", { class: "jv-n" }, e.n_states ?? "–"),
        h("td", { class: "jv-n" }, fmt(e.elapsed_ms, 2)), h("td", {}, e.error ?? "")))));
    const runs = new Set(events.filter((e) => e.run_id).map((e) => e.run_id)).size;
    return h("div", { class: "jv-card jv-timeline" },
      h("div", { class: "jv-muted" }, `${runs} runs · ${events.length} events · ${fmt(end, 1)} ms`,
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
