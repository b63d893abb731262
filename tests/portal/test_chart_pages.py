"""Every chart page honours the time range in its URL, and refuses a bad one with a 400."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent, StateCountSnapshot
from nodewarden.timerange import MAX_SPAN
from tests.factories import ClusterFactory, NodeFactory

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


def _history_reasons(response) -> list[str]:
    return [row.item.reason for row in response.context["history"].rows]


@pytest.fixture
def aged_node(db):
    """A node with a note 40 days ago, a note 3 days ago and one now (its row made today, as on import)."""
    node = NodeFactory(state=NodeState.PRODUCTION)
    for age, reason in ((timedelta(days=40), "forty days"), (timedelta(days=3), "three days")):
        NodeEvent.objects.create(
            node=node,
            hostname=node.hostname,
            kind=EventKind.NOTE,
            reason=reason,
            actor_kind="system",
            actor_name="system:t",
            created=timezone.now() - age,
        )
    services.record_event(node.pk, EventKind.NOTE, actor=services.Actor.system("t"), reason="now")
    return node


def test_the_node_pages_timeline_and_history_follow_one_range(client, operator, aged_node):
    """The node page's picker is the shared one; its state timeline and its history both show its range."""
    client.force_login(operator)
    url = reverse("node-detail", args=[aged_node.pk])

    week = client.get(url, {"range": "7d"})
    html = week.content.decode()
    assert week.status_code == 200 and "data-timerange" in html and 'aria-current="true">7d<' in html
    assert _history_reasons(week) == ["now", "three days"]
    axis = _figure(week, "timeline-chart-data")["layout"]["xaxis"]["range"]
    assert axis[0][:10] == (timezone.now() - timedelta(days=7)).date().isoformat()
    assert 'id="timeline-chart" class="chart" data-figure="timeline-chart-data" data-zoom-range' in html
    # the history's kind filter and its "older" button keep the range
    assert '<input type="hidden" name="range" value="7d">' in html
    assert week.context["history_query"] == "range=7d"

    # the default is the node's whole life, from its first record (before the row was made)
    life = client.get(url)
    assert _history_reasons(life) == ["now", "three days", "forty days"]
    assert 'aria-current="true">all<' in life.content.decode()
    axis = _figure(life, "timeline-chart-data")["layout"]["xaxis"]["range"]
    assert axis[0][:10] == (timezone.now() - timedelta(days=40)).date().isoformat()

    around_old = timezone.now() - timedelta(days=40)
    window = {
        "from": (around_old - timedelta(days=1)).strftime("%Y-%m-%d"),
        "to": (around_old + timedelta(days=1)).strftime("%Y-%m-%d"),
    }
    custom = client.get(url, {**window, "kind": "note"})
    assert _history_reasons(custom) == ["forty days"]
    axis = _figure(custom, "timeline-chart-data")["layout"]["xaxis"]["range"]
    assert [x[:10] for x in axis] == [window["from"], window["to"]]
    more = client.get(reverse("node-history", args=[aged_node.pk]), {**window, "kind": "note"})
    assert more.status_code == 200 and [row.item.reason for row in more.context["history"].rows] == ["forty days"]


def test_old_node_page_links_keep_working_and_all_is_bounded(client, operator, aged_node):
    """?range=all and the history's old since/until map onto the shared range; "all" is the node's
    life at most MAX_SPAN back, and only pages whose data has a beginning offer it."""
    client.force_login(operator)
    url = reverse("node-detail", args=[aged_node.pk])
    every = client.get(url, {"range": "all"})
    assert every.status_code == 200 and every.context["timerange"].preset == "all"
    assert _history_reasons(every) == ["now", "three days", "forty days"]

    until = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    old_until = client.get(url, {"until": until})
    assert old_until.status_code == 200 and _history_reasons(old_until) == ["three days", "forty days"]
    since = (timezone.now() - timedelta(days=5)).strftime("%Y-%m-%dT%H:%M")
    assert _history_reasons(client.get(url, {"since": since})) == ["now", "three days"]

    veteran = NodeFactory(state=NodeState.PRODUCTION)
    for age, reason in ((timedelta(days=900), "long ago"), (timedelta(days=2), "lately")):
        NodeEvent.objects.create(
            node=veteran,
            hostname=veteran.hostname,
            kind=EventKind.NOTE,
            reason=reason,
            actor_kind="system",
            actor_name="system:t",
            created=timezone.now() - age,
        )
    capped = client.get(reverse("node-detail", args=[veteran.pk]), {"range": "all"})
    assert capped.status_code == 200 and capped.context["timerange"].span <= MAX_SPAN
    assert _history_reasons(capped) == ["lately"]

    fleet = client.get(reverse("fleet-overview"), {"range": "all"})
    assert fleet.status_code == 400 and "Unknown range 'all'" in fleet.content.decode()


@pytest.mark.parametrize(("page", "params"), [("report-overview", {}), ("report-availability", {"tenant": "acme"})])
def test_the_report_pages_show_the_shared_picker_instead_of_their_own_menu(client, operator, tenant, page, params):
    client.force_login(operator)
    old_link = client.get(reverse(page), {**params, "days": "7"})  # a link from before the picker
    html = old_link.content.decode()
    assert old_link.status_code == 200 and 'name="days"' not in html
    assert "data-timerange" in html and 'aria-current="true">7d<' in html
    assert old_link.context["period"].until - old_link.context["period"].since == timedelta(days=7)
    # the picker's presets keep the scope, the scope form keeps the range
    keep = "".join(f"{k}={v}&amp;" for k, v in params.items())
    assert f'href="?{keep}range=24h"' in html
    assert '<input type="hidden" name="range" value="7d">' in html

    day = client.get(reverse(page), {**params, "range": "24h"})
    assert 'aria-current="true">24h<' in day.content.decode()
    assert day.context["period"].until - day.context["period"].since == timedelta(hours=24)

    exact = client.get(reverse(page), {**params, "since": "2026-01-01T00:00:00Z", "until": "2026-01-08T00:00:00Z"})
    assert 'aria-current="true"' not in exact.content.decode()
    assert exact.context["timerange"].label == "2026-01-01 00:00 to 2026-01-08 00:00 UTC"
