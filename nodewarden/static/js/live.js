// Live refresh and the time-range picker, without inline script (the CSP allows none).
//
// Live regions (nodewarden/live.py): every element with data-live and hx-trigger="nw-live" is sent
// the nw-live event every N seconds (data-live-every on the page's [data-live-status]); htmx fetches
// its hx-get with the region's id as HX-Target and swaps in the fragment the view renders. Nothing
// refreshes while the tab is hidden, the user pressed Pause, a row is selected (a checkbox of a
// bulk form: the selection must survive) or a text field or menu has focus; a region whose fields hold
// unsent input is left alone, a swap that would land after the user selected a row is dropped, and
// an answer redirected elsewhere (the login page, once the session ended) stops refreshing.
//
// Zoom: a plotly chart with data-zoom-range turns a zoom on its time axis into ?from=&to= on the
// page's URL, the same parameters the picker (_timerange.html) and nodewarden/timerange.py use.
(function () {
  "use strict";

  var userPaused = false;
  var stopped = "";  // why refreshing stopped for good (the session ended): reload to go on

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  // UTC, as every time the portal prints (TIME_ZONE = "UTC") and the first one the server rendered.
  function clock(d) { return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()); }

  function statusEl() { return document.querySelector("[data-live-status]"); }

  function rowsSelected() {
    return !!document.querySelector("input[type=checkbox][form]:checked, input[type=checkbox][data-select-all]:checked");
  }

  // A field one types or chooses in (a ticked checkbox keeps focus after the click: that is no typing).
  var NOT_TYPED = ["checkbox", "radio", "button", "submit", "reset", "hidden", "image"];
  function fieldFocused() {
    var el = document.activeElement;
    if (!el) { return false; }
    if (el.tagName === "SELECT" || el.tagName === "TEXTAREA") { return true; }
    return el.tagName === "INPUT" && NOT_TYPED.indexOf(el.type) < 0;
  }

  // A menu moved off what the server rendered: its option marked selected, or else its first one.
  function selectChanged(f) {
    var marked = false, moved = false;
    for (var j = 0; j < f.options.length; j++) {
      var o = f.options[j];
      if (o.defaultSelected) { marked = true; }
      if (o.selected !== o.defaultSelected) { moved = true; }
    }
    return marked ? moved : (f.multiple ? f.selectedIndex !== -1 : f.selectedIndex > 0);
  }

  // A field whose value differs from the one the server rendered: the user's unsent input.
  function hasUnsentInput(region) {
    var fields = region.querySelectorAll("input, select, textarea");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden" || f.type === "button" || f.type === "submit") { continue; }
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) { return true; }
      } else if (f.tagName === "SELECT") {
        if (selectChanged(f)) { return true; }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function pauseReason() {
    if (stopped) { return stopped; }
    if (userPaused) { return "Paused"; }
    if (document.hidden) { return "Paused while the tab is hidden"; }
    if (rowsSelected()) { return "Paused: rows selected"; }
    if (fieldFocused()) { return "Paused while you type"; }
    return "";
  }

  function showState(text) {
    var s = statusEl();
    var el = s && s.querySelector("[data-live-state]");
    if (el && el.textContent !== text) { el.textContent = text; }
  }

  function tick() {
    var reason = pauseReason();
    showState(reason || "Live");
    if (reason || !window.htmx) { return; }
    document.querySelectorAll("[data-live]").forEach(function (region) {
      if (hasUnsentInput(region)) { return; }
      window.htmx.trigger(region, "nw-live");
    });
  }

  function isLiveRefresh(detail) {
    var cfg = detail && detail.requestConfig;
    return !!(cfg && cfg.triggeringEvent && cfg.triggeringEvent.type === "nw-live");
  }

  function redirected(detail) {
    var xhr = detail.xhr, asked = detail.pathInfo && detail.pathInfo.requestPath;
    if (!xhr || !xhr.responseURL || !asked) { return false; }
    return new URL(xhr.responseURL).pathname !== new URL(asked, window.location.href).pathname;
  }

  function start() {
    var s = statusEl();
    if (!s || !document.querySelector("[data-live]")) { return; }
    var every = parseInt(s.dataset.liveEvery, 10);
    if (!(every >= 1)) { every = 10; }
    var toggle = s.querySelector("[data-live-toggle]");
    if (toggle) {
      toggle.addEventListener("click", function () {
        userPaused = !userPaused;
        toggle.textContent = userPaused ? "Resume" : "Pause";
        toggle.setAttribute("aria-pressed", userPaused ? "true" : "false");
        showState(pauseReason() || "Live");
      });
    }
    document.addEventListener("visibilitychange", function () { if (!document.hidden) { tick(); } });
    // The user may select a row while a refresh is in flight: keep the page as they left it.
    document.body.addEventListener("htmx:beforeSwap", function (evt) {
      if (!isLiveRefresh(evt.detail)) { return; }
      if (redirected(evt.detail)) {  // the session ended: the answer is the login page, not rows
        stopped = "Stopped: signed out, reload the page";
        evt.detail.shouldSwap = false;
        showState(stopped);
        return;
      }
      if (pauseReason()) { evt.detail.shouldSwap = false; }
    });
    document.body.addEventListener("htmx:afterRequest", function (evt) {
      if (isLiveRefresh(evt.detail) && evt.detail.successful) {
        var t = s.querySelector("[data-live-updated]");
        if (t) { t.textContent = clock(new Date()); }
      }
    });
    window.setInterval(tick, every * 1000);
  }

  // Zoom on a time axis -> the same page for the zoomed window (the range lands in the URL).
  function moment(value) {
    // plotly gives "2026-11-20 03:12:45.123" (or a number of ms for a date axis)
    var text = typeof value === "number" ? new Date(value).toISOString() : String(value);
    return text.replace(" ", "T").slice(0, 16);
  }

  function wireZoom(el, tries) {
    if (el.dataset.zoomWired) { return; }
    if (typeof el.on !== "function") {  // not drawn yet (portal.js draws it)
      if (tries < 50) { window.setTimeout(function () { wireZoom(el, tries + 1); }, 100); }
      return;
    }
    el.dataset.zoomWired = "1";
    el.on("plotly_relayout", function (ev) {
      if (!ev) { return; }
      var lo = ev["xaxis.range[0]"], hi = ev["xaxis.range[1]"];
      if (lo === undefined && ev["xaxis.range"]) { lo = ev["xaxis.range"][0]; hi = ev["xaxis.range"][1]; }
      if (lo === undefined || hi === undefined) { return; }
      var url = new URL(window.location.href);
      url.searchParams.delete("range");
      url.searchParams.delete("page");
      url.searchParams.set("from", moment(lo));
      url.searchParams.set("to", moment(hi));
      window.location.assign(url.toString());
    });
  }

  function enhance(root) {
    root = root && root.querySelectorAll ? root : document;
    var charts = Array.prototype.slice.call(root.querySelectorAll(".chart[data-zoom-range]"));
    if (root.matches && root.matches(".chart[data-zoom-range]")) { charts.push(root); }
    charts.forEach(function (el) { wireZoom(el, 0); });
  }

  function init() {
    start();
    if (window.htmx) { window.htmx.onLoad(enhance); } else { enhance(document); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
