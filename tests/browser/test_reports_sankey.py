"""The reports page's lifecycle Sankey in the dark colour scheme: its state labels are drawn in the
theme's text colour with no halo (plotly's automatic text shadow is a blurred box of the opposite
colour, which in the dark theme covered the bars), no label overlaps another or is cut off, and on a
phone the chart keeps its width and scrolls in its own box. A screenshot is
kept in the screenshot directory for a person to look at."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page

from reports.models import DailyTransitionCount

from .pages import DESKTOP, LAYOUT_PROBLEMS_JS, PHONE, SETTLED_JS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The demo's shape: a big production node, small flows through the validation states.
FLOWS = [
    ("production", "drain_pending", 900),
    ("drain_pending", "draining", 880),
    ("drain_pending", "production", 20),
    ("draining", "triage", 500),
    ("draining", "maintenance", 380),
    ("triage", "remediating", 420),
    ("triage", "repair", 80),
    ("remediating", "production", 300),
    ("remediating", "firmware_update", 120),
    ("maintenance", "firmware_update", 380),
    ("repair", "inventory_check", 70),
    ("firmware_update", "inventory_check", 500),
    ("inventory_check", "burn_in", 560),
    ("burn_in", "production", 550),
    ("repair", "rma", 10),
]

LABELS_JS = """() => Array.from(document.querySelectorAll('#flow-sankey .node-label')).map(el => {
  const r = el.getBoundingClientRect(), s = getComputedStyle(el);
  return {text: el.textContent, fill: s.fill, shadow: s.textShadow, x: r.x, y: r.y, w: r.width, h: r.height};
})"""
FG_JS = "() => getComputedStyle(document.documentElement).getPropertyValue('--fg').trim()"


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    return f"rgb({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)})"


@pytest.mark.parametrize(
    ("width", "viewport", "scheme"),
    [("desktop", DESKTOP, "dark"), ("desktop", DESKTOP, "light"), ("phone", PHONE, "dark")],
    ids=["desktop-dark", "desktop-light", "phone-dark"],
)
def test_sankey_labels_read_in_the_theme(page: Page, live_server, fleet_admin, screenshot_dir, width, viewport, scheme):
    day = timezone.localdate() - timedelta(days=2)
    DailyTransitionCount.objects.bulk_create(
        DailyTransitionCount(day=day, source_state=s, target_state=t, count=n) for s, t, n in FLOWS
    )
    page.set_viewport_size(viewport)
    page.emulate_media(color_scheme=scheme)
    log_in(page, live_server.url, "fleetadmin")
    page.goto(f"{live_server.url}/reports/")
    page.wait_for_function(SETTLED_JS, timeout=15_000)
    page.locator("#flow-sankey").screenshot(path=screenshot_dir / f"{width}-reports-sankey-{scheme}.png")

    assert page.evaluate(LAYOUT_PROBLEMS_JS) == []  # on a phone it scrolls in its own box, not the page
    labels = page.evaluate(LABELS_JS)
    chart = page.locator("#flow-sankey").bounding_box()
    assert chart is not None
    for label in labels:  # none cut off at the chart's edges
        assert chart["x"] <= label["x"] and label["x"] + label["w"] <= chart["x"] + chart["width"], label
    fg = _rgb(page.evaluate(FG_JS))
    assert len(labels) >= 10
    for label in labels:
        assert label["fill"] == fg, label
        assert label["shadow"] in ("none", ""), label
    boxes = [lb for lb in labels if lb["w"] > 0]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"]
                or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"]
                or b["y"] + b["h"] <= a["y"]
            )
            assert apart, f"{a['text']!r} overlaps {b['text']!r}"
