"""An operator selects ten nodes on the node list and drains them in one action (headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from tests.factories import ClusterFactory, NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# pytest-playwright's output folder (ignored by git): the screenshots are kept with its artefacts.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-results" / "screenshots"


def test_an_operator_selects_ten_nodes_and_drains_them_in_one_action(page: Page, live_server, operator):
    cluster = ClusterFactory(name="bulk-east")
    serving = [
        NodeFactory(hostname=f"gpu-bulk-{i:02d}", cluster=cluster, state=NodeState.PRODUCTION) for i in range(10)
    ]
    NodeFactory(hostname="gpu-other-01", state=NodeState.TRIAGE)
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/?q=gpu-bulk")
    expect(page.locator("#node-table tbody tr")).to_have_count(10)
    page.check("input[data-select-all=node-bulk]")
    expect(page.locator("[data-selected-count=node-bulk]")).to_have_text("10 selected")
    page.select_option("#node-bulk select[name=action]", "request_drain")
    page.fill("#node-bulk input[name=reason]", "Firmware 2.3 rollout, rack B")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "node-list-bulk-selected.png"), full_page=True)
    page.click("#node-bulk button[type=submit]")

    expect(page.locator(".messages")).to_contain_text("10 set to drain when their job ends.")
    assert page.url.endswith("/nodes/?q=gpu-bulk")  # back on the same filtered page
    page.screenshot(path=str(SCREENSHOTS / "node-list-bulk-drained.png"), full_page=True)
    for node in serving:
        assert Node.objects.get(pk=node.pk).state == NodeState.DRAIN_PENDING
        event = NodeEvent.objects.get(node=node, transition="request_drain")
        assert (event.actor, event.reason) == (operator, "Firmware 2.3 rollout, rack B")
    assert Node.objects.get(hostname="gpu-other-01").state == NodeState.TRIAGE
    assert errors == []
