const TICKS = { on_route: "jv-tick", on_load: "jv-tick jv-load", on_evict: "jv-tick jv-evict",
  on_error: "jv-tick jv-error" };

function tip(e) {
  const lines = [`${e.event} @ ${fmt(e.t_ms, 2)} ms`, `model: ${e.model ?? "–"}`];
  if (e.n_states != null) lines.push(`states: ${e.n_states}`);
  if (e.elapsed_ms != null) lines.push(`elapsed: ${fmt(e.elapsed_ms, 2)} ms`);
  if (e.usage) lines.push(`usage: ${JSON.stringify(e.usage)}`);
  if (e.error) lines.push(`error: ${e.error}`);
  return lines.join("\n");
}

function render({ model, el }) {
  return live(model, el, ["events"], () => {
    const events = model.get("events");
    const lanes = new Map();
    for (const e of events) {
      if (!lanes.has(e.lane)) lanes.set(e.lane, []);
      lanes.get(e.lane).push(e);
    }
    const end = Math.max(1, ...events.map((e) => e.t_ms));
    const x = (t) => `${(100 * t / end).toFixed(2)}%`;
    const rows = [];
    for (const [lane, evs] of lanes) {
      const track = h("div", { class: "jv-lane", "data-lane": lane });
      const start = evs.find((e) => e.event === "on_predict_start");
      const stop = evs.find((e) => e.event === "on_predict_end");
      if (start) {
        const t1 = stop ? stop.t_ms : end;
        const failed = evs.some((e) => e.event === "on_error");
        track.append(h("div", {
          class: failed ? "jv-span jv-error" : "jv-span", title: tip(stop || start),
          style: `left:${x(start.t_ms)};width:${x(t1 - start.t_ms)}`,
        }));
      }
      for (const e of evs) {
        if (TICKS[e.event]) {
          track.append(h("div", { class: TICKS[e.event], title: tip(e), style: `left:${x(e.t_ms)}` }));
        }
      }
      const who = evs.find((e) => e.model)?.model ?? "";
      rows.push(h("tr", {},
        h("td", { class: "jv-lane-name", title: lane }, `${String(lane).slice(0, 8)} ${who}`),
        h("td", { style: "width:100%" }, track)));
    }
    return h("div", { class: "jv-card jv-timeline" },
      h("div", { class: "jv-muted" }, `${lanes.size} lanes · ${events.length} events · ${fmt(end, 1)} ms`),
      h("table", { style: "width:100%;border-collapse:collapse" }, rows));
  });
}
export default { render };
