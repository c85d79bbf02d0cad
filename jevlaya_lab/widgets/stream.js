function laneStats(l) {
  const parts = [l.state, `first token ${fmt(l.ttft_ms)} ms`];
  if (l.chunks != null && l.chunks !== l.tokens) parts.push(`${l.chunks} chunks shown of ${l.tokens} tokens generated`);
  else parts.push(`${l.tokens} tokens`);
  parts.push(`${fmt(l.tokens_per_s)} tok/s`);
  return parts.join(" · ");
}

function render({ model, el }) {
  model.send({ action: "sync" });  // learn whether the broker was closed meanwhile
  return live(model, el, ["lanes", "status", "answers", "error", "ratings", "broker_closed"], () => {
    const status = model.get("status");
    const closed = model.get("broker_closed");
    const send = (msg) => model.send(msg);
    const button = (label, msg) => h("button", { onclick: () => send(msg), disabled: closed ? "" : null,
      title: closed ? "the broker is closed" : null }, label);
    // a lane whose answer came through another() is drawn once, as that answer's card
    const laneOf = new Map(model.get("lanes").filter((l) => l.call_id).map((l) => [l.call_id, l]));
    const lanes = model.get("lanes").filter((l) => l.state !== "another").map((l) => h("div", {
      class: `jv-stream-lane jv-${l.state}`, "data-state": l.state },
      h("div", {}, h("b", {}, l.model ?? "…"), " ",
        h("small", { class: "jv-muted" }, laneStats(l))),
      l.state === "failed" && l.detail ? h("div", { class: "jv-err" }, l.detail) : null,
      l.text ? h("div", { class: "jv-stream-text" }, l.text) : null));
    const rated = new Map(model.get("ratings").map((r) => [r.call_id, r]));  // one per answer
    const verdict = (r) => (r ? ` · rated ${r.score >= 0.5 ? "good" : "bad"} (${r.score})` : "");
    const answers = model.get("answers").map((a, i) => h("div", { class: "jv-stream-lane jv-another" },
      h("b", {}, `another() #${i + 1}: ${a.model}`), " ",
      laneOf.has(a.call_id) ? h("small", { class: "jv-muted" }, laneStats(laneOf.get(a.call_id))) : null,
      h("small", { class: "jv-muted jv-rated" }, verdict(rated.get(a.call_id))), " ",
      button("good", { action: "rate", score: 1, answer: i }),
      button("bad", { action: "rate", score: 0, answer: i }),
      h("div", { class: "jv-stream-text" }, a.text)));
    const ended = status === "done" || status === "error";
    const n = rated.size;
    const which = [...rated.values()].map((r) => `${r.answer ?? "shown"} (${r.model ?? "?"}) ${r.score >= 0.5 ? "good" : "bad"}`);
    return h("div", { class: "jv-card jv-stream" },
      h("div", { class: "jv-muted" }, `prompt: ${model.get("prompt")}`),
      h("div", { class: "jv-muted jv-status" }, `status: ${status}`),
      lanes,
      model.get("error") ? h("div", { class: "jv-err" }, model.get("error")) : null,
      closed ? h("div", { class: "jv-muted jv-closed" },
        "the broker is closed: another() and ratings are unavailable") : null,
      ended ? h("div", {},
        button("another()", { action: "another" }),
        button("rate good", { action: "rate", score: 1 }),
        button("rate bad", { action: "rate", score: 0 }),
        h("span", { class: "jv-muted jv-ratings" },
          `${n} answer${n === 1 ? "" : "s"} rated` + (n ? `: ${which.join(" · ")}` : ""))) : null,
      answers);
  });
}
export default { render };
