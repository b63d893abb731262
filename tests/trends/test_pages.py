"""Trend pages (staff only): the fleet page, a node's trend page and the node page's partial,
each flag drawn from its evidence; customers are told they do not exist (404)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nodes.models import Node
from trends import charts, services
from trends.choices import FlagKind
from trends.models import TrendFlag

from .conftest import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture
def evaluated(fleet):
    services.evaluate(now=NOW)
    return fleet


def figures(response) -> dict[str, dict]:
    """Every json_script figure on the page, by its element id."""
    html = response.content.decode()
    out = {}
    for part in html.split('<script id="')[1:]:
        element_id, rest = part.split('"', 1)
        body = rest.split(">", 1)[1].split("</script>", 1)[0]
        if element_id.endswith("-data"):
            out[element_id] = json.loads(body)
    return out


def test_the_fleet_page_lists_lemons_underperformers_per_profile_and_degrading_nodes(client, viewer, evaluated):
    client.force_login(viewer)
    response = client.get("/trends/")
    assert response.status_code == 200
    html = response.content.decode()
    lemons = html.split('id="lemon-table"')[1].split("</table>")[0]
    assert f'data-node="{evaluated.lemon.pk}" data-flagged="true"' in lemons
    assert lemons.index(evaluated.lemon.hostname) < lemons.index('data-flagged="false"')
    under = html.split('id="underperformer-table"')[1].split("</table>")[0]
    assert 'data-profile="trend-h100"' in under
    assert {evaluated.underperformer.hostname, evaluated.degrader.hostname} <= {
        h for h in (n.hostname for n in evaluated.nodes) if h in under
    }
    assert evaluated.lemon.hostname not in under
    degrading = html.split('id="degrading-table"')[1].split("</table>")[0]
    assert evaluated.degrader.hostname in degrading and evaluated.underperformer.hostname not in degrading


def test_no_table_on_the_fleet_page_has_two_columns_of_the_same_name(client, viewer, evaluated):
    """The underperformer table had two "Node" headers: the host and its figure's value."""
    import re

    client.force_login(viewer)
    html = client.get("/trends/").content.decode()
    heads = re.findall(r"<thead>(.*?)</thead>", html, re.DOTALL)
    assert heads
    for head in heads:
        names = [re.sub(r"<[^>]+>", "", th).strip() for th in re.findall(r"<th\b.*?</th>", head, re.DOTALL)]
        assert len(names) == len(set(names)), names


def test_the_fleet_page_renders_before_any_evaluation(client, viewer, db):
    client.force_login(viewer)
    response = client.get("/trends/")
    assert response.status_code == 200 and b"No evaluation has run yet" in response.content


def test_the_empty_fleet_page_says_when_the_evaluation_runs_next(client, viewer, db, settings):
    """The page was empty with no word of when it would fill: the next run comes from the beat schedule."""
    import re
    from datetime import datetime, timedelta

    from celery.schedules import crontab
    from django.utils import timezone

    settings.CELERY_BEAT_SCHEDULE = {
        "evaluate-trends": {"task": "trends.tasks.evaluate_trends", "schedule": crontab(hour=3, minute=30)},
    }
    client.force_login(viewer)
    html = client.get("/trends/").content.decode()
    at = datetime.fromisoformat(re.search(r'<time id="trends-next-run" datetime="([^"]+)"', html).group(1))
    assert (at.hour, at.minute) == (3, 30) and timedelta(0) < at - timezone.now() <= timedelta(days=1)
    assert "Filled by the first evaluation" in html
    settings.CELERY_BEAT_SCHEDULE = {}
    html = client.get("/trends/").content.decode()
    assert "is not in the beat schedule" in html


def test_next_run_reads_intervals_and_the_soonest_entry(settings):
    from datetime import UTC, datetime, timedelta

    from celery.schedules import crontab

    from nodewarden.beat import next_run

    now = datetime(2026, 11, 24, 19, 0, tzinfo=UTC)
    settings.CELERY_BEAT_SCHEDULE = {
        "a": {"task": "x.t", "schedule": crontab(hour=3, minute=30)},
        "b": {"task": "x.t", "schedule": 600.0},
        "c": {"task": "y.t", "schedule": timedelta(hours=1)},
    }
    assert next_run("x.t", now).at == now + timedelta(minutes=10)
    assert next_run("y.t", now).every == timedelta(hours=1)
    assert next_run("z.t", now) is None
    settings.CELERY_BEAT_SCHEDULE = {"a": {"task": "x.t", "schedule": crontab(hour=3, minute=30)}}
    assert next_run("x.t", now).at == datetime(2026, 11, 25, 3, 30, tzinfo=UTC)


def test_a_nodes_trend_page_charts_the_trend_and_the_peers(client, viewer, evaluated):
    client.force_login(viewer)
    response = client.get(f"/trends/nodes/{evaluated.degrader.pk}/")
    assert response.status_code == 200
    charts_on_page = figures(response)
    trend = TrendFlag.objects.get(node=evaluated.degrader, kind=FlagKind.DEGRADING)
    peers = TrendFlag.objects.get(node=evaluated.degrader, kind=FlagKind.UNDERPERFORMER)
    trend_fig = charts_on_page[f"trend-chart-{trend.pk}-data"]
    assert len(trend_fig["data"][0]["y"]) == 7 and trend_fig["data"][1]["name"] == "trend"
    peer_fig = charts_on_page[f"trend-chart-{peers.pk}-data"]
    assert sum(peer_fig["data"][0]["y"]) == 50
    assert peer_fig["data"][2]["x"][0] == pytest.approx(peers.evidence["value"])
    assert b"plotly.min.js" in response.content


def test_the_node_page_partial_draws_after_the_htmx_swap(client, viewer, evaluated):
    client.force_login(viewer)
    response = client.get(f"/nodes/{evaluated.lemon.pk}/trends/")
    assert response.status_code == 200
    flag = TrendFlag.objects.get(node=evaluated.lemon)
    fig = figures(response)[f"trend-chart-{flag.pk}-data"]
    assert fig["data"][0]["orientation"] == "h" and sum(fig["data"][0]["x"]) == pytest.approx(flag.score, abs=0.1)
    # static/js/portal.js draws every .chart[data-figure] htmx swaps in: no inline script (the CSP forbids it).
    assert f'class="chart" data-figure="trend-chart-{flag.pk}-data"'.encode() in response.content
    assert b"<script>" not in response.content
    assert b"<html" not in response.content


def test_a_healthy_nodes_partial_says_so(client, viewer, evaluated):
    client.force_login(viewer)
    response = client.get(f"/nodes/{evaluated.healthy[0].pk}/trends/")
    assert response.status_code == 200 and b"No open trend flag" in response.content


def test_cleared_flags_are_listed_on_the_node_page(client, viewer, evaluated):
    TrendFlag.objects.filter(node=evaluated.lemon).update(cleared_at=NOW)
    client.force_login(viewer)
    response = client.get(f"/trends/nodes/{evaluated.lemon.pk}/")
    assert b'id="trend-cleared"' in response.content


@pytest.mark.parametrize("path", ["/trends/", "/trends/nodes/{pk}/", "/nodes/{pk}/trends/"])
def test_customers_are_told_the_pages_do_not_exist(client, customer, tenant, evaluated, path):
    # Even for their own node: fleet-wide comparisons are staff business.
    Node.objects.filter(pk=evaluated.lemon.pk).update(tenant=tenant)
    client.force_login(customer)
    assert client.get(path.format(pk=evaluated.lemon.pk)).status_code == 404


def test_anonymous_visitors_are_sent_to_log_in(client, evaluated):
    response = client.get("/trends/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_an_unknown_node_is_404(client, viewer, db):
    client.force_login(viewer)
    assert client.get("/trends/nodes/999999/").status_code == 404


def test_the_fleet_page_query_count_does_not_grow_with_flags(client, viewer, evaluated):
    client.force_login(viewer)
    client.get("/trends/")  # warm the session
    with CaptureQueriesContext(connection) as ctx:
        client.get("/trends/")
    assert len(ctx) <= 10


def test_chart_functions_read_the_evidence_alone():
    fig = charts.trend_figure(
        {
            "points": [["2026-01-01", 1.0], ["2026-01-08", 2.0]],
            "unit": "GB/s",
            "line": [["2026-01-01", 1.0], ["2026-01-08", 2.0]],
        }
    )
    assert fig["data"][0]["y"] == [1.0, 2.0] and fig["layout"]["yaxis"]["title"]["text"] == "GB/s"
    empty = charts.peers_figure({})
    assert empty["data"][0]["x"] == []


@pytest.mark.parametrize("params", [{}, {"range": "24h"}])
def test_a_trend_chart_shows_its_fixed_analysis_window_and_says_so(client, viewer, evaluated, params):
    """A degrading flag's time chart is the evidence it was raised on: its axis spans the analysis
    window whatever the portal's range, and the page says so next to the chart (no picker)."""
    client.force_login(viewer)
    trend = TrendFlag.objects.get(node=evaluated.degrader, kind=FlagKind.DEGRADING)
    for url in (f"/trends/nodes/{evaluated.degrader.pk}/", f"/nodes/{evaluated.degrader.pk}/trends/"):
        response = client.get(url, params)
        html = response.content.decode()
        assert response.status_code == 200 and "data-timerange" not in html
        assert f"Analysis window: {trend.window_days} days</strong>, " in html and "does not apply" in html
        axis = figures(response)[f"trend-chart-{trend.pk}-data"]["layout"]["xaxis"]
        start = (trend.updated - timedelta(days=trend.window_days)).strftime("%Y-%m-%d %H:%M:%S")
        assert axis["range"] == [start, trend.updated.strftime("%Y-%m-%d %H:%M:%S")]
