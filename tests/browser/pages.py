"""Helpers for driving the portal in a browser test."""

from __future__ import annotations

from typing import Any


def watch_for_errors(page: Any) -> list[str]:
    """Collect JavaScript errors, console errors and 5xx answers seen while a test drives ``page``."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
    page.on("response", lambda r: errors.append(f"HTTP {r.status} {r.url}") if r.status >= 500 else None)
    return errors


def log_in(page: Any, base: str, username: str, password: str = "password") -> None:
    """Log in through the login form (with the fixtures' password unless told)."""
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


# Every page of the portal that tests/browser/test_layout.py checks at a desktop's and a phone's width
# (name, path; "{node}", "{ticket}", "{rma}" are the ids of a node, a repair ticket and an RMA case
# test_layout makes). A new page of the portal belongs here.
PORTAL_PAGES: list[tuple[str, str]] = [
    ("overview", "/"),
    ("nodes", "/nodes/"),
    ("node", "/nodes/{node}/"),
    ("alerts", "/alerts/"),
    ("day1", "/day1/"),
    ("repairs", "/repairs/"),
    ("repair", "/repairs/{ticket}/"),
    ("rma", "/rma/"),
    ("rma-case", "/rma/{rma}/"),
    ("remediation", "/remediation/"),
    ("reports", "/reports/"),
    ("reports-availability", "/reports/availability/"),
    ("reports-flows", "/reports/flows/?source=production&target=triage"),
    ("trends", "/trends/"),
    ("trends-node", "/trends/nodes/{node}/"),
    ("checks", "/checks/freshness/"),
    ("audit", "/audit/"),
    ("fabric", "/fabric/"),
    ("fabric-discrepancies", "/fabric/discrepancies/"),
    ("fabric-tickets", "/fabric/tickets/"),
    ("fabric-validations", "/fabric/validations/"),
    ("api-docs", "/api/docs/"),
    ("not-found", "/no/such/page/"),
]

# Widths a page must fit without scrolling sideways: a laptop's and a phone's (iPhone 12-15, CSS pixels).
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

# What a finished page must not show, checked in the page itself after the page (and its htmx
# panels) settled: sideways scrolling of the page, a plotly chart that did not render, a table
# with two columns of the same name. Returns the problems found, in words.
LAYOUT_PROBLEMS_JS = """() => {
  const problems = [];
  const root = document.scrollingElement || document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) {
    const wide = Array.from(document.querySelectorAll('body *')).filter(el => {
      const r = el.getBoundingClientRect();
      return r.right > root.clientWidth + 1 && !el.closest('.table-scroll') && getComputedStyle(el).position !== 'fixed';
    }).slice(0, 3).map(el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : ''));
    problems.push('the page scrolls sideways: ' + root.scrollWidth + ' px wide in ' + root.clientWidth + ' px (' + wide.join(', ') + ')');
  }
  document.querySelectorAll('.chart[data-figure], .js-plotly-plot').forEach(el => {
    if (!el.querySelector('.main-svg')) { problems.push('chart not drawn: #' + (el.id || '?')); }
  });
  document.querySelectorAll('table').forEach(table => {
    const row = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!row) { return; }
    const names = Array.from(row.cells).map(c => c.textContent.trim()).filter(Boolean);
    const twice = names.filter((n, i) => names.indexOf(n) !== i);
    if (twice.length) { problems.push('table #' + (table.id || '?') + ' names a column twice: ' + twice.join(', ')); }
  });
  // A one-line control stretched tall (a flex basis meant as a width landing on a column flex's height).
  document.querySelectorAll('input:not([type=hidden]):not([type=checkbox]):not([type=radio]), select, button').forEach(el => {
    const h = el.getBoundingClientRect().height;
    if (h > 64) { problems.push(el.tagName.toLowerCase() + (el.name ? '[name=' + el.name + ']' : '') + ' is ' + Math.round(h) + ' px tall'); }
  });
  return problems;
}"""

# The page has settled: loaded, no htmx request, swap or settle under way (the panels a page loads
# with hx-trigger="load" are in flight from the start), and every chart drawn (plotly adds .main-svg).
# Cheaper than Playwright's "networkidle", which waits half a second of quiet on every page.
SETTLED_JS = """() => document.readyState === 'complete'
  && !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')
  && Array.from(document.querySelectorAll('.chart[data-figure]')).every(el => el.querySelector('.main-svg'))"""


def page_background_luminance(page: Any) -> float:
    """The relative luminance (0 black .. 1 white) of the body's background colour."""
    rgb = page.evaluate(
        "() => getComputedStyle(document.body).backgroundColor.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number)"
    )
    return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255
