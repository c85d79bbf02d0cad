function render({ model, el }) {
  el.classList.add("jevlaya", "jv-routing");
  let timer = null;
  const box = h("textarea", {
    class: "jv-input", placeholder: "Type or paste a state (text or a JSON object)",
    oninput: () => {
      clearTimeout(timer);
      timer = setTimeout(() => { model.set("state_text", box.value); model.save_changes(); }, 150);
    },
  });
  box.value = model.get("state_text");
  const out = h("div", {});
  const draw = () => {
    if (document.activeElement !== box) box.value = model.get("state_text");
    // batch mode shows its table; the box appears only for a single state (or when asked)
    box.style.display = model.get("batch").length && !model.get("state_text") ? "none" : "";
    const parts = [];
    const err = model.get("error");
    if (err) parts.push(h("div", { class: "jv-err" }, err));
    const d = model.get("decision");
    if (d) {
      parts.push(h("div", { class: "jv-card jv-decision" },
        h("div", {}, h("b", { class: "jv-model" }, `→ ${d.model}`), " ",
          h("small", {}, "by rule ", h("code", {}, d.source))),
        h("div", { class: "jv-reason" }, d.reason),
        h("div", { class: "jv-muted" }, `language: ${d.language}`,
          d.evidence ? ` · evidence: ${d.evidence}` : ""),
        bars(d.scripts, "jv-teal"),
        h("table", { class: "jv-table jv-alternatives" },
          h("thead", {}, h("tr", {}, h("th", {}, "if you pass"), h("th", {}, "checkpoint"),
            h("th", {}, "why"))),
          h("tbody", {}, model.get("alternatives").map((a) => h("tr", {},
            h("td", {}, h("code", {}, a.given)), h("td", {}, a.model), h("td", {}, a.reason)))))));
    }
    const rows = model.get("batch");
    if (rows.length) {
      const counts = model.get("counts");
      const total = rows.length;
      parts.push(h("div", { class: "jv-card jv-batch" },
        h("b", {}, `${total} states`),
        bars(Object.entries(counts).map(([k, n]) => ({ label: `${k} (${n})`, p: n / total }))),
        h("table", { class: "jv-table" },
          h("thead", {}, h("tr", {}, h("th", { class: "jv-n" }, "#"), h("th", {}, "state"),
            h("th", {}, "checkpoint"), h("th", {}, "rule"), h("th", {}, "why"))),
          h("tbody", {}, rows.map((r) => h("tr", {}, h("td", { class: "jv-n" }, r.i),
            h("td", {}, r.state), h("td", {}, r.model), h("td", {}, r.source),
            h("td", { class: "jv-muted" }, r.reason)))))));
    }
    out.replaceChildren(...parts);
  };
  const names = ["decision", "alternatives", "batch", "counts", "error", "state_text"];
  for (const n of names) model.on(`change:${n}`, draw);
  draw();
  el.replaceChildren(box, out);
  return () => { clearTimeout(timer); for (const n of names) model.off(`change:${n}`, draw); };
}
export default { render };
