// Shared DOM helpers of the jevlaya views. Text is always appended as text nodes.
function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null) continue;
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else if (k === "title") e.title = String(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function fmt(x, digits = 1) {
  return x == null || Number.isNaN(Number(x)) ? "–" : Number(x).toFixed(digits);
}

function bars(items, cls = "") {
  const table = h("table", { class: "jv-bars" });
  for (const b of items || []) {
    const p = Math.max(0, Math.min(1, Number(b.p) || 0));
    table.append(h("tr", {},
      h("td", { class: "jv-label" }, b.label),
      h("td", { class: "jv-track" },
        h("span", { class: `jv-bar ${cls}`, style: `width:${(p * 100).toFixed(1)}%` })),
      h("td", { class: "jv-num" }, p.toFixed(2))));
  }
  return table;
}

// Redraw el whenever one of the named traits changes; returns the cleanup anywidget calls
// when the view is removed (so listeners do not pile up across views of one model).
// A redraw that arrives while a mouse button is down in el waits for its release: drawing then
// would replace the pressed button before the release, and the browser would send the click to
// no button at all (a label's answer arriving mid-click lost the click). The held redraw is drawn
// after the click's handlers have run; `data-held` says one is waiting.
function live(model, el, names, draw) {
  el.classList.add("jevlaya");
  const redraw = () => {
    // a field that has the cursor and a data-key gets it back in the new drawing
    const key = el.contains(document.activeElement) ? document.activeElement.dataset.key : undefined;
    el.replaceChildren(draw());
    if (key !== undefined) [...el.querySelectorAll("[data-key]")].find((e) => e.dataset.key === key)?.focus();
  };
  let pressed = false;
  const request = () => {
    if (pressed) el.dataset.held = "1";
    else redraw();
  };
  const press = () => { pressed = true; };
  const release = () => {
    if (!pressed) return;
    pressed = false;
    if (el.dataset.held !== "1") return;
    setTimeout(() => {  // the click follows the release in the same task: draw after it
      if (pressed) return;  // pressed again meanwhile: still held
      delete el.dataset.held;
      redraw();
    }, 0);
  };
  const away = (e) => { if (e.target === window) release(); };  // the window lost focus mid-press
  el.addEventListener("pointerdown", press, true);
  for (const type of ["pointerup", "pointercancel"]) window.addEventListener(type, release, true);
  window.addEventListener("blur", away);
  for (const name of names) model.on(`change:${name}`, request);
  redraw();
  return () => {
    for (const name of names) model.off(`change:${name}`, request);
    el.removeEventListener("pointerdown", press, true);
    for (const type of ["pointerup", "pointercancel"]) window.removeEventListener(type, release, true);
    window.removeEventListener("blur", away);
  };
}
