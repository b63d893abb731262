"""Every chart page honours the time range in its URL, and refuses a bad one with a 400."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from nodes.choices import NodeState
from nodes.models import StateCountSnapshot
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db

CHART_PAGES = [("fleet-overview", "counts-chart-data"), ("remediation-overview", "availability-chart-data")]


def _figure(response, element_id: str) -> dict:
    html = response.content.decode()
    start = html.index(f'id="{element_id}"')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


def _days_plotted(figure: dict) -> set[str]:
    return {x[:10] for trace in figure["data"] for x in trace["x"]}


@pytest.fixture
def snapshots(db):
    """Snapshots of one cluster 2 hours and 40 days ago."""
    cluster = ClusterFactory(name="east")
    now = timezone.now()
    for age in (timedelta(hours=2), timedelta(days=40)):
        StateCountSnapshot.objects.create(taken_at=now - age, state=NodeState.PRODUCTION, cluster=cluster, count=3)
    return [(now - timedelta(hours=2)).date().isoformat(), (now - timedelta(days=40)).date().isoformat()]


@pytest.mark.parametrize(("page", "chart"), CHART_PAGES)
def test_a_chart_page_shows_only_the_range_in_its_url(client, operator, snapshots, page, chart):
    recent, old = snapshots
    client.force_login(operator)

    week = client.get(reverse(page), {"range": "7d"})
    assert week.status_code == 200
    assert _days_plotted(_figure(week, chart)) == {recent}
    assert 'data-range="7d"' in week.content.decode() and 'aria-current="true">7d<' in week.content.decode()

    quarter = _figure(client.get(reverse(page), {"range": "90d"}), chart)
    assert _days_plotted(quarter) == {recent, old}

    around_old = timezone.now() - timedelta(days=40)
    window = {
        "from": (around_old - timedelta(days=2)).strftime("%Y-%m-%d"),
        "to": (around_old + timedelta(days=2)).strftime("%Y-%m-%d"),
    }
    custom = client.get(reverse(page), window)
    figure = _figure(custom, chart)
    assert _days_plotted(figure) == {old}
    # the axis is pinned to the window, so the picker and the chart say the same
    assert [x[:10] for x in figure["layout"]["xaxis"]["range"]] == [window["from"], window["to"]]
    assert f'value="{window["from"]}T00:00"' in custom.content.decode()


@pytest.mark.parametrize(("page", "chart"), CHART_PAGES)
@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"range": "1y"}, "Unknown range"),
        ({"from": "2026-11-08", "to": "2026-11-01"}, "must be before"),
        ({"from": "last tuesday"}, "must be a date"),
        ({"from": "2020-01-01", "to": "2026-01-01"}, "at most 366 days"),
    ],
)
def test_a_chart_page_answers_a_bad_range_with_a_400_that_says_why(client, operator, page, chart, params, says):
    client.force_login(operator)
    response = client.get(reverse(page), params)
    assert response.status_code == 400
    assert says in response.content.decode()


def test_the_picker_keeps_the_pages_other_parameters(client, operator):
    client.force_login(operator)
    html = client.get(reverse("remediation-overview"), {"status": "running", "range": "24h"}).content.decode()
    assert 'href="?status=running&amp;range=7d"' in html
    assert '<input type="hidden" name="status" value="running">' in html


@pytest.mark.parametrize(("page", "params"), [("report-overview", {}), ("report-availability", {"tenant": "acme"})])
def test_the_report_pages_read_the_shared_range_before_their_own_period(client, operator, tenant, page, params):
    client.force_login(operator)
    # a zoom leaves the report's own preset in the URL: the zoomed window wins
    response = client.get(reverse(page), {**params, "days": "90", "from": "2026-01-01", "to": "2026-01-08T12:00"})
    assert response.status_code == 200
    period = response.context["period"]
    assert (period.since.isoformat(), period.until.isoformat()) == (
        "2026-01-01T00:00:00+00:00",
        "2026-01-08T12:00:00+00:00",
    )
    week = client.get(reverse(page), {**params, "range": "7d"}).context["period"]
    assert week.until - week.since == timedelta(days=7)

    refused = client.get(reverse(page), {**params, "from": "2026-01-08", "to": "2026-01-01"})
    assert refused.status_code == 400 and "must be before" in refused.content.decode()


def test_a_range_of_hours_is_drawn_snapshot_by_snapshot_and_scoped_to_the_tenant(
    client, customer, tenant, other_tenant
):
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours_ago, owner, count in ((3, tenant, 4), (2, tenant, 5), (2, other_tenant, 50), (30, tenant, 7)):
        StateCountSnapshot.objects.create(
            taken_at=now - timedelta(hours=hours_ago), state=NodeState.PRODUCTION, tenant=owner, count=count
        )
    client.force_login(customer)

    day = _figure(client.get(reverse("fleet-overview"), {"range": "24h"}), "counts-chart-data")
    (trace,) = day["data"]
    assert trace["y"] == [4, 5]  # one point per snapshot, the other tenant's nodes not counted
    assert [x[11:16] for x in trace["x"]] == [
        (now - timedelta(hours=3)).strftime("%H:%M"),
        (now - timedelta(hours=2)).strftime("%H:%M"),
    ]
    two_days = _figure(client.get(reverse("fleet-overview"), {"range": "90d"}), "counts-chart-data")
    assert len(two_days["data"][0]["x"]) <= 3  # longer ranges stay day by day
