function render({ model, el }) {
  return live(model, el, ["lanes", "status", "answers", "error", "ratings"], () => {
    const status = model.get("status");
    const send = (msg) => model.send(msg);
    const lanes = model.get("lanes").map((l) => h("div", {
      class: `jv-stream-lane jv-${l.state}`, "data-state": l.state, title: l.detail ?? "" },
      h("div", {}, h("b", {}, l.model ?? "…"), " ",
        h("small", { class: "jv-muted" }, `${l.state} · first token ${fmt(l.ttft_ms)} ms · `
          + `${l.tokens} tokens · ${fmt(l.tokens_per_s)} tok/s`)),
      l.text ? h("div", { class: "jv-stream-text" }, l.text) : null));
    const answers = model.get("answers").map((a, i) => h("div", { class: "jv-stream-lane" },
      h("b", {}, `another() #${i + 1}: ${a.model}`), " ",
      h("button", { onclick: () => send({ action: "rate", score: 1, answer: i }) }, "good"),
      h("button", { onclick: () => send({ action: "rate", score: 0, answer: i }) }, "bad"),
      h("div", { class: "jv-stream-text" }, a.text)));
    const ended = status === "done" || status === "error";
    return h("div", { class: "jv-card jv-stream" },
      h("div", { class: "jv-muted" }, `prompt: ${model.get("prompt")}`),
      h("div", { class: "jv-muted jv-status" }, `status: ${status}`),
      lanes,
      model.get("error") ? h("div", { class: "jv-err" }, model.get("error")) : null,
      ended ? h("div", {},
        h("button", { onclick: () => send({ action: "another" }) }, "another()"),
        h("button", { onclick: () => send({ action: "rate", score: 1 }) }, "rate good"),
        h("button", { onclick: () => send({ action: "rate", score: 0 }) }, "rate bad"),
        h("span", { class: "jv-muted" }, `${model.get("ratings").length} ratings`)) : null,
      answers);
  });
}
export default { render };
