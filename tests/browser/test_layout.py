"""Every page of the portal (pages.PORTAL_PAGES) at a laptop's width in the light theme and at a
phone's (390 px) in the dark one: no sideways scrolling of the page (a wide table scrolls in its
own box), every chart drawn, no table naming a column twice, no console error, no 5xx, and no
Content-Security-Policy violation (the autouse csp_violations fixture). A screenshot of each page
at each width is kept in the screenshot directory (conftest.screenshot_dir) for a person to look at.

One browser page per width goes through every page (a fresh context per portal page would cost
more than the checks), so a test reports all the pages that fail, not only the first."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from nodes.choices import NodeState
from nodes.services import Actor
from nodes.tasks import snapshot_state_counts
from repairs.services import open_repair_ticket, open_rma_case
from tests.factories import ClusterFactory, GPUFactory, NodeFactory

from .pages import (
    DESKTOP,
    LAYOUT_PROBLEMS_JS,
    PHONE,
    PORTAL_PAGES,
    SETTLED_JS,
    log_in,
    page_background_luminance,
    watch_for_errors,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Pages styled by others: Swagger UI keeps its own light look.
OWN_THEME = {"api-docs"}


@pytest.mark.parametrize(
    ("width", "viewport", "scheme"),
    [("desktop", DESKTOP, "light"), ("phone", PHONE, "dark")],
    ids=["desktop-light", "phone-dark"],
)
def test_every_portal_page_fits_the_screen_and_draws(
    page: Page, live_server, fleet_admin, screenshot_dir, width, viewport, scheme
):
    cluster = ClusterFactory(name="lab-a-with-a-long-cluster-name")
    node = NodeFactory(hostname="gpu-layout-01-with-a-long-hostname", state=NodeState.PRODUCTION, cluster=cluster)
    for index in range(8):  # a full node's GPU table: long UUIDs and serials, the widest table
        GPUFactory(node=node, index=index)
    broken = NodeFactory.create_batch(3, state=NodeState.TRIAGE, cluster=cluster)[0]
    operator = Actor(user=fleet_admin)
    ticket = open_repair_ticket(
        broken.pk, component="GPU 3 (serial 1650123)", what="Reseat", actor=operator, reason="XID 79", move_node=False
    )
    rma = open_rma_case(
        broken.pk,
        vendor="Supermicro",
        part="GPU",
        failed_serial="1650123",
        actor=operator,
        reason="dead",
        move_node=False,
    )
    ids = {"node": node.pk, "ticket": ticket.pk, "rma": rma.pk}
    snapshot_state_counts()
    page.set_viewport_size(viewport)
    page.emulate_media(color_scheme=scheme)
    errors = watch_for_errors(page)
    problems: list[str] = []

    def check(name: str, url: str, expected: int = 200) -> None:
        seen = len(errors)
        response = page.goto(url)
        if response is None or response.status != expected:
            problems.append(f"{name}: HTTP {response.status if response else None}, not {expected}")
        try:  # the htmx panels answered and swapped in, their charts drawn
            page.wait_for_function(SETTLED_JS, timeout=10_000)
        except PlaywrightTimeout:  # LAYOUT_PROBLEMS_JS below names any chart that did not render
            problems.append(f"{name}: not settled in 10 s (an htmx request still open or a chart not drawn)")
        problems.extend(f"{name}: {problem}" for problem in page.evaluate(LAYOUT_PROBLEMS_JS))
        if scheme == "dark" and name not in OWN_THEME and page_background_luminance(page) > 0.3:
            problems.append(f"{name}: not dark in the dark colour scheme")
        if expected == 404:  # the browser logs the 404 answer itself as a console error
            errors[seen:] = [e for e in errors[seen:] if "404" not in e]
        problems.extend(f"{name}: {e}" for e in errors[seen:])
        page.screenshot(path=screenshot_dir / f"{width}-{name}.png", full_page=True)

    check("login", f"{live_server.url}/login/")
    log_in(page, live_server.url, "fleetadmin")
    for name, path in PORTAL_PAGES:
        check(name, live_server.url + path.format(**ids), 404 if name == "not-found" else 200)
    if scheme == "dark":  # the charts follow when the system's setting changes, without a reload
        check("overview", live_server.url + "/")
        font = "() => document.getElementById('counts-chart').layout.font.color"
        dark_font = page.evaluate(font)
        page.emulate_media(color_scheme="light")
        page.wait_for_function(f"() => ({font})() !== {dark_font!r}", timeout=5_000)
        assert page.evaluate(font) == "#1d232b" != dark_font  # app.css's --fg, light and dark
    assert problems == [], f"{width} ({viewport['width']} px, {scheme}):\n" + "\n".join(problems)
