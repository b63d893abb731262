"""The fleet report's figures of settled days come from the cache (``reports.settled``): the same
numbers as reading every row of the period, cold and warm, for the fleet, a cluster and a tenant,
and a write into a settled day, a node moved or a cluster renamed shows on the next request."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.contrib import admin
from django.core.cache import cache
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from redis.exceptions import RedisError

from health.models import Finding
from nodes import followups, statecounts
from nodes.admin import NodeAdmin
from nodes.choices import NodeState as S
from nodes.models import Node, StateCountSnapshot
from remediation.choices import Status
from remediation.models import Remediation
from reports import charts, outages, settled, summary
from reports.filters import period_of
from tests.factories import ClusterFactory, NodeFactory, TenantFactory

from .conftest import NOW, D, H, change, remediation

pytestmark = pytest.mark.django_db

STATES = ("production", "triage", "repair", "decommissioned")  # serving, not, and in no bucket
RULES = [("xid", 79), ("xid", 48), ("xid", 94), ("gpu_temperature", None), ("ecc_dbe", None)]


@pytest.fixture
def history(frozen):
    """120 days of a small fleet: recoveries, findings and hourly state counts, seeded at random,
    rolled up as the hourly task does."""
    rng = random.Random(17)
    east, west = ClusterFactory(name="c-east"), ClusterFactory(name="c-west")
    acme, globex = TenantFactory(name="Acme", slug="acme"), TenantFactory(name="Globex", slug="globex")
    nodes = [
        NodeFactory(hostname=f"n{i}", cluster=(east, west)[i % 2], tenant=(acme, globex, None)[i % 3])
        for i in range(12)
    ]
    for _ in range(160):
        n, found = rng.choice(nodes), NOW - timedelta(seconds=rng.uniform(0, 120 * 86400))
        finished = found + timedelta(seconds=rng.uniform(600, 3 * 86400))
        rule, xid = rng.choice(RULES)
        status = Status.SUCCEEDED if rng.random() < 0.8 else Status.FAILED
        remediation(n, found, finished if finished < NOW else None, status=status, rule=rule, xid=xid)
    for _ in range(80):  # findings that needed no remediation (fabric, shadow ones too)
        n, at = rng.choice(nodes), NOW - timedelta(seconds=rng.uniform(0, 120 * 86400))
        Finding.objects.create(
            node=n,
            hostname=n.hostname,
            rule="ib_fabric",
            severity="warning",
            summary="x",
            subject="ib",
            evidence={"kind": rng.choice(["missing_link", "speed_mismatch"])},
            shadow=rng.random() < 0.2,
            observed_at=at,
            created=at,
        )
    for n in nodes[:8]:  # outages: begun before the period, across midnight, still open at NOW
        at = NOW - 125 * D
        while True:
            at += timedelta(seconds=rng.uniform(2 * 86400, 14 * 86400))
            if at >= NOW:
                break
            actor = rng.choice(["system:remediation", "operator", "system:fabric"])
            change(n, at, S.PRODUCTION, S.TRIAGE, actor=actor)
            back = at + timedelta(seconds=rng.uniform(1800, 4 * 86400))
            if rng.random() < 0.4:
                change(n, at + (back - at) / 2, S.TRIAGE, S.REPAIR)
            if back >= NOW:
                break
            change(n, back, S.REPAIR if rng.random() < 0.4 else S.TRIAGE, S.PRODUCTION, actor="system:validation")
            at = back
    snapshots = []
    for hour in range(92 * 24):  # the longest period read, and today
        taken = NOW - hour * H
        for cluster, tenant in ((east, acme), (east, globex), (west, globex), (west, None)):
            for state in STATES:
                snapshots.append(
                    StateCountSnapshot(
                        taken_at=taken, state=state, cluster=cluster, tenant=tenant, count=rng.randint(1, 9)
                    )
                )
    StateCountSnapshot.objects.bulk_create(snapshots, batch_size=2000)
    statecounts.roll_up(today=NOW.date())
    return {"east": east, "west": west, "acme": acme, "nodes": nodes}


def read_every_row(scope: dict, days: int) -> dict:
    """The figures as the page read them before the cache: every row of the period."""
    period = period_of(None, NOW, days)
    nodes = Node.objects.filter(**scope)
    remediations = Remediation.objects.filter(node__in=nodes) if scope else Remediation.objects.all()
    findings = Finding.objects.filter(node__in=nodes) if scope else Finding.objects.all()
    hours = {
        by: statecounts.daily_counts(
            period.since, period.until, by=by, scope=scope, buckets=charts.AVAILABILITY_BUCKETS
        )
        for by in ("cluster__name", "tenant__name")
    }
    return {
        "downtime": summary.downtime(outages.Scope(**{f"{k}_id": v.pk for k, v in scope.items()}), period),
        "mttr": summary.mttr(remediations, period),
        "causes": summary.failure_causes(findings, period),
        "availability_clusters": charts.availability_over_time(hours["cluster__name"], (period.since, period.until)),
        "availability_tenants": charts.availability_over_time(hours["tenant__name"], (period.since, period.until)),
    }


def shown(client, days: int, **params) -> dict:
    response = client.get(reverse("report-overview"), {"days": days, **params})
    assert response.status_code == 200
    keys = ("downtime", "mttr", "causes", "availability_clusters", "availability_tenants")
    return {key: response.context[key] for key in keys}


def same(shown_figures: dict, expected: dict) -> None:
    """Every number equal; percentiles to the float (PostgreSQL's percentile_cont against Python's)."""
    for key in ("downtime", "causes", "availability_clusters", "availability_tenants"):
        assert shown_figures[key] == expected[key], key
    got, want = shown_figures["mttr"], expected["mttr"]
    assert got["capped"] == want["capped"]
    assert [c["cluster"] for c in got["clusters"]] == [c["cluster"] for c in want["clusters"]]
    for g, w in zip([got["overall"], *got["clusters"]], [want["overall"], *want["clusters"]], strict=True):
        assert (g["count"], g["median"], g["p90"]) == (w["count"], w["median"], w["p90"])
        for figure in ("median_s", "p90_s"):
            assert g[figure] == pytest.approx(w[figure], rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("days", [7, 30, 90])
def test_the_page_shows_the_figures_of_every_row_cold_and_warm(client, operator, history, days):
    client.force_login(operator)
    expected = read_every_row({}, days)
    assert expected["mttr"]["overall"]["count"] > 2 and expected["causes"]
    assert {t["attribution"]: t["outages"] > 0 for t in expected["downtime"]["totals"]} == {
        "provider": True,
        "customer": True,
    }
    same(shown(client, days), expected)  # cold: computed and cached
    same(shown(client, days), expected)  # warm: the settled days from the cache


@pytest.mark.parametrize(
    ("params", "scope"), [({"cluster": "c-east"}, "east"), ({"tenant": "acme"}, "acme")], ids=["cluster", "tenant"]
)
def test_a_cluster_or_tenant_sees_only_its_own_figures(client, operator, history, params, scope):
    client.force_login(operator)
    key = "cluster" if "cluster" in params else "tenant"
    expected = read_every_row({key: history[scope]}, 90)
    assert expected != read_every_row({}, 90)
    shown(client, 90)  # the fleet's figures cached first: not served to the scoped page
    same(shown(client, 90, **params), expected)
    same(shown(client, 90, **params), expected)


def test_the_newest_recoveries_are_kept_when_capped(client, operator, history, monkeypatch):
    monkeypatch.setattr(summary, "MAX_RECOVERIES", 25)
    client.force_login(operator)
    expected = read_every_row({}, 90)
    assert expected["mttr"]["capped"]
    same(shown(client, 90), expected)
    same(shown(client, 90), expected)


def test_the_settled_days_are_read_once(client, operator, history):
    """Warm, the page reads no finding, recovery or roll-up row of a settled day."""
    client.force_login(operator)
    shown(client, 90)
    with CaptureQueriesContext(connection) as ctx:
        shown(client, 90)
    reads = [q["sql"] for q in ctx.captured_queries]
    settled_since = (NOW - 89 * D).date().isoformat()
    assert not [sql for sql in reads if "dailystatecount" in sql and '"day" >=' in sql and settled_since in sql]
    # The findings and recoveries read are the edges': today and the partial first day.
    finding_reads = [sql for sql in reads if 'FROM "health_finding"' in sql]
    assert len(finding_reads) == 1 and " OR " in finding_reads[0]


def test_rows_loaded_into_settled_days_show_once_the_load_is_rebuilt(
    client, operator, history, django_capture_on_commit_callbacks
):
    """The services write findings and recoveries now; an import writes past days and ends, as
    every bulk load, with the outages' rebuild (``manage.py rebuild_outages``), which retires the cache."""
    client.force_login(operator)
    before = shown(client, 30)
    n = history["nodes"][0]
    Finding.objects.create(
        node=n, hostname=n.hostname, rule="nvlink_down", severity="warning", summary="x", created=NOW - 10 * D
    )
    remediation(history["nodes"][1], NOW - 12 * D, NOW - 12 * D + 5 * H)
    assert shown(client, 30)["mttr"] == before["mttr"]  # from the cache: the load is not over yet
    with django_capture_on_commit_callbacks(execute=True):
        outages.rebuild()
    figures = shown(client, 30)
    assert [c["count"] for c in figures["causes"] if c["cause"] == "nvlink_down"] == [1]
    assert figures["mttr"]["overall"]["count"] == before["mttr"]["overall"]["count"] + 1
    same(figures, read_every_row({}, 30))


def test_a_node_moved_or_a_cluster_renamed_takes_its_figures_along(
    client, operator, history, django_capture_on_commit_callbacks
):
    client.force_login(operator)
    shown(client, 90, cluster="c-east")
    moved = history["nodes"][0]
    moved.cluster = history["west"]
    with django_capture_on_commit_callbacks(execute=True):
        moved.save()
        followups.cluster_changed(moved)  # as the node admin's inventory edit does
    same(shown(client, 90, cluster="c-east"), read_every_row({"cluster": history["east"]}, 90))
    west, acme = history["west"], history["acme"]
    west.name, acme.name = "c-north", "Acme Labs"
    west.save()
    acme.save()
    figures = shown(client, 90)
    assert "c-north" in [c["cluster"] for c in figures["mttr"]["clusters"]]
    assert "Acme Labs" in [line["name"] for line in figures["availability_tenants"]["data"]]
    same(figures, read_every_row({}, 90))


def test_a_back_dated_state_change_rewrites_the_downtime_of_a_settled_day(
    client, operator, history, django_capture_on_commit_callbacks
):
    client.force_login(operator)
    shown(client, 30)
    n = history["nodes"][11]  # no outage of its own yet
    with django_capture_on_commit_callbacks(execute=True):
        change(n, NOW - 20 * D, S.PRODUCTION, S.TRIAGE, actor="operator")
        change(n, NOW - 20 * D + 5 * H, S.TRIAGE, S.PRODUCTION, actor="operator")
    figures = shown(client, 30)
    same(figures, read_every_row({}, 30))


def test_without_a_shared_cache_every_request_reads_every_row(client, operator, history, settings):
    settings.NODEWARDEN_SETTLED_CACHE = False
    client.force_login(operator)
    same(shown(client, 30), read_every_row({}, 30))
    assert not [key for key in cache._cache if ":reports:settled:1:" in key]  # locmem's own keys


def test_a_node_given_to_another_tenant_in_the_admin_retires_the_cache(
    client, operator, history, fleet_admin, rf, django_capture_on_commit_callbacks
):
    client.force_login(operator)
    shown(client, 90, tenant="acme")
    moved = history["nodes"][0]  # Acme's
    node_admin = NodeAdmin(Node, admin.site)
    request = rf.post("/")
    request.user = fleet_admin
    form_class = node_admin.get_form(request, moved, change=True)
    data = {k: "" if v is None else v for k, v in model_to_dict(moved, fields=form_class.base_fields).items()}
    form = form_class({**data, "tenant": ""}, instance=Node.objects.get(pk=moved.pk))
    assert form.is_valid(), form.errors
    with django_capture_on_commit_callbacks(execute=True):
        node_admin.save_model(request, form.save(commit=False), form, change=True)
    same(shown(client, 90, tenant="acme"), read_every_row({"tenant": history["acme"]}, 90))


class _Unreachable:
    """A cache that does not answer, as Redis down does (a stand-in: the tests' cache is in memory)."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RedisError("Connection refused")

        return fail


def test_without_an_answering_cache_the_page_reads_every_row(
    client, operator, history, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(settled, "cache", _Unreachable())
    client.force_login(operator)
    same(shown(client, 30), read_every_row({}, 30))
    with django_capture_on_commit_callbacks(execute=True):  # a retiring write commits all the same
        settled.forget()
