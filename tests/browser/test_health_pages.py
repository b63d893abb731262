"""Health in a real browser (headless Chromium): the alert list, and the node page's GPU health
and active checks panels loaded with htmx and drawn with plotly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from health import ruleconfig, xid
from health.choices import RecommendedAction, Severity
from health.models import Alert
from health.services import raise_finding
from nodes.choices import NodeState
from nodes.models import Run
from telemetry.ingest import ingest_reports
from telemetry.schema import decode_batch
from telemetry.testing import make_batch
from tests.factories import NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Rule and XID lookups are cached per process, and the live server runs in this process."""
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()
    yield
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()


def _log_in(page: Page, base: str, username: str) -> None:
    log_in(page, base, username)
    expect(page.locator("h1")).to_have_text("Fleet overview")


def _xid_79(node, gpu_index: int = 3) -> Alert:
    finding = raise_finding(
        node.pk,
        rule="xid",
        severity=Severity.CATASTROPHIC,
        gpu_index=gpu_index,
        summary="XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: GPU has fallen off the bus.",
        recommended_action=RecommendedAction.REBOOT,
        subject="xid:79",
        xid=79,
        source="agent",
    )
    return finding.alert


def _report_for_an_hour(node, count: int = 12) -> None:
    """An hour of an 8-GPU node's reports through the real ingest (what the agent's posts do)."""
    start = timezone.now() - timedelta(hours=1)
    body = json.dumps(make_batch(node.hostname, start=start, count=count, every_s=3600 / count)).encode()
    ingest_reports(node.pk, decode_batch(body))


def test_an_operator_acknowledges_a_catastrophic_alert_from_the_alert_list(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-hp-01.dc1.example.com", state=NodeState.PRODUCTION)
    alert = _xid_79(node)
    errors = watch_for_errors(page)

    _log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/alerts/")
    row = page.locator("#alert-table tbody tr", has_text="gpu-hp-01")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-severity", "catastrophic")
    expect(row).to_contain_text("XID 79")
    expect(row).to_contain_text("GPU 3")
    expect(row).to_contain_text("Reboot")
    row.locator("input[aria-label='Acknowledge note']").fill("reseating the riser in the next window")
    row.locator("button", has_text="Acknowledge").click()

    expect(page.locator(".messages")).to_contain_text("Alert acknowledged.")
    row = page.locator("#alert-table tbody tr", has_text="gpu-hp-01")
    expect(row).to_contain_text("ack operator: reseating the riser in the next window")
    alert.refresh_from_db()
    assert (alert.acknowledged_by, alert.acknowledged_note) == (operator, "reseating the riser in the next window")
    assert errors == []


def test_a_customer_sees_only_their_tenants_alerts(page: Page, live_server, customer, tenant, other_tenant):
    _xid_79(NodeFactory(hostname="acme-gpu-01", tenant=tenant, state=NodeState.PRODUCTION))
    _xid_79(NodeFactory(hostname="globex-gpu-01", tenant=other_tenant, state=NodeState.PRODUCTION))
    errors = watch_for_errors(page)

    _log_in(page, live_server.url, "acme-user")
    page.goto(f"{live_server.url}/alerts/")

    table = page.locator("#alert-table")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table).to_contain_text("acme-gpu-01")
    expect(table).not_to_contain_text("globex-gpu-01")
    expect(table.locator("button", has_text="Acknowledge")).to_have_count(0)  # customers read, never act
    assert errors == []


def test_the_node_page_loads_the_gpu_health_panel_with_charts_and_eight_gpus(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-hp-02.dc1.example.com", state=NodeState.PRODUCTION)
    _report_for_an_hour(node)
    errors = watch_for_errors(page)

    _log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")

    panel = page.locator("#node-gpu-health")
    expect(panel.locator("#gpu-health-table tbody tr")).to_have_count(8)
    expect(panel.locator(".js-plotly-plot").first).to_be_visible()
    expect(panel.locator(".chart .main-svg").first).to_be_visible()
    assert panel.locator(".chart .main-svg .scatterlayer .trace").count() > 0, "the charts have traces"
    expect(panel.locator("#gpu-health-age")).to_contain_text("ago")
    assert errors == []


def test_the_node_page_active_checks_panel_shows_a_check_the_operator_requested(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-hp-03.dc1.example.com", state=NodeState.PRODUCTION)
    errors = watch_for_errors(page)

    _log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    form = page.locator("#node-checks #check-request-form")
    form.locator("select[name=kind]").select_option("dcgm_diag")
    form.locator("input[name=reason]").fill("suspected HBM errors on GPU 5")
    form.locator("button[type=submit]").click()

    expect(page.locator(".messages")).to_contain_text("queued")
    run = Run.objects.get(node=node)
    row = page.locator(f"#check-runs tr[data-run='{run.pk}']")
    expect(row).to_have_attribute("data-status", "queued")
    expect(row).to_contain_text("by operator")
    expect(page.locator("#check-idle")).to_contain_text("Not idle")  # no report yet: the check waits
    assert (run.kind, run.requested_reason) == ("dcgm_diag", "suspected HBM errors on GPU 5")
    assert errors == []
