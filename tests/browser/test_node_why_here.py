"""A new operator finds why a node is in triage on the first screen of its page (headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from health.services import raise_finding
from nodes import services
from nodes.choices import NodeState
from tests.factories import NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# pytest-playwright's output folder (ignored by git): the screenshots are kept with its artefacts.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-results" / "screenshots"
FIRST_SCREEN_PX = 600


def test_a_triage_nodes_reason_is_on_the_first_screen(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-why-01", state=NodeState.PRODUCTION)
    # What a failed burn-in check causes: its finding, then remediation's cordon (called as it calls it).
    raise_finding(
        node.pk,
        rule="active_check",
        severity="degraded",
        subject="burn_in",
        summary="Burn-in failed: GPU 3 at 61% of the bandwidth floor",
        source="check",
        every_event=True,
    )
    services.cordon(node.pk, actor=services.Actor.system("remediation"), reason="Remediation 7: burn-in failed")
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    finding = page.locator("#why-finding")
    expect(finding).to_contain_text("Burn-in failed: GPU 3 at 61% of the bandwidth floor")
    box = finding.bounding_box()
    assert box is not None and box["y"] < FIRST_SCREEN_PX, box
    expect(page.locator("#why-reason")).to_contain_text("system:remediation")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "node-why-here-triage.png"))
    assert errors == []
