"""Remediation in a real browser (headless Chromium): the node page's remediation panel
(htmx) with the ladder and the decisions, then the fleet's remediation page with its chart."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from nodes.choices import NodeState
from nodes.models import StateCountSnapshot
from tests.factories import NodeFactory
from tests.remediation.test_pages import remediation_on

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_node_page_shows_the_open_remediation_its_rung_and_decisions(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-rem-01.dc1.example.com", state=NodeState.REMEDIATING)
    remediation_on(node)
    for days in (2, 1):
        StateCountSnapshot.objects.create(
            taken_at=timezone.now() - timedelta(days=days), cluster=node.cluster, state=NodeState.PRODUCTION, count=9
        )
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    ladder = page.locator("#remediation-ladder")
    expect(ladder.locator("tr.current")).to_have_attribute("data-rung", "power_cycle")
    expect(ladder.locator("tr.current")).to_contain_text("BMC power cycle")
    expect(ladder.locator('tr[data-rung="gpu_reset"]')).to_have_attribute("data-step", "failed")
    expect(page.locator("#remediation-decisions")).to_contain_text("climbing to bmc power cycle")
    expect(page.locator("#remediation-outlook")).to_contain_text("Being repaired: bmc power cycle.")
    expect(page.locator("#remediation-actions button[data-action='stop']")).to_be_visible()
    page.click("nav >> text=Remediation")
    expect(page.locator("h1")).to_have_text("Remediation")
    expect(page.locator("#open-remediations")).to_contain_text("gpu-rem-01.dc1.example.com")
    expect(page.locator("#availability-chart .main-svg").first).to_be_visible()
    assert errors == []
