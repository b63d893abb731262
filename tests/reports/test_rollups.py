"""What the report page reads from derived figures instead of the raw rows: the fleet's transition
counts rolled up per day, time to recover computed by PostgreSQL, the Day 1 yield of the whole fleet.
Each reads the same figures as the straightforward count over the rows."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.db.models.functions import Coalesce

from nodes.models import Node, NodeEvent
from remediation.choices import Status
from remediation.models import Remediation
from reports import flows, summary
from reports.filters import Period
from reports.models import DailyTransitionCount
from tests.factories import NodeFactory
from validation.summary import day1_yield

from .conftest import NOW, D, H, change, remediation

pytestmark = pytest.mark.django_db

PERIODS = [
    Period(NOW - 7 * D, NOW),
    Period(NOW - 30 * D, NOW),
    Period(NOW - 3 * D - 5 * H, NOW - D + 2 * H),
    Period(NOW - 8 * D, NOW - 7 * D + 11 * H),
    Period(NOW - 90 * D, NOW - 20 * D),
]


def _counted(period):
    return flows.transition_counts(flows.state_changes(NodeEvent.objects.all(), period))


@pytest.mark.parametrize("period", PERIODS)
def test_the_fleets_flow_reads_like_counting_the_changes_before_and_after_the_roll_up(week, period):
    assert flows.fleet_transition_counts(period) == _counted(period)  # nothing rolled up yet
    assert flows.roll_up(today=NOW.date()) > 0
    assert flows.fleet_transition_counts(period) == _counted(period)


def test_the_roll_up_counts_finished_days_only_and_running_it_again_changes_nothing(week):
    flows.roll_up(today=(NOW - 2 * D).date())
    assert DailyTransitionCount.objects.latest("day").day == (NOW - 3 * D).date()
    first = list(DailyTransitionCount.objects.values_list("day", "source_state", "target_state", "count"))
    assert flows.roll_up(today=(NOW - 2 * D).date()) == sum(1 for row in first if row[0] == (NOW - 3 * D).date())
    assert list(DailyTransitionCount.objects.values_list("day", "source_state", "target_state", "count")) == first
    flows.roll_up(today=NOW.date())
    assert DailyTransitionCount.objects.filter(day=(NOW - D).date()).exists()
    assert (
        sum(DailyTransitionCount.objects.values_list("count", flat=True))
        == NodeEvent.objects.filter(created__lt=NOW.replace(hour=0)).count()
    )


def test_a_change_saved_into_a_rolled_up_day_is_counted_all_the_same(week):
    with time_machine.travel(NOW, tick=False):
        flows.roll_up()
        change(week.e, NOW - 5 * D, "production", "triage", actor="operator")  # back-dated
        assert not DailyTransitionCount.objects.filter(day__gte=(NOW - 5 * D).date()).exists()
        assert DailyTransitionCount.objects.filter(day__lt=(NOW - 5 * D).date()).exists()
        for period in PERIODS:
            assert flows.fleet_transition_counts(period) == _counted(period)
        flows.roll_up()
        assert flows.fleet_transition_counts(PERIODS[0]) == _counted(PERIODS[0])
        with connection.execute_wrapper(lambda *args: pytest.fail("a query for a change made now")):
            flows.forget_days_from(NOW - H)


def _python_recovery_stats(period):
    rows = (
        Remediation.objects.filter(status=Status.SUCCEEDED, finished__gte=period.since, finished__lt=period.until)
        .annotate(began=Coalesce("finding__created", "created"))
        .order_by("-finished")
        .values_list("node__cluster__name", "began", "finished")[: summary.MAX_RECOVERIES]
    )
    return summary._recovery_stats(rows)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="percentile_cont is PostgreSQL's")
def test_time_to_recover_computed_by_postgresql_equals_the_python_figures(week):
    unclustered = NodeFactory(hostname="loose")
    Node.objects.filter(pk=unclustered.pk).update(cluster=None)
    for i in range(7):  # an odd and an even count per group, durations with fractions of seconds
        remediation(week.c, NOW - (i + 2) * D, NOW - (i + 2) * D + (i * 37 + 1) * H + timedelta(microseconds=i * 7))
        remediation(unclustered, NOW - (i + 2) * D, NOW - (i + 2) * D + (i + 1) * 0.3 * H)
    late = remediation(week.d, NOW - D, NOW - D + H)
    Remediation.objects.filter(pk=late.pk).update(finding=None)  # no finding: from the remediation's start
    for period in [*PERIODS, Period(NOW - D, NOW - D + H)]:
        expected = _python_recovery_stats(period)
        got = summary._recovery_stats_in_sql(
            Remediation.objects.filter(
                status=Status.SUCCEEDED, finished__gte=period.since, finished__lt=period.until
            ).order_by("-finished")
        )
        assert got.keys() == expected.keys()
        for key, stats in expected.items():
            assert got[key] == {
                **stats,
                "median_s": pytest.approx(stats["median_s"]),
                "p90_s": pytest.approx(stats["p90_s"]),
            }, key


def test_time_to_recover_of_an_empty_period_has_no_figures(week):
    figures = summary.mttr(Remediation.objects.all(), Period(NOW - 400 * D, NOW - 399 * D))
    assert figures["overall"]["count"] == 0 and figures["overall"]["median"] == "—"
    assert figures["clusters"] == [] and not figures["capped"]


def test_the_fleets_day1_yield_reads_every_nodes_runs(week):
    from nodes.choices import RunKind, RunStatus
    from nodes.models import Run

    for node, kind, status in [
        (week.a, RunKind.STAGE_RELIABILITY, RunStatus.PASSED),
        (week.c, RunKind.STAGE_BURN_IN, RunStatus.FAILED),
        (week.d, RunKind.STAGE_RELIABILITY, RunStatus.SKIPPED),
    ]:
        Run.objects.create(node=node, kind=kind, status=status, finished=NOW - D)
    assert (
        day1_yield(None, now=NOW)
        == day1_yield(Node.objects.all(), now=NOW)
        == {"released": 2, "failed": 1, "yield_pct": 66.7}
    )
    assert day1_yield(Node.objects.filter(cluster=week.west), now=NOW)["failed"] == 1


def test_a_remediation_keeps_its_findings_time(week):
    rem = remediation(week.c, NOW - 2 * D, NOW - D)
    assert rem.finding_created == rem.finding.created == NOW - 2 * D
    rem.refresh_from_db()
    assert rem.finding_created == NOW - 2 * D


def test_remediations_by_rung_are_counted_from_the_index_alone(week):
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        summary.remediations_by_rung(Remediation.objects.all(), Period(NOW - 90 * D, NOW))
    (query,) = ctx.captured_queries
    # Whether PostgreSQL can answer from the covering index alone: the query touches no column the
    # index lacks, and the index holds them. (Asking the planner is no test on a tiny, never-vacuumed
    # table: an index-only scan then costs what a plain index scan does, and it picks either.)
    columns = set(re.findall(r'"remediation_remediation"\."(\w+)"', query["sql"]))
    assert columns and columns <= {"created", "rung", "status"}, columns
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'remediation_created'")
        (definition,) = cursor.fetchone()
    assert definition.endswith("(created) INCLUDE (rung, status)"), definition
