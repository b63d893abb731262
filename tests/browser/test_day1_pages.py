"""Day 1 in a real browser (headless Chromium): the node page's Day 1 panel (htmx) with its
stage table and the operator's skip, and the fleet Day 1 view with a triaged node's reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from health import ruleconfig, xid
from nodes.choices import NodeState
from nodes.services import Actor
from tests.factories import NodeFactory
from validation import services
from validation.stages import Verdict

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()
    yield
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()


def open_inventory_stage(hostname: str):
    """A node whose inventory check is open (started by an operator, waiting for a report)."""
    node = NodeFactory(hostname=hostname, state=NodeState.INVENTORY_CHECK)
    services.start_stage(node.pk, actor=Actor.system("tests"), reason="bring-up")
    return node


def test_an_operator_skips_the_open_stage_from_the_node_page(page: Page, live_server, operator):
    node = open_inventory_stage("gpu-d1-01.dc1.example.com")
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    stages = page.locator("#day1-stages")
    expect(stages.locator('tr[data-stage="inventory"]')).to_have_attribute("data-status", "running")
    expect(stages.locator('tr[data-stage="burn_in"]')).to_have_attribute("data-status", "pending")
    page.fill("#day1-actions input[name=reason]", "Tray swapped for a certified one")
    page.click("#day1-actions button:has-text('Skip stage')")
    expect(page.locator('#day1-stages tr[data-stage="inventory"]')).to_have_attribute("data-status", "skipped")
    # Burn-in is the current stage now; its run opens when a worker takes the follow-up (none runs here).
    expect(page.locator('#day1-stages tr[data-stage="burn_in"]')).to_have_class("current")
    node.refresh_from_db()
    assert node.state == NodeState.BURN_IN
    assert errors == []


def test_the_fleet_day1_view_shows_stages_and_the_commonest_failure(page: Page, live_server, operator):
    failing = open_inventory_stage("gpu-d1-02.dc1.example.com")
    run = services.open_stage_run(failing.pk, services.stage_info("inventory"))
    services.conclude(run.pk, Verdict(False, "Inventory mismatch: GPU count 7, profile HGX H100 8-GPU expects 8"))
    open_inventory_stage("gpu-d1-03.dc1.example.com")
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.click("nav >> text=Day 1")
    expect(page.locator("h1")).to_have_text("Day 1 validation")
    expect(page.locator('#day1-counts [data-stage="inventory"] .count')).to_have_text("1")
    expect(page.locator("#day1-failures")).to_contain_text("GPU count N, profile HGX H100 8-GPU expects N")
    expect(page.locator("#day1-nodes")).to_contain_text("gpu-d1-03.dc1.example.com")
    assert errors == []
