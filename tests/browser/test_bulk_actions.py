"""An operator selects ten nodes on the node list and drains them in one action, and sees which
nodes a blast-radius limit stopped (headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from remediation.choices import Domain
from remediation.models import BlastRadiusLimit
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

    expect(page.locator(".messages")).to_contain_text("10 set to drain when their job ends: gpu-bulk-00, ")
    assert page.url.endswith("/nodes/?q=gpu-bulk")  # back on the same filtered page
    page.screenshot(path=str(SCREENSHOTS / "node-list-bulk-drained.png"), full_page=True)
    for node in serving:
        assert Node.objects.get(pk=node.pk).state == NodeState.DRAIN_PENDING
        event = NodeEvent.objects.get(node=node, transition="request_drain")
        assert (event.actor, event.reason) == (operator, "Firmware 2.3 rollout, rack B")
    assert Node.objects.get(hostname="gpu-other-01").state == NodeState.TRIAGE
    assert errors == []


def test_an_operator_drains_ten_nodes_now_and_sees_the_ones_a_limit_stopped(page: Page, live_server, operator):
    cluster = ClusterFactory(name="bulk-west")
    BlastRadiusLimit.objects.create(domain=Domain.CLUSTER, max_share=1.0, max_count=3, max_drains_per_hour=100)
    nodes = [NodeFactory(hostname=f"gpu-west-{i:02d}", cluster=cluster, state=NodeState.PRODUCTION) for i in range(10)]
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/?q=gpu-west")
    for node in nodes:  # one by one, as an operator ticks them
        page.check(f'input[name=ids][value="{node.pk}"]')
    expect(page.locator("[data-selected-count=node-bulk]")).to_have_text("10 selected")
    page.select_option("#node-bulk select[name=action]", "start_draining")
    page.fill("#node-bulk input[name=reason]", "PDU swap, row west")
    page.click("#node-bulk button[type=submit]")

    messages = page.locator(".messages")
    expect(messages).to_contain_text("3 drained: gpu-west-00, gpu-west-01, gpu-west-02.")
    expect(messages).to_contain_text("7 refused: gpu-west-03 (stopped by the blast-radius limit of the cluster")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "node-list-bulk-limited.png"), full_page=True)
    states = [Node.objects.get(pk=n.pk).state for n in nodes]
    assert states == [NodeState.DRAINING] * 3 + [NodeState.PRODUCTION] * 7
    assert NodeEvent.objects.filter(transition="start_draining", reason="PDU swap, row west").count() == 3
    assert errors == []
