// The portal's only script of its own. The Content-Security-Policy allows no inline script or
// style (nodewarden/settings.py), so what templates once did inline happens here, on the first
// load and on every piece of content htmx swaps in (htmx.onLoad):
// - charts: every .chart[data-figure] is drawn with plotly.js from the json_script element named
//   by data-figure; data-click-opens="customdata" makes a click on a point open its customdata URL;
// - colours: an element's data-colour becomes its --c custom property (badges, tiles), set through
//   the CSSOM, which the policy allows, where a style="" attribute would be blocked;
// - selections: "select all on this page", "select all in this group" and the count of the bulk-action bars;
// - tables: every table.table is wrapped in a .table-scroll box, so a wide one scrolls inside it,
//   never the page (a phone's 390 px);
// - theme: charts take their text and grid colours from app.css's variables, which follow the
//   system's light or dark setting, and are recoloured when it changes.
(function () {
  "use strict";

  // root itself (htmx hands over each top-level element it swapped in) and everything inside it.
  function within(root, selector) {
    var found = Array.prototype.slice.call(root.querySelectorAll(selector));
    if (root.matches && root.matches(selector)) { found.unshift(root); }
    return found;
  }

  function drawCharts(root) {
    if (!window.Plotly) { return; }  // pages without charts do not load plotly.js
    within(root, ".chart[data-figure]").forEach(function (el) {
      if (el.dataset.drawn) { return; }
      var source = document.getElementById(el.dataset.figure);
      if (!source) { return; }
      var fig = JSON.parse(source.textContent);
      el.dataset.drawn = "1";
      window.Plotly.newPlot(el, fig.data, themed(fig.layout || {}), {displayModeBar: false, responsive: true}).then(function () {
        if (el.dataset.clickOpens === "customdata") {
          el.on("plotly_click", function (event) {
            var point = event && event.points && event.points[0];
            if (point && typeof point.customdata === "string") { window.location.href = point.customdata; }
          });
        }
      });
    });
  }

  // The chart colours of the current theme, read from app.css's custom properties.
  function themeColours() {
    var css = window.getComputedStyle(document.documentElement);
    function v(name, fallback) { return (css.getPropertyValue(name) || "").trim() || fallback; }
    return {fg: v("--fg", "#1d232b"), muted: v("--muted", "#6b7480"), line: v("--line", "#e1e4e8"), card: v("--card", "#fff")};
  }

  // The figure's layout with the theme's colours where the figure named none of its own: text,
  // axis grid and lines, hover labels; backgrounds transparent so the card's colour shows through.
  function themed(layout) {
    var c = themeColours();
    var out = Object.assign({}, layout);
    out.font = Object.assign({color: c.fg}, layout.font || {});
    out.paper_bgcolor = "rgba(0,0,0,0)";
    out.plot_bgcolor = "rgba(0,0,0,0)";
    out.hoverlabel = Object.assign({bgcolor: c.card, bordercolor: c.line, font: {color: c.fg}}, layout.hoverlabel || {});
    out.legend = Object.assign({}, layout.legend || {});
    out.legend.font = Object.assign({color: c.fg}, out.legend.font || {});
    ["xaxis", "yaxis"].concat(Object.keys(layout).filter(function (k) { return /^[xy]axis\d+$/.test(k); }))
      .forEach(function (k) {
        out[k] = Object.assign({gridcolor: c.line, linecolor: c.line, zerolinecolor: c.line}, layout[k] || {});
      });
    return out;
  }

  function recolourCharts() {
    if (!window.Plotly) { return; }
    document.querySelectorAll(".chart[data-figure][data-drawn]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source) { return; }
      var layout = themed(JSON.parse(source.textContent).layout || {});
      layout.height = el.layout && el.layout.height;  // keep what plotly worked out
      window.Plotly.relayout(el, layout);
    });
  }

  function wrapTables(root) {
    within(root, "table.table").forEach(function (table) {
      var parent = table.parentElement;
      if (!parent || parent.classList.contains("table-scroll")) { return; }
      var box = document.createElement("div");
      box.className = "table-scroll";
      parent.insertBefore(box, table);
      box.appendChild(table);
    });
  }

  function applyColours(root) {
    within(root, "[data-colour]").forEach(function (el) {
      el.style.setProperty("--c", el.dataset.colour);
    });
  }

  // Bulk selections: a [data-select-all=FORM] checkbox ticks every checkbox of this page that
  // belongs to that form (form="FORM"); [data-selected-count=FORM] says how many are ticked.
  function boxesOf(formId) {
    return Array.prototype.slice.call(document.querySelectorAll('input[type=checkbox][form="' + formId + '"]'));
  }

  function showCount(formId) {
    var ticked = boxesOf(formId).filter(function (box) { return box.checked; }).length;
    document.querySelectorAll('[data-selected-count="' + formId + '"]').forEach(function (el) {
      el.textContent = ticked + " selected";
    });
  }

  function wireSelections(root) {
    within(root, "input[data-select-all]").forEach(function (all) {
      if (all.dataset.wired) { return; }
      all.dataset.wired = "1";
      var formId = all.dataset.selectAll;
      all.addEventListener("change", function () {
        boxesOf(formId).forEach(function (box) { box.checked = all.checked; });
        showCount(formId);
      });
    });
  }

  function enhance(root) {
    root = root && root.querySelectorAll ? root : document;
    applyColours(root);
    wrapTables(root);
    drawCharts(root);
    wireSelections(root);
  }

  // A group's head checkbox ([data-select-group=KEY], grouped alert list) ticks the rows of that
  // group (tr[data-group-key=KEY]); delegated from the document, so rows htmx swaps in later work too.
  // A row's own box updates its bar's count the same way (delegated: rows swapped in later count too).
  document.addEventListener("change", function (event) {
    var head = event.target;
    if (!head.matches) { return; }
    if (head.matches("input[type=checkbox][form]")) { showCount(head.getAttribute("form")); return; }
    if (!head.matches("input[data-select-group]")) { return; }
    var formId = head.dataset.form;
    document.querySelectorAll('tr[data-group-key="' + head.dataset.selectGroup + '"] input[type=checkbox][form="' + formId + '"]')
      .forEach(function (box) { box.checked = head.checked; });
    showCount(formId);
  });

  // The old global name, for anything that still calls it.
  window.nwDrawCharts = function (root) { drawCharts(root || document); };

  if (window.matchMedia) {
    var dark = window.matchMedia("(prefers-color-scheme: dark)");
    if (dark.addEventListener) { dark.addEventListener("change", recolourCharts); }
  }

  if (window.htmx) {
    window.htmx.onLoad(enhance);  // also called once for the whole body when htmx starts
  } else {
    document.addEventListener("DOMContentLoaded", function () { enhance(document); });
  }
})();
