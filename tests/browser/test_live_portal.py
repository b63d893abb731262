"""Lists refresh themselves without losing a selection; the time-range picker and a zoom move a chart
(headless Chromium; static/js/live.js, nodewarden/live.py, nodewarden/timerange.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from health.choices import Severity
from health.services import raise_finding
from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent, StateCountSnapshot
from tests.factories import ClusterFactory, NodeFactory

from .pages import log_in, watch_for_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# pytest-playwright's output folder (ignored by git): the screenshots are kept with its artefacts.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-results" / "screenshots"


@pytest.fixture(autouse=True)
def fast_refresh(settings):
    """Refresh every second instead of every ten (the live server runs in this process)."""
    settings.NODEWARDEN_LIVE_REFRESH_SECONDS = 1


def test_the_node_list_picks_up_a_new_node_without_a_reload_and_can_be_paused(page: Page, live_server, operator):
    NodeFactory(hostname="gpu-live-01", state=NodeState.PRODUCTION)
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/?q=gpu-live")
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    page.evaluate("window.__sameDocument = true")  # gone if the page were reloaded
    first_update = page.locator("[data-live-updated]").text_content()

    NodeFactory(hostname="gpu-live-02", state=NodeState.TRIAGE)
    expect(page.locator("#node-table tbody tr")).to_have_count(2, timeout=10_000)
    expect(page.locator("#node-table")).to_contain_text("gpu-live-02")
    expect(page.locator("[data-live-updated]")).not_to_have_text(first_update or "")
    assert page.evaluate("window.__sameDocument") is True

    page.click("[data-live-toggle]")
    expect(page.locator("[data-live-state]")).to_have_text("Paused")
    NodeFactory(hostname="gpu-live-03", state=NodeState.TRIAGE)
    page.wait_for_timeout(3000)
    expect(page.locator("#node-table tbody tr")).to_have_count(2)
    page.click("[data-live-toggle]")
    expect(page.locator("#node-table tbody tr")).to_have_count(3, timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True
    assert errors == []


def test_a_selection_on_the_alert_and_node_lists_survives_the_refresh(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-sel-00", state=NodeState.PRODUCTION)
    for i in (1, 2):
        NodeFactory(hostname=f"gpu-sel-{i:02d}", state=NodeState.PRODUCTION)
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/?q=gpu-sel")
    expect(page.locator("#node-table tbody tr")).to_have_count(3)
    page.check("input[aria-label='Select gpu-sel-01']")
    expect(page.locator("[data-selected-count=node-bulk]")).to_have_text("1 selected")

    NodeFactory(hostname="gpu-sel-99", state=NodeState.PRODUCTION)
    page.wait_for_timeout(3500)  # three refresh periods
    expect(page.locator("[data-live-state]")).to_have_text("Paused: rows selected")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "node-list-live-paused.png"))
    expect(page.locator("input[aria-label='Select gpu-sel-01']")).to_be_checked()
    expect(page.locator("[data-selected-count=node-bulk]")).to_have_text("1 selected")
    expect(page.locator("#node-table tbody tr")).to_have_count(3)

    page.uncheck("input[aria-label='Select gpu-sel-01']")  # nothing selected: the list catches up
    expect(page.locator("#node-table tbody tr")).to_have_count(4, timeout=10_000)
    expect(page.locator("[data-live-state]")).to_have_text("Live")

    first = raise_finding(node.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="GPU 1 warm", gpu_index=1)
    page.goto(f"{live_server.url}/alerts/")
    expect(page.locator("#alert-table tbody tr[data-severity]")).to_have_count(1)
    page.check(f"input[aria-label='Select alert {first.alert_id}']")
    raise_finding(node.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="GPU 0 warm", gpu_index=0)
    page.wait_for_timeout(3500)
    expect(page.locator(f"input[aria-label='Select alert {first.alert_id}']")).to_be_checked()
    expect(page.locator("[data-selected-count=alert-bulk]")).to_have_text("1 selected")
    expect(page.locator("#alert-table tbody tr[data-severity]")).to_have_count(1)
    page.uncheck(f"input[aria-label='Select alert {first.alert_id}']")
    expect(page.locator("#alert-table tbody tr[data-severity]")).to_have_count(2, timeout=10_000)

    # a reason typed in a row (and left there) is not wiped by a refresh
    reason = page.locator("#alert-table tbody tr[data-severity] input[name=reason]").first
    reason.fill("looking at the fans")
    page.locator("h1").click()  # the field loses focus; its text is still unsent
    raise_finding(node.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="GPU 2 warm", gpu_index=2)
    page.wait_for_timeout(3500)
    expect(reason).to_have_value("looking at the fans")
    expect(page.locator("#alert-table tbody tr[data-severity]")).to_have_count(2)
    reason.fill("")
    page.locator("h1").click()
    expect(page.locator("#alert-table tbody tr[data-severity]")).to_have_count(3, timeout=10_000)
    assert errors == []


def test_the_node_page_picks_up_a_new_state_and_alert_without_a_reload(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-page-01", state=NodeState.PRODUCTION)
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    expect(page.locator("#why-here")).to_contain_text("Production")
    expect(page.locator("#node-alerts")).not_to_contain_text("GPU 0 overheating")
    page.evaluate("window.__sameDocument = true")

    services.request_drain(node.pk, actor=services.Actor.system("scheduler"), reason="XID 94 on GPU 0")
    raise_finding(node.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="GPU 0 overheating", gpu_index=0)
    expect(page.locator("#why-here")).to_contain_text("Drain pending", timeout=10_000)
    expect(page.locator("#node-alerts")).to_contain_text("GPU 0 overheating", timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True
    assert errors == []


def test_the_picker_and_a_zoom_change_the_overview_chart(page: Page, live_server, operator):
    cluster = ClusterFactory(name="east")
    now = timezone.now()
    for age in (timedelta(hours=2), timedelta(days=40)):
        StateCountSnapshot.objects.create(taken_at=now - age, state=NodeState.PRODUCTION, cluster=cluster, count=3)
    recent, old = (now - timedelta(hours=2)).date().isoformat(), (now - timedelta(days=40)).date().isoformat()
    days_drawn = "Array.from(new Set(document.getElementById('counts-chart').data.flatMap(t => t.x.map(x => String(x).slice(0, 10)))))"
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    expect(page.locator("#counts-chart .main-svg").first).to_be_visible(timeout=15_000)
    assert sorted(page.evaluate(days_drawn)) == sorted([recent, old])

    page.click("[data-timerange] a[data-range='7d']")
    page.wait_for_url("**/?range=7d")
    expect(page.locator("#counts-chart .main-svg").first).to_be_visible(timeout=15_000)
    expect(page.locator("[data-timerange-label]")).to_have_text("last 7d")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#counts-chart").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "overview-time-range-7d.png"), full_page=True)
    assert page.evaluate(days_drawn) == [recent]

    # a zoom on the time axis (what a drag on the chart does) becomes the page's range
    page.goto(f"{live_server.url}/?range=90d")
    expect(page.locator("#counts-chart .main-svg").first).to_be_visible(timeout=15_000)
    page.wait_for_function("document.getElementById('counts-chart').dataset.zoomWired === '1'")
    start, end = (now - timedelta(days=45)).strftime("%Y-%m-%d"), (now - timedelta(days=35)).strftime("%Y-%m-%d")
    page.evaluate(
        f"Plotly.relayout('counts-chart', {{'xaxis.range[0]': '{start} 00:00', 'xaxis.range[1]': '{end} 00:00'}})"
    )
    page.wait_for_url(f"**/?from={start}T00%3A00&to={end}T00%3A00")
    expect(page.locator("#counts-chart .main-svg").first).to_be_visible(timeout=15_000)
    assert page.evaluate(days_drawn) == [old]
    expect(page.locator("[data-timerange] input[name=from]")).to_have_value(f"{start}T00:00")
    assert errors == []


def test_the_overview_tiles_follow_the_fleet_and_stop_while_paused(page: Page, live_server, operator):
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    expect(page.locator('.tile[data-state="triage"] .count')).to_have_text("0")
    NodeFactory(hostname="gpu-triage-01", state=NodeState.TRIAGE)
    expect(page.locator('.tile[data-state="triage"] .count')).to_have_text("1", timeout=10_000)

    page.click("[data-live-toggle]")
    NodeFactory(hostname="gpu-triage-02", state=NodeState.TRIAGE)
    page.wait_for_timeout(3000)
    expect(page.locator('.tile[data-state="triage"] .count')).to_have_text("1")
    page.click("[data-live-toggle]")
    expect(page.locator('.tile[data-state="triage"] .count')).to_have_text("2", timeout=10_000)
    assert errors == []


def test_a_list_stops_refreshing_when_the_session_ends_instead_of_showing_the_login_page(
    page: Page, live_server, operator
):
    NodeFactory(hostname="gpu-gone-01", state=NodeState.PRODUCTION)
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/?q=gpu-gone")
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    page.context.clear_cookies()  # signed out (elsewhere, or the session expired)
    expect(page.locator("[data-live-state]")).to_have_text("Stopped: signed out, reload the page", timeout=10_000)
    expect(page.locator("#node-table tbody tr")).to_have_count(1)
    assert page.locator("#node-table input[name=password]").count() == 0
    assert errors == []


def test_the_node_pages_picker_and_a_timeline_zoom_move_the_timeline_and_the_history(page: Page, live_server, operator):
    node = NodeFactory(hostname="gpu-range-01", state=NodeState.PRODUCTION)
    NodeEvent.objects.create(
        node=node,
        hostname=node.hostname,
        kind=EventKind.NOTE,
        reason="forty days ago",
        actor_kind="system",
        actor_name="system:t",
        created=timezone.now() - timedelta(days=40),
    )
    services.record_event(node.pk, EventKind.NOTE, actor=services.Actor.system("t"), reason="just now")
    axis_start = "document.getElementById('timeline-chart').layout.xaxis.range[0].slice(0, 10)"
    errors = watch_for_errors(page)
    log_in(page, live_server.url, "operator")
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    expect(page.locator("#timeline-chart .main-svg").first).to_be_visible(timeout=15_000)
    expect(page.locator("[data-timerange] a[aria-current]")).to_have_text("all")
    expect(page.locator("#history")).to_contain_text("forty days ago")

    page.click("[data-timerange] a[data-range='7d']")
    page.wait_for_url("**/?range=7d")
    expect(page.locator("#timeline-chart .main-svg").first).to_be_visible(timeout=15_000)
    expect(page.locator("#history")).to_contain_text("just now")
    expect(page.locator("#history")).not_to_contain_text("forty days ago")
    assert page.evaluate(axis_start) == (timezone.now() - timedelta(days=7)).date().isoformat()

    # the history's kind filter keeps the range
    page.select_option("#history-filter select[name=kind]", "note")
    page.click("#history-filter button[type=submit]")
    page.wait_for_url("**/?kind=note&range=7d#history-section")
    expect(page.locator("#history")).not_to_contain_text("forty days ago")

    # a zoom on the timeline becomes the page's range, for the history too
    page.goto(f"{live_server.url}/nodes/{node.pk}/")
    page.wait_for_function("document.getElementById('timeline-chart').dataset.zoomWired === '1'")
    start = (timezone.now() - timedelta(days=41)).strftime("%Y-%m-%d")
    end = (timezone.now() - timedelta(days=39)).strftime("%Y-%m-%d")
    page.evaluate(
        f"Plotly.relayout('timeline-chart', {{'xaxis.range[0]': '{start} 00:00', 'xaxis.range[1]': '{end} 00:00'}})"
    )
    page.wait_for_url(f"**/?from={start}T00%3A00&to={end}T00%3A00")
    expect(page.locator("#history")).to_contain_text("forty days ago")
    expect(page.locator("#history")).not_to_contain_text("just now")
    expect(page.locator("[data-timerange] input[name=from]")).to_have_value(f"{start}T00:00")
    assert errors == []
