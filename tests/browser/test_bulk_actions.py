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


def test_an_operator_ticks_one_group_of_alerts_and_acknowledges_them_at_once(page: Page, live_server, operator):
    from health import ruleconfig, xid
    from health.choices import Severity
    from health.models import Alert
    from health.services import raise_finding

    ruleconfig.invalidate_cache()  # cached per process, and the live server runs in this process
    xid.invalidate_cache()
    node = NodeFactory(hostname="gpu-grp-01")
    for rule, severity in (
        ("xid", Severity.CATASTROPHIC),
        ("gpu_temperature", Severity.WARNING),
        ("nvlink_down", Severity.DEGRADED),
    ):
        raise_finding(node.pk, rule=rule, severity=severity, summary=f"{rule} on GPU 3", gpu_index=3)
    other = NodeFactory(hostname="gpu-grp-02")
    raise_finding(other.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="warm", gpu_index=0)
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/alerts/?group=node")
    head = page.locator('tr.group-head[data-group="gpu-grp-01"]')
    expect(head).to_contain_text("3 alerts")
    head.locator("input[data-select-group]").check()
    expect(page.locator("[data-selected-count=alert-bulk]")).to_have_text("3 selected")
    page.select_option("#alert-bulk select[name=action]", "acknowledge")
    page.fill("#alert-bulk input[name=reason]", "RMA for GPU 3 booked")
    page.click("#alert-bulk button[type=submit]")

    expect(page.locator(".messages")).to_contain_text("3 acknowledged: gpu-grp-01 GPU 3 ")
    assert set(Alert.objects.filter(acknowledged_note="RMA for GPU 3 booked").values_list("node_id", flat=True)) == {
        node.pk
    }
    assert not Alert.objects.get(node=other).acknowledged_at
    assert errors == []
