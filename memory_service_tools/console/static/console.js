// The search and pack forms swap only the page's main part (htmx, the address follows); a refused token
// or a bad address answers 4xx, which htmx does not swap: load that answer as a whole page instead.
// The node page's as-of slider (which facts are live at the chosen instant) and the graph page's
// cytoscape view; both read what the server rendered into the page.
(function () {
  "use strict";

  function iso(seconds) {
    return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
  }

  function initSlider() {
    var slider = document.getElementById("as-of-slider");
    if (!slider) return;
    var output = document.getElementById("as-of-output");
    var link = document.getElementById("as-of-link");
    function apply() {
      var t = Number(slider.value);
      document.querySelectorAll("tr.fact").forEach(function (row) {
        var from = Number(row.dataset.from), to = Number(row.dataset.to);
        var live = from <= t && (to === 0 || t < to);
        row.dataset.live = live ? "true" : "false";
        row.querySelector(".state").textContent = live ? "live" : "not live";
      });
      output.textContent = iso(t);
      var url = new URL(link.href, window.location.href);
      url.searchParams.set("as_of", iso(t));
      link.href = url.pathname + url.search;
    }
    slider.addEventListener("input", apply);
  }

  var palette = ["#0b5cad", "#1a7f37", "#9a3412", "#6f42c1", "#a1121a", "#0f766e", "#7d4e00", "#3b3f46"];

  var kindsSeen = [];

  function colour(kind) {
    // One colour per kind in order of appearance: distinct for up to eight kinds.
    if (kindsSeen.indexOf(kind) < 0) kindsSeen.push(kind);
    return palette[kindsSeen.indexOf(kind) % palette.length];
  }

  function initGraph() {
    var box = document.getElementById("graph");
    var data = document.getElementById("graph-data");
    if (!box || !data || typeof cytoscape === "undefined") return;
    var elements = JSON.parse(data.textContent);
    elements.forEach(function (e) { if (e.data.kind) e.data.colour = colour(e.data.kind); });
    var params = new URLSearchParams(window.location.search);
    var cy = cytoscape({
      container: box,
      elements: elements,
      layout: { name: "cose", animate: false },
      style: [
        { selector: "node", style: { "background-color": "data(colour)", label: "data(label)", "font-size": 10, color: "#1b1f24" } },
        { selector: "edge", style: { width: 1.5, "line-color": "#8c959f", "target-arrow-color": "#8c959f", "target-arrow-shape": "triangle", "curve-style": "bezier", label: "data(label)", "font-size": 8 } }
      ]
    });
    cy.on("tap", "node", function (event) {
      var next = new URLSearchParams({ ns: params.get("ns") || "", key: event.target.id(), as_of: params.get("as_of") || "" });
      window.location.href = "/node?" + next.toString();
    });
    box.dataset.nodes = String(cy.nodes().length);
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.xhr.status >= 400) {
      event.detail.shouldSwap = false;
      window.location.href = event.detail.xhr.responseURL;
    }
  });

  // Deferred scripts run in document order: cytoscape (a page's own script) may come after this one.
  document.addEventListener("DOMContentLoaded", function () {
    initSlider();
    initGraph();
  });
})();
