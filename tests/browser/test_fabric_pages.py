"""The fabric overview in a real browser (headless Chromium): the topology and the runs
chart drawn by plotly, with a pulled cable's open ticket, and no console error."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from fabric import services
from fabric.plan import import_plan
from fabric.validation import Port, Seen, SeenLink
from health import ruleconfig, xid
from nodes.services import Actor
from tests.factories import NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TESTS = Actor.system("tests")


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Rule and XID lookups are cached per process (a ticket raises a finding), and the live server runs here."""
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()
    yield
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()


def small_fabric_with_a_pulled_cable() -> None:
    NodeFactory(hostname="gpu-fb-02")
    import_plan(
        "a_device,a_port,b_device,b_port\ngpu-fb-01 mlx5_0,1,leaf01,1\ngpu-fb-02 mlx5_0,1,leaf01,2\n"
        "leaf01,7,spine01,1\n",
        actor=TESTS,
        source="plan.csv",
    )
    seen = Seen(
        links=[
            SeenLink(Port("gpu-fb-01 mlx5_0", 1), Port("leaf01", 1)),
            SeenLink(Port("leaf01", 7), Port("spine01", 1)),
        ],
        down_ports={Port("leaf01", 2): "Down/Polling"},
        devices={"gpu-fb-01 mlx5_0", "leaf01", "spine01"},
    )
    services.record_run(seen, {}, actor=TESTS)


def test_the_fabric_overview_draws_the_topology_with_the_open_ticket(page: Page, live_server, operator):
    small_fabric_with_a_pulled_cable()
    errors = watch_for_errors(page)

    log_in(page, live_server.url, "operator")
    expect(page.locator("h1")).to_have_text("Fleet overview")
    page.click("header nav >> text=Fabric")

    expect(page.locator("h1")).to_have_text("InfiniBand fabric")
    expect(page.locator("#fabric-open-tickets .count")).to_have_text("1")
    expect(page.locator("#fabric-kinds [data-kind=link_down] .count")).to_have_text("1")
    expect(page.locator("#topology-chart .plot-container")).to_have_count(1)
    expect(page.locator("#topology-chart")).to_have_class(re.compile(r"\bjs-plotly-plot\b"))
    expect(page.locator("#topology-chart .legend")).to_contain_text("In an open ticket")
    expect(page.locator("#runs-chart .plot-container")).to_have_count(1)
    assert errors == []
