// LabelView: the model's answers per state; click the right one (or type a score's level);
// held-out accuracy and a reliability diagram per question; an adapt button and its counter.
function reliability(stat) {
  // one column per confidence bin: the bar is how often the answers were right, the tick the
  // mean confidence (a calibrated model's bars reach their ticks)
  const box = h("div", { class: "jv-reliability", title: "bars: accuracy per confidence bin; line: mean confidence" });
  for (const b of stat.bins) {
    const acc = b.accuracy == null ? 0 : b.accuracy;
    const col = h("div", { class: "jv-rel-col", "data-n": b.n },
      h("span", { class: "jv-rel-bar", style: `height:${(acc * 100).toFixed(1)}%` }),
      b.confidence == null ? null : h("span", { class: "jv-rel-conf", style: `bottom:${(b.confidence * 100).toFixed(1)}%` }));
    box.append(h("div", { class: "jv-rel-bin" }, col,
      h("div", { class: "jv-muted jv-rel-label" }, `${fmt(b.lo, 1)}–${fmt(b.hi, 1)}`),
      h("div", { class: "jv-muted jv-rel-label" }, `n ${b.n}`)));
  }
  return box;
}

function render({ model, el }) {
  const send = (msg) => model.send(msg);
  // a level typed but not yet sent, per "row|question": every label's answer redraws the table, and
  // a redraw must not drop what the user is typing (live() gives the cursor back to its data-key)
  const typed = new Map();
  // Chromium fires `change` and `blur` on a focused input that a redraw removes: that input must not
  // send the draft (the redrawn one holds it), so each input knows the draw that made it. Leaving the
  // redrawn input fires no `change` (a script set its value), so `blur` commits too
  let drawn = 0;
  return live(model, el, ["rows", "questions_info", "stats", "status"], () => {
    const draw = ++drawn;
    const root = h("div", { class: "jv-labels" });
    const status = model.get("status");
    const stats = model.get("stats");
    const questions = model.get("questions_info");
    const summary = h("div", { class: "jv-card jv-label-stats" },
      h("div", {}, h("b", {}, `model ${status.model}`), " ",
        h("button", { class: "jv-adapt", onclick: () => send({ action: "adapt" }) }, "adapt"), " ",
        h("span", { class: "jv-changed" }, status.changed == null ? "no adaptation yet"
          : `${status.changed} answers changed (adaptation ${status.adaptations}, ${fmt(status.seconds, 2)} s)`)),
      status.error ? h("div", { class: "jv-err" }, status.error) : null);
    for (const q of questions) {
      const s = stats[q.id] || { n: 0, bins: [] };
      const open = status.parts && status.parts[q.id] === "open" ? " · open part" : "";  // as the answers view says
      const cv = status.cv && status.cv[q.id] != null ? ` · cross-validated ${fmt(status.cv[q.id], 2)}` : "";
      const turned = status.turned && status.turned.includes(String(q.id))
        ? " · turned round: the labels showed the model reading it upside down" : "";
      summary.append(h("div", { class: "jv-q jv-q-stats", "data-question": q.id },
        h("b", {}, q.id), " ", h("i", {}, `(${q.type}${open})`), " ",
        h("span", { class: "jv-heldout" }, s.n ? `held-out accuracy ${fmt(s.accuracy, 2)} on ${s.n} labels, ECE ${fmt(s.ece, 2)}`
          : "held-out accuracy – (no labels the model was not fitted on)"),
        h("span", { class: "jv-muted" }, cv),
        turned ? h("span", { class: "jv-turned" }, turned) : null,
        reliability(s)));
    }
    root.append(summary);
    const head = h("tr", {}, h("th", { class: "jv-n" }, "#"), h("th", {}, "state"),
      ...questions.map((q) => h("th", {}, q.id)));
    const body = h("tbody", {});
    for (const r of model.get("rows")) {
      const cells = questions.map((q) => {
        const a = r.answers[q.id];
        const given = r.labels[q.id];
        const right = given == null ? null : String(given) === String(a.value);
        const cell = h("td", { class: "jv-label-cell", "data-question": q.id },
          h("div", { class: right == null ? "jv-answer" : (right ? "jv-answer jv-right" : "jv-answer jv-wrong") },
            `${a.value} `, h("small", { class: "jv-muted" }, `p ${fmt(a.p, 2)}`),
            right == null ? null : h("small", { class: right ? "jv-ok" : "jv-flag" }, right ? " ✓" : " ✗"),
            r.fitted[q.id] ? h("small", { class: "jv-muted" }, " (fitted)") : null));
        if (q.type === "score") {
          const key = `${r.i}|${q.id}`;
          const input = h("input", { class: "jv-score-input", type: "number", min: 0, max: q.options.length - 1,
            step: 1, placeholder: "level", "data-key": key, "aria-label": `level of ${q.id} for state ${r.i}` });
          if (typed.has(key)) input.value = typed.get(key);
          else if (given != null) input.value = String(given);
          const commit = () => {  // on Enter or on leaving the field; once per typed value
            if (draw !== drawn || !typed.has(key)) return;
            const value = typed.get(key);
            typed.delete(key);
            send({ action: "label", row: r.i, question: q.id, value: value === "" ? null : value });
          };
          input.addEventListener("input", () => typed.set(key, input.value));
          input.addEventListener("keydown", (e) => { if (e.key === "Enter") commit(); });
          input.addEventListener("change", commit);
          input.addEventListener("blur", commit);
          cell.append(input);
        } else {
          const buttons = h("div", { class: "jv-options" });
          for (const o of q.options) {
            const chosen = given != null && String(given) === String(o);
            buttons.append(h("button", { class: chosen ? "jv-option jv-chosen" : "jv-option", "data-value": o,
              "aria-pressed": chosen ? "true" : "false",
              onclick: () => send({ action: "label", row: r.i, question: q.id, value: chosen ? null : o }) }, o));
          }
          cell.append(buttons);
        }
        return cell;
      });
      body.append(h("tr", { "data-row": r.i }, h("td", { class: "jv-n" }, r.i), h("td", { class: "jv-state" }, r.state), ...cells));
    }
    root.append(h("table", { class: "jv-table jv-label-table" }, h("thead", {}, head), body));
    return root;
  });
}
export default { render };
