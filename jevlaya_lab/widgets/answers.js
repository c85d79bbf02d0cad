// The value that decided an abstention, against its threshold: "confidence 0.39 < 0.6 → abstained".
function gate(row) {
  const value = row.confidence == null ? "–" : fmt(row.confidence, 2);
  if (row.threshold == null) return `${row.gated_by} ${value}`;
  return `${row.gated_by} ${value} ${row.abstained ? "<" : "≥"} ${row.threshold} → `
    + (row.abstained ? "abstained" : "passed");
}

function answerText(row) {
  if (row.scale != null && typeof row.answer === "number") return `${fmt(row.answer, 2)} on ${row.scale}`;
  return String(row.answer);
}

function render({ model, el }) {
  return live(model, el, ["results"], () => {
    const root = h("div", { class: "jv-answers" });
    for (const res of model.get("results")) {
      const card = h("div", { class: "jv-card" },
        h("div", { class: "jv-muted", title: res.model_path }, `model ${res.model}`),
        res.state == null ? null : h("div", { class: "jv-muted jv-state" }, res.state));
      for (const row of res.rows) {
        card.append(h("div", { class: row.abstained ? "jv-q jv-abstained" : "jv-q" },
          h("b", {}, row.question), " ", h("i", { class: "jv-type" }, row.part ? `(${row.type} · ${row.part} part)` : `(${row.type})`), ": ",
          h("span", { class: "jv-answer" }, answerText(row)),
          row.level ? h("span", { class: "jv-muted" }, ` (${row.level})`) : null, " ",
          row.top_p == null ? null : h("small", { class: "jv-muted" }, `p ${fmt(row.top_p, 2)} · `),
          h("small", { class: row.abstained ? "jv-flag jv-gate-value" : "jv-gate jv-gate-value" }, gate(row)),
          bars(row.bars, row.abstained ? "jv-red" : "")));
      }
      root.append(card);
    }
    return root;
  });
}
export default { render };
