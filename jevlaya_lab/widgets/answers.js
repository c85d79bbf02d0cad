function render({ model, el }) {
  return live(model, el, ["results"], () => {
    const root = h("div", { class: "jv-answers" });
    for (const res of model.get("results")) {
      const card = h("div", { class: "jv-card" },
        h("div", { class: "jv-muted" }, `model ${res.model}`),
        res.state == null ? null : h("div", { class: "jv-muted jv-state" }, res.state));
      for (const row of res.rows) {
        card.append(h("div", { class: row.abstained ? "jv-q jv-abstained" : "jv-q" },
          h("b", {}, row.question), " ", h("i", {}, `(${row.type})`), ": ",
          h("span", { class: "jv-answer" }, String(row.answer)), " ",
          h("small", {}, `confidence ${fmt(row.confidence, 2)}`),
          row.abstained ? h("span", { class: "jv-flag" }, " abstained") : null,
          bars(row.bars, row.abstained ? "jv-red" : "")));
      }
      root.append(card);
    }
    return root;
  });
}
export default { render };
