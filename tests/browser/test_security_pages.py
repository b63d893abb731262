"""Secure by default, in a real browser: every page of the menu, the API docs and the admin keep
the Content-Security-Policy (the autouse csp_violations fixture fails a test on any violation),
colours and charts still appear without inline style or script, and the error and lockout pages
are the portal's own."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from nodes.choices import NodeState
from nodes.tasks import snapshot_state_counts
from tests.factories import GPUFactory, NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MENU = [
    "/",
    "/nodes/",
    "/alerts/",
    "/day1/",
    "/repairs/",
    "/rma/",
    "/remediation/",
    "/reports/",
    "/reports/availability/",
    "/trends/",
    "/audit/",
    "/fabric/",
    "/fabric/discrepancies/",
    "/fabric/tickets/",
    "/api/docs/",
    "/admin/",
    "/admin/nodes/node/",
]


def test_every_page_of_the_menu_keeps_the_content_security_policy(page: Page, live_server, fleet_admin):
    node = NodeFactory(hostname="gpu-csp-01", state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=0)
    NodeFactory.create_batch(2, state=NodeState.TRIAGE)
    snapshot_state_counts()
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "fleetadmin")
    expect(page.locator("#counts-chart .main-svg").first).to_be_visible()
    # The tiles' colours come from data-colour through static/js/portal.js, not a style attribute.
    tile = page.locator('.tile[data-state="triage"]')
    assert tile.evaluate("el => el.style.getPropertyValue('--c')").strip() != ""
    for path in MENU:
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, path
        assert "default-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
    expect(page.locator("#content-main, #content").first).to_be_visible()  # the admin's node list
    page.goto(f"{live_server.url}/api/docs/")
    expect(page.locator(".swagger-ui .info .title").first).to_contain_text("Nodewarden API")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    expect(page.locator("#graph-chart .main-svg").first).to_be_visible()
    page.wait_for_load_state("networkidle")  # the htmx panels
    assert errors == []


def test_a_customer_opening_another_tenants_node_gets_the_portals_404(page: Page, live_server, customer, other_tenant):
    theirs = NodeFactory(hostname="globex-secret", tenant=other_tenant, state=NodeState.PRODUCTION)
    log_in(page, live_server.url, "acme-user")
    response = page.goto(f"{live_server.url}/nodes/{theirs.pk}/")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    expect(page.locator(".topbar .brand")).to_have_text("Nodewarden")
    assert "globex-secret" not in page.content() and "URLconf" not in page.content()


def test_too_many_wrong_passwords_lock_the_login_with_the_portals_page(page: Page, live_server, operator, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        log_in(page, live_server.url, "operator", password="wrong")
    expect(page.locator("h1")).to_have_text("Too many failed sign-ins")
    log_in(page, live_server.url, "operator")  # the right password no longer helps
    expect(page.locator("h1")).to_have_text("Too many failed sign-ins")
