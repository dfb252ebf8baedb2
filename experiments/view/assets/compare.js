// Two episode pages side by side: compare.html#rA/eN.html|rB/eM.html (links from the index).
(function () {
  "use strict";
  const pair = document.getElementById("pair");

  function render() {
    pair.textContent = "";
    const m = /^#(r\d+\/e\d+\.html)\|(r\d+\/e\d+\.html)$/.exec(location.hash);
    if (!m) {
      pair.textContent = "Open this page from the index's side-by-side column.";
      return;
    }
    for (const src of [m[1], m[2]]) {
      const frame = document.createElement("iframe");
      frame.src = src;
      frame.title = src;
      pair.appendChild(frame);
    }
  }

  window.addEventListener("hashchange", render);
  render();
})();
