// The portal's only script of its own. The Content-Security-Policy allows no inline script or
// style (nodewarden/settings.py), so what templates once did inline happens here, on the first
// load and on every piece of content htmx swaps in (htmx.onLoad):
// - charts: every .chart[data-figure] is drawn with plotly.js from the json_script element named
//   by data-figure; data-click-opens="customdata" makes a click on a point open its customdata URL;
// - colours: an element's data-colour becomes its --c custom property (badges, tiles), set through
//   the CSSOM, which the policy allows, where a style="" attribute would be blocked;
// - selections: "select all on this page", "select all in this group" and the count of the bulk-action bars.
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
      window.Plotly.newPlot(el, fig.data, fig.layout, {displayModeBar: false, responsive: true}).then(function () {
        if (el.dataset.clickOpens === "customdata") {
          el.on("plotly_click", function (event) {
            var point = event && event.points && event.points[0];
            if (point && typeof point.customdata === "string") { window.location.href = point.customdata; }
          });
        }
      });
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
      boxesOf(formId).forEach(function (box) {
        box.addEventListener("change", function () { showCount(formId); });
      });
    });
  }

  function enhance(root) {
    root = root && root.querySelectorAll ? root : document;
    applyColours(root);
    drawCharts(root);
    wireSelections(root);
  }

  // A group's head checkbox ([data-select-group=KEY], grouped alert list) ticks the rows of that
  // group (tr[data-group-key=KEY]); delegated from the document, so rows htmx swaps in later work too.
  document.addEventListener("change", function (event) {
    var head = event.target;
    if (!head.matches || !head.matches("input[data-select-group]")) { return; }
    var formId = head.dataset.form;
    document.querySelectorAll('tr[data-group-key="' + head.dataset.selectGroup + '"] input[type=checkbox][form="' + formId + '"]')
      .forEach(function (box) { box.checked = head.checked; });
    showCount(formId);
  });

  // The old global name, for anything that still calls it.
  window.nwDrawCharts = function (root) { drawCharts(root || document); };

  if (window.htmx) {
    window.htmx.onLoad(enhance);  // also called once for the whole body when htmx starts
  } else {
    document.addEventListener("DOMContentLoaded", function () { enhance(document); });
  }
})();
