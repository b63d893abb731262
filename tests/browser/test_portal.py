"""An operator and a customer use the portal in a real browser (headless Chromium)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from nodes.tasks import snapshot_state_counts
from tests.factories import GPUFactory, NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_logs_in_browses_and_drains_a_node(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-browser-01", state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=0)
    NodeFactory.create_batch(3, state=NodeState.TRIAGE)
    snapshot_state_counts()
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "operator")
    expect(page.locator("h1")).to_have_text("Fleet overview")
    expect(page.locator('.tile[data-state="triage"] .count')).to_have_text("3")
    expect(page.locator("#counts-chart .main-svg").first).to_be_visible()

    page.click("text=Nodes")
    page.fill("input[name=q]", "gpu-browser")
    page.click("button:has-text('Filter')")
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    page.click("text=gpu-browser-01")

    expect(page.locator("#graph-chart .main-svg").first).to_be_visible()
    expect(page.locator("#timeline-chart .main-svg").first).to_be_visible()
    page.fill("#transition-form input[name=reason]", "XID 94: contained ECC error")
    page.click("button[data-transition=request_drain]")
    expect(page.locator(".messages")).to_contain_text("is now Drain pending")
    expect(page.locator("#history")).to_contain_text("XID 94: contained ECC error")

    assert Node.objects.get(pk=node.pk).state == NodeState.DRAIN_PENDING
    assert NodeEvent.objects.get(node=node, transition="request_drain").actor == operator
    assert "Server Error" not in page.content()
    assert errors == []


def test_a_customer_sees_only_their_nodes(page: Page, live_server, customer, tenant, other_tenant):
    mine = NodeFactory(hostname="acme-node", tenant=tenant, state=NodeState.PRODUCTION)
    theirs = NodeFactory(hostname="globex-node", tenant=other_tenant, state=NodeState.PRODUCTION)
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "acme-user")
    expect(page.locator("h1")).to_have_text("Fleet overview")
    page.goto(f"{live_server.url}/nodes/")
    expect(page.locator("#node-table")).to_contain_text("acme-node")
    expect(page.locator("#node-table")).not_to_contain_text("globex-node")
    page.goto(f"{live_server.url}/nodes/{mine.pk}/")
    expect(page.locator("text=Read-only view.")).to_be_visible()
    response = page.goto(f"{live_server.url}/nodes/{theirs.pk}/")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")  # the portal's 404 page (templates/404.html)
    assert [e for e in errors if "404" not in e] == []
