// The index: fills the filters from data/index.js (window.VIEW) and shows the matching episodes.
// Every value from the run goes through esc(); nothing from it becomes markup.
(function () {
  "use strict";
  const V = window.VIEW;
  const C = {};
  V.columns.forEach((name, i) => { C[name] = i; });
  const PAGE = 500;
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const show = (v) => (v === null || v === undefined ? "-" : String(v));
  // filter key -> the value(s) of a row (a row matches when any of its values is the chosen one)
  const values = {
    run: (r) => ["r" + r[C.run]],
    env: (r) => [r[C.env]],
    task: (r) => [r[C.task]],
    step: (r) => [show(r[C.step])],
    mode: (r) => [V.runs[r[C.run]].mode],
    outcome: (r) => [show(r[C.outcome])],
    status: (r) => r[C.statuses].split(" "),
    version: (r) => r[C.versions].split(" "),
  };
  const natural = (a, b) => a.localeCompare(b, undefined, {numeric: true});
  const selects = Array.from(document.querySelectorAll(".filters select"));
  for (const sel of selects) {
    const seen = new Set();
    for (const r of V.rows) for (const v of values[sel.dataset.key](r)) seen.add(v);
    sel.innerHTML = '<option value="">all</option>' +
      Array.from(seen).sort(natural).map((v) => '<option value="' + esc(v) + '">' + esc(v) + "</option>").join("");
    sel.addEventListener("change", () => { shown = PAGE; render(); });
  }
  // the same task at the same step in another run: the side-by-side partner
  const byTask = new Map();
  for (const r of V.rows) {
    const key = r[C.task] + "\u0000" + r[C.step];
    if (!byTask.has(key)) byTask.set(key, []);
    byTask.get(key).push(r);
  }
  const href = (r) => "r" + r[C.run] + "/e" + r[C.page] + ".html";
  const partner = (r) => (byTask.get(r[C.task] + "\u0000" + r[C.step]) || []).find((o) => o[C.run] !== r[C.run]);
  const tbody = document.querySelector("#episodes tbody");
  const count = document.getElementById("count");
  const more = document.getElementById("more");
  let shown = PAGE;

  function rowHtml(r) {
    const p = partner(r);
    const vs = p ? '<a class="vs" href="compare.html#' + esc(href(r)) + "|" + esc(href(p)) + '">vs r' + p[C.run] + "</a>" : "";
    const o = r[C.outcome];
    const cls = o === null ? "" : o > 0 ? "good" : o < 0 ? "bad" : "";
    return "<tr><td>r" + r[C.run] + "</td><td>" + esc(r[C.env]) + "</td><td>" + esc(r[C.task]) + "</td><td>" +
      esc(show(r[C.step])) + "</td><td>" + esc(V.runs[r[C.run]].mode) + '</td><td><a href="' + esc(href(r)) + '">' +
      esc(r[C.episode]) + "</a></td><td>" + r[C.turns] + '</td><td class="' + cls + '">' + esc(show(o)) +
      "</td><td>" + esc(r[C.statuses]) + "</td><td>" + esc(r[C.versions]) + "</td><td>" + vs + "</td></tr>";
  }

  function render() {
    const chosen = selects.filter((s) => s.value !== "").map((s) => [values[s.dataset.key], s.value]);
    const rows = V.rows.filter((r) => chosen.every(([get, want]) => get(r).includes(want)));
    tbody.innerHTML = rows.slice(0, shown).map(rowHtml).join("");
    count.textContent = rows.length + " of " + V.rows.length + " episodes" + (rows.length > shown ? ", first " + shown + " shown" : "");
    more.hidden = rows.length <= shown;
  }

  more.addEventListener("click", () => { shown += PAGE; render(); });
  document.getElementById("f-reset").addEventListener("click", () => {
    for (const s of selects) s.value = "";
    shown = PAGE;
    render();
  });
  render();
  document.documentElement.dataset.ready = String(performance.now());  // ms from navigation start
})();
