"""The fleet's report page (staff): its figures on the week of conftest.py, the flow list behind
each Sankey band, who may see them, and a query count that does not grow with the fleet."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from health.models import Finding
from nodes import statecounts
from nodes.models import StateCountSnapshot
from reports import charts
from reports.choices import Attribution
from tests.factories import ClusterFactory, NodeFactory

from .conftest import NOW, D, H, change

pytestmark = pytest.mark.django_db


def page(client, user, **params):
    client.force_login(user)
    return client.get(reverse("report-overview"), params)


def figure(html, name):
    return json.loads(
        re.search(rf'<script id="{name}" type="application/json">(.*?)</script>', html, re.DOTALL).group(1)
    )


def test_the_sankey_counts_every_state_change_of_the_period_once(client, operator, week, frozen):
    html = page(client, operator, days=7).content.decode()
    sankey = figure(html, "flow-sankey-data")["data"][0]
    labels = sankey["node"]["label"]
    flows = {
        (labels[s], labels[t]): v
        for s, t, v in zip(sankey["link"]["source"], sankey["link"]["target"], sankey["link"]["value"], strict=True)
    }
    assert sum(flows.values()) == 24  # acme-a 11, acme-b 1, globex-c 4, acme-d 8
    assert flows[("Production", "Triage")] == 2
    assert flows[("Firmware update", "Production")] == 3
    assert flows[("Triage", "Firmware update")] == 2
    assert flows[("Remediation in progress", "Production")] == 1
    assert flows[("Enrolled", "Initializing")] == 1
    assert "24 state changes in the period" in html


def test_the_sankey_labels_have_no_halo_and_returns_have_their_own_colour(client, operator, week, frozen):
    from reports.charts import FORWARD_BAND, RETURN_BAND

    sankey = figure(page(client, operator, days=7).content.decode(), "flow-sankey-data")["data"][0]
    # plotly's automatic halo drew grey boxes over the labels in the dark theme.
    assert sankey["textfont"]["shadow"] == "none"
    labels = sankey["node"]["label"]
    colour = {
        (labels[s], labels[t]): c
        for s, t, c in zip(sankey["link"]["source"], sankey["link"]["target"], sankey["link"]["color"], strict=True)
    }
    assert colour[("Production", "Triage")] == FORWARD_BAND
    assert colour[("Remediation in progress", "Production")] == RETURN_BAND
    assert colour[("Triage", "Firmware update")] == RETURN_BAND


def test_every_band_and_table_row_links_to_the_nodes_that_made_that_change(client, operator, week, frozen):
    html = page(client, operator, days=7).content.decode()
    sankey = figure(html, "flow-sankey-data")["data"][0]
    links = sankey["link"]["customdata"]
    assert len(links) == len(set(links)) == 19  # distinct (source, target) pairs
    url = next(u for u in links if "source=production&target=triage" in u)
    assert f'href="{url.replace("&", "&amp;")}"' in html  # the same link in the table (no JS needed)
    query = parse_qs(urlsplit(url).query)
    assert query["since"] == [(NOW - 7 * D).isoformat()] and query["until"] == [NOW.isoformat()]
    listed = client.get(url).content.decode()
    assert re.findall(r'<tr data-node="(\d+)">', listed) == [str(week.a.pk)]
    assert '<td class="num">2</td>' in listed  # acme-a went production -> triage twice


def test_the_flow_list_is_paged_and_scoped_to_cluster_and_period(client, operator, week, frozen):
    client.force_login(operator)
    base = {"since": (NOW - 7 * D).isoformat(), "until": NOW.isoformat()}
    html = client.get(reverse("report-flows"), {**base, "source": "firmware_update", "target": "production"})
    assert set(re.findall(r'<tr data-node="(\d+)">', html.content.decode())) == {str(week.a.pk), str(week.c.pk)}
    west = client.get(
        reverse("report-flows"), {**base, "source": "firmware_update", "target": "production", "cluster": "c-west"}
    )
    assert re.findall(r'<tr data-node="(\d+)">', west.content.decode()) == [str(week.c.pk)]
    assert client.get(reverse("report-flows"), {**base, "source": "nowhere", "target": "production"}).status_code == 400


def test_time_to_recover_runs_from_the_finding_to_back_in_production(client, operator, week, frozen):
    html = page(client, operator, days=7).content.decode()
    # acme-a: 4 h 10 min; acme-b: 34 h. Median of the two: 19.1 h.
    assert re.search(
        r'<tr data-cluster="\*"><td><strong>All</strong></td><td class="num">2</td>'
        r'<td class="num">19.1 h</td>',
        html,
    )
    assert '<tr data-cluster="c-east"><td>c-east</td><td class="num">2</td>' in html


def test_failures_are_counted_by_component_and_cause(client, operator, week, frozen):
    Finding.objects.create(
        node=week.c,
        hostname="globex-c",
        rule="ib_fabric",
        severity="degraded",
        summary="x",
        evidence={"kind": "link_down"},
        created=NOW - D,
    )
    Finding.objects.create(
        node=week.c,
        hostname="globex-c",
        rule="gpu_temperature",
        severity="warning",
        summary="hot",
        shadow=True,
        created=NOW - D,
    )  # shadow: not counted
    html = page(client, operator, days=7).content.decode()
    # XIDs are named from the catalog.
    assert '<tr data-cause="XID 79: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"><td>GPU</td>' in html
    assert '<tr data-cause="Fabric: Link down"><td>InfiniBand fabric</td>' in html
    # acme-b's finding (gpu_temperature) was at -8 d: outside the week.
    assert 'data-cause="gpu_temperature"' not in html
    assert '<tr data-rung="reboot"><td>Reboot</td><td class="num">1</td><td class="num">1</td>' in html


def test_downtime_is_split_between_provider_and_customer(client, operator, week, frozen):
    html = page(client, operator, days=7).content.decode()
    assert re.search(
        r'<tr data-attribution="provider"><td>[^<]+</td><td class="num">3</td>'
        r'<td class="num">38.0</td><td class="num">81.7%</td>',
        html,
    )
    assert re.search(
        r'<tr data-attribution="customer"><td>[^<]+</td><td class="num">2</td>'
        r'<td class="num">8.5</td><td class="num">18.3%</td>',
        html,
    )
    tenant_only = page(client, operator, days=7, tenant="globex").content.decode()
    assert re.search(r'<tr data-attribution="provider"><td>[^<]+</td><td class="num">0</td>', tenant_only)


def test_availability_per_cluster_and_tenant_is_the_share_of_node_hours_in_production(week):
    day = NOW - 2 * D
    for hour in range(2):
        at = day + hour * H
        StateCountSnapshot.objects.create(taken_at=at, state="production", cluster=week.east, tenant=week.acme, count=3)
        StateCountSnapshot.objects.create(taken_at=at, state="triage", cluster=week.east, tenant=week.acme, count=1)
        StateCountSnapshot.objects.create(taken_at=at, state="drain_pending", cluster=week.west, tenant=None, count=2)
        StateCountSnapshot.objects.create(taken_at=at, state="decommissioned", cluster=week.west, tenant=None, count=9)
    week_ = (NOW - 7 * D, NOW)
    by_cluster = charts.availability_over_time(statecounts.daily_counts(*week_, by="cluster__name"))
    assert {t["name"]: t["y"] for t in by_cluster["data"]} == {"c-east": [75.0], "c-west": [100.0]}
    by_tenant = charts.availability_over_time(statecounts.daily_counts(*week_, by="tenant__name"))
    assert {t["name"]: t["y"] for t in by_tenant["data"]} == {"Acme AI": [75.0], "(none)": [100.0]}
    # The same from the states summed in the database (what the pages read), and from the daily roll-up
    # once the day is over.
    buckets = charts.AVAILABILITY_BUCKETS
    assert (
        charts.availability_over_time(statecounts.daily_counts(*week_, by="cluster__name", buckets=buckets))
        == by_cluster
    )
    statecounts.roll_up(today=NOW.date())
    for summed in (None, buckets):
        by_cluster = charts.availability_over_time(statecounts.daily_counts(*week_, by="cluster__name", buckets=summed))
        assert {t["name"]: t["y"] for t in by_cluster["data"]} == {"c-east": [75.0], "c-west": [100.0]}


def test_customers_and_strangers_get_no_fleet_report(client, week, acme_user):
    assert page(client, acme_user).status_code == 404
    client.force_login(acme_user)
    assert client.get(reverse("report-flows"), {"source": "production", "target": "triage"}).status_code == 404
    client.logout()
    assert client.get(reverse("report-overview")).status_code == 302


def test_a_malformed_period_is_a_400_naming_it(client, operator, week):
    response = page(client, operator, since="2025-06-10T00:00:00Z", until="2025-06-01T00:00:00Z")
    assert response.status_code == 400 and "since must be before until" in response.content.decode()
    assert page(client, operator, cluster="no-such").status_code == 400


def _fleet_of(n):
    cluster = ClusterFactory()
    for _ in range(n):
        node = NodeFactory(cluster=cluster, state="production")
        change(node, NOW - 3 * D, "production", "triage")
        change(node, NOW - 2 * D, "triage", "remediating")
        change(node, NOW - D, "remediating", "production")
        Finding.objects.create(
            node=node,
            hostname=node.hostname,
            rule="xid",
            xid=79,
            severity="catastrophic",
            summary="x",
            created=NOW - 3 * D,
        )


def _queries(client, url, params, *, cold=True):
    """The queries of one request; ``cold``: with the settled days' figures not cached yet, else
    cached by the request before."""
    if cold:
        cache.clear()
    else:
        client.get(url, params)
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, params).status_code == 200
    return len(ctx.captured_queries)


def test_the_pages_read_a_fixed_number_of_queries_whatever_the_fleet(client, operator, frozen):
    client.force_login(operator)
    pages = [
        (reverse("report-overview"), {"days": 7}),
        (reverse("report-flows"), {"days": 7, "source": "production", "target": "triage"}),
        (reverse("report-availability"), {"days": 7, "tenant": "small"}),
    ]
    from tests.factories import TenantFactory

    tenant = TenantFactory(slug="small")
    _fleet_of(3)
    from nodes.models import Node

    Node.objects.update(tenant=tenant)
    small = [_queries(client, url, params) for url, params in pages]
    small_warm = [_queries(client, url, params, cold=False) for url, params in pages]
    _fleet_of(27)
    Node.objects.update(tenant=tenant)
    assert [_queries(client, url, params) for url, params in pages] == small
    assert [_queries(client, url, params, cold=False) for url, params in pages] == small_warm


def test_a_preset_wins_over_an_exact_period_and_ends_where_it_ended():
    from reports.filters import period_of

    exact = period_of(NOW - 3 * D, NOW - D, None)
    assert (exact.since, exact.until, exact.days) == (NOW - 3 * D, NOW - D, None)
    preset = period_of(NOW - 3 * D, NOW - D, 7)
    assert (preset.since, preset.until, preset.days) == (NOW - 8 * D, NOW - D, 7)
    assert period_of(None, None, None, now=NOW).since == NOW - 30 * D


def test_the_report_reads_the_same_few_queries_for_a_week_a_month_and_a_quarter(client, operator, week, frozen):
    statecounts.roll_up(today=NOW.date())
    client.force_login(operator)
    counts = [_queries(client, reverse("report-overview"), {"days": days}) for days in (7, 30, 90)]
    warm = [_queries(client, reverse("report-overview"), {"days": days}, cold=False) for days in (7, 30, 90)]
    # Session, user, form, the clusters' and tenants' names (the cache's key), and the figures:
    # availability per cluster and per tenant (the latest roll-up, then per chart the latest
    # roll-up again and the hours around the settled days),
    # flows, recoveries (both edges in one), causes (the edges, XID names), rungs, Day 1, downtime;
    # cold, the settled days' causes, recoveries and downtime too (availability's: none rolled up
    # here). PostgreSQL adds the settings of each downtime statement's transaction. The same
    # whatever the period: finished days come from the roll-ups and the cache.
    pg = connection.vendor == "postgresql"
    assert (counts, warm) == ([28 + 2 * pg] * 3, [23 + pg] * 3)


def test_the_failures_chart_counts_in_whole_numbers_and_fits_its_labels():
    """plotly picked 0.2 steps for a peak of 1, and a fixed 260 px margin clipped longer causes."""
    long_cause = "XID 79: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS and then some more words"
    few = charts.failure_causes([{"component": "GPU", "cause": long_cause, "count": 1}])["layout"]
    assert few["xaxis"]["dtick"] == 1 and few["xaxis"]["tickformat"] == ",d"
    assert few["yaxis"]["automargin"] is True
    many = charts.failure_causes([{"component": "GPU", "cause": "x", "count": 400}])["layout"]
    assert "dtick" not in many["xaxis"] and many["xaxis"]["tickformat"] == ",d"


def test_a_days_availability_sits_in_its_day_and_a_period_without_downtime_draws_no_chart(client, operator):
    """Seen on a fresh demo: one day's point spread over a millisecond of ticks ("23:59:59.9995"), and
    the downtime chart drawn with nothing in it (bare axes from -1 to 6)."""
    day = statecounts.DayCount(group="lab", day=NOW.date(), state="production", node_hours=24, samples=24)
    layout = charts.availability_over_time([day], (NOW - 24 * H, NOW))["layout"]
    start, end = (datetime.fromisoformat(t).replace(tzinfo=UTC) for t in layout["xaxis"]["range"])
    midnight = datetime.combine(NOW.date(), datetime.min.time(), tzinfo=UTC)
    assert start < midnight < end and end - start >= timedelta(days=1)
    assert (
        charts.downtime_by_cluster(
            {"clusters": [{"cluster": "lab", **{a: {"hours": 0.0} for a in Attribution.values}}]}
        )
        is None
    )
    busy = {"clusters": [{"cluster": "lab", **{a: {"hours": 1.5} for a in Attribution.values}}]}
    assert charts.downtime_by_cluster(busy)["data"][0]["y"] == [1.5]
    html = page(client, operator, days=30).content.decode()
    assert 'id="downtime-chart"' not in html and 'id="availability-clusters"' in html
