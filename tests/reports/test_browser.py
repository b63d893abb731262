"""The report page in a real browser (headless Chromium): the Sankey diagram draws, and a click on
one of its bands opens the list of the nodes that made that change."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import browser_context_args, browser_type_launch_args  # noqa: F401
from tests.browser.pages import log_in, watch_for_errors

from .conftest import NOW, D

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_click_on_a_band_of_the_flow_lists_its_nodes(page: Page, live_server, operator, week):
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    query = urlencode({"since": (NOW - 7 * D).isoformat(), "until": NOW.isoformat()})
    page.goto(f"{live_server.url}/reports/?{query}")
    expect(page.locator("h1")).to_have_text("Fleet reports")
    bands = page.locator("#flow-sankey .sankey-link")
    expect(bands).to_have_count(19)
    bands.first.click(force=True)  # the widest band: firmware update -> production (3 changes)
    expect(page.locator("#flow-nodes")).to_be_visible()
    expect(page.locator("h1")).to_contain_text("→")
    assert "/reports/flows/?" in page.url and "source=" in page.url
    assert errors == []
