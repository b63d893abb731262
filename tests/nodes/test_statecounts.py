"""Daily roll-ups of the hourly state-count snapshots: the same figures as the snapshots, and a
roll-up that can run any number of times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from nodes import statecounts
from nodes.models import DailyStateCount, StateCountSnapshot
from nodes.tasks import snapshot_state_counts
from tests.factories import ClusterFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2025, 6, 30, 12, 30, tzinfo=UTC)
H, D = timedelta(hours=1), timedelta(days=1)


@pytest.fixture
def hourly():
    """Four days of hourly snapshots before NOW (two clusters, one tenant), counts varying by the hour."""
    east, west, acme = ClusterFactory(name="east"), ClusterFactory(name="west"), TenantFactory(name="Acme")
    start = datetime(2025, 6, 26, 0, 0, tzinfo=UTC)
    at = start
    while at <= NOW:
        i = int((at - start) / H)
        StateCountSnapshot.objects.create(taken_at=at, state="production", cluster=east, tenant=acme, count=10 + i % 3)
        StateCountSnapshot.objects.create(taken_at=at, state="triage", cluster=east, tenant=acme, count=1 + i % 2)
        if i % 5:
            StateCountSnapshot.objects.create(taken_at=at, state="repair", cluster=west, tenant=None, count=i % 4)
        at += H
    return east, west, acme


def _summed(since, until, by=None, **scope):
    """Per (day, state, group): node-hours, straight from the hourly snapshots (the reference)."""
    totals: dict = {}
    rows = StateCountSnapshot.objects.filter(taken_at__gte=since, taken_at__lt=until, **scope).select_related(
        "cluster", "tenant"
    )
    for s in rows:
        group = None
        if by:
            related = getattr(s, by.split("__")[0])
            group = related.name if related else None
        key = (s.taken_at.date(), s.state, group)
        totals[key] = totals.get(key, 0) + s.count
    return totals


def _read(since, until, by=None, **scope):
    return {(c.day, c.state, c.group): c.node_hours for c in statecounts.daily_counts(since, until, by=by, scope=scope)}


@pytest.mark.parametrize("since", [NOW - 3 * D, NOW - 3 * D - 7 * H, datetime(2025, 6, 27, tzinfo=UTC)])
def test_daily_counts_match_the_snapshots_before_and_after_the_roll_up(hourly, since):
    east, _, acme = hourly
    for scope in ({}, {"cluster_id": east.pk}, {"tenant_id": acme.pk}):
        for by in (None, "cluster__name", "tenant__name"):
            expected = _summed(since, NOW, by, **scope)
            assert _read(since, NOW, by, **scope) == expected  # nothing rolled up: all from the snapshots
            statecounts.roll_up(today=NOW.date())
            assert _read(since, NOW, by, **scope) == expected  # finished days from the roll-up
            DailyStateCount.objects.all().delete()


def test_a_stale_roll_up_is_completed_from_the_snapshots(hourly):
    statecounts.roll_up(today=NOW.date() - 2 * D)  # the task last ran two days ago
    assert DailyStateCount.objects.latest("day").day == NOW.date() - 3 * D
    assert _read(NOW - 4 * D, NOW) == _summed(NOW - 4 * D, NOW)


def test_the_roll_up_is_idempotent_and_covers_finished_days_only(hourly):
    written = statecounts.roll_up(today=NOW.date())
    rows = sorted(
        DailyStateCount.objects.values_list("day", "state", "cluster_id", "tenant_id", "node_hours", "samples")
    )
    assert written == len(rows) and {r[0] for r in rows} == {NOW.date() - n * D for n in (1, 2, 3, 4)}
    assert {r[5] for r in rows} == {24}
    statecounts.roll_up(today=NOW.date())
    statecounts.roll_up(today=NOW.date())
    assert (
        sorted(DailyStateCount.objects.values_list("day", "state", "cluster_id", "tenant_id", "node_hours", "samples"))
        == rows
    )


def test_the_hourly_snapshot_task_rolls_up_yesterday():
    NodeFactory.create_batch(3, state="production")
    with time_machine.travel(datetime(2025, 6, 29, 23, 0, tzinfo=UTC), tick=False):
        snapshot_state_counts()
    assert not DailyStateCount.objects.exists()  # the first day is not over yet
    with time_machine.travel(datetime(2025, 6, 30, 0, 0, tzinfo=UTC), tick=False):
        snapshot_state_counts()
    rows = DailyStateCount.objects.all()
    assert {(r.day.isoformat(), r.state, r.samples) for r in rows} == {("2025-06-29", "production", 1)}
    assert sum(r.node_hours for r in rows) == 3


def test_the_overview_chart_averages_each_day(hourly, client, operator):
    from django.urls import reverse

    from .test_views import _figure

    statecounts.roll_up(today=NOW.date())
    client.force_login(operator)
    with time_machine.travel(NOW, tick=False):
        fig = _figure(client.get(reverse("fleet-overview")), "counts-chart-data")
    production = next(t for t in fig["data"] if t["name"] == "Production")
    # 24 hourly counts of 10, 11, 12 in turn: 11 on average; today's 13 snapshots so far (0:00-12:00).
    assert production["x"][0] == "2025-06-26" and production["y"][:4] == [11.0, 11.0, 11.0, 11.0]
    assert production["x"][-1] == "2025-06-30" and len(production["y"]) == 5
