"""manage.py telemetry_partitioning: the DDL that range-partitions the history by month."""

from __future__ import annotations

from datetime import date, timedelta
from io import StringIO

import msgspec
import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from telemetry.ingest import ingest_reports
from telemetry.models import GpuSample, GpuSampleDaily, GpuSampleHourly, NodeReport, XidRecord
from telemetry.partitioning import (
    _monthly_partitions,
    apply_partitioning,
    ensure_future_partitions,
    partition_ddl,
    partitioned_tables,
)
from telemetry.retention import roll_up_and_prune
from telemetry.schema import AgentReport
from telemetry.tasks import roll_up_and_prune as roll_up_task
from telemetry.testing import make_report

from .conftest import T0

pytestmark = pytest.mark.django_db


def test_it_prints_a_monthly_range_partitioning_of_each_history_table():
    out = StringIO()
    call_command("telemetry_partitioning", "--since", "2026-10-01", stdout=out)
    ddl = out.getvalue()
    assert ddl.startswith("BEGIN;") and ddl.rstrip().endswith("COMMIT;")
    for table, column in (
        ("telemetry_gpusample", "collected_at"),
        ("telemetry_nodereport", "collected_at"),
        ("telemetry_xidrecord", "observed_at"),
        ("telemetry_gpusampledaily", "day"),
    ):
        assert (
            f"CREATE TABLE {table} (LIKE {table}_unpartitioned INCLUDING DEFAULTS) "
            f"PARTITION BY RANGE ({column});" in ddl
        )
        storage = " WITH (toast_tuple_target = 8160)" if table == "telemetry_nodereport" else ""  # migration 0014
        assert (
            f"CREATE TABLE IF NOT EXISTS {table}_p2026_10 PARTITION OF {table} "
            f"FOR VALUES FROM ('2026-10-01') TO ('2026-11-01'){storage};" in ddl
        )
        assert f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT;" in ddl
    assert "ALTER TABLE telemetry_nodereport ADD PRIMARY KEY (node_id, collected_at);" in ddl
    # Daily roll-ups keep their key: a day rolled up again merges into its row (ON CONFLICT).
    assert "ALTER TABLE telemetry_gpusampledaily ADD PRIMARY KEY (node_id, day, gpu_index);" in ddl
    # Samples: a (node, time) index, no key (migration 0009): one deduplicated entry per report.
    assert "CREATE INDEX IF NOT EXISTS gpusample_node_time ON telemetry_gpusample (node_id, collected_at);" in ddl
    assert "ALTER TABLE telemetry_gpusample ADD PRIMARY KEY" not in ddl


def test_the_months_run_from_since_to_two_months_ahead_across_a_year_end():
    from datetime import UTC, datetime

    ddl = "\n".join(partition_ddl(since=date(2026, 11, 5), now=datetime(2026, 12, 1, tzinfo=UTC)))
    months = [m for m in ("2026_11", "2026_12", "2027_01", "2027_02", "2027_03") if f"telemetry_gpusample_p{m}" in ddl]
    assert months == ["2026_11", "2026_12", "2027_01", "2027_02"]


def test_apply_refuses_sqlite():
    if connection.vendor == "postgresql":
        pytest.skip("SQLite behaviour")
    with pytest.raises(CommandError, match="PostgreSQL"):
        call_command("telemetry_partitioning", "--apply", stdout=StringIO())


def test_apply_on_postgresql_partitions_the_tables_and_ingest_still_works(node):
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is PostgreSQL-only; bin/test runs this on PostgreSQL")
    first = msgspec.convert(make_report(node.hostname, collected_at=T0, xid=79), AgentReport)
    ingest_reports(node.pk, [first])
    call_command("telemetry_partitioning", "--apply", stdout=StringIO())
    assert partitioned_tables() == {
        "telemetry_gpusample",
        "telemetry_nodereport",
        "telemetry_xidrecord",
        "telemetry_gpusampledaily",
    }
    assert (NodeReport.objects.count(), GpuSample.objects.count(), XidRecord.objects.count()) == (1, 8, 1)
    later = msgspec.convert(make_report(node.hostname, collected_at=T0 + timedelta(seconds=30)), AgentReport)
    assert ingest_reports(node.pk, [later, first]).duplicates == 1  # the primary key still deduplicates
    assert GpuSample.objects.count() == 16
    assert ensure_future_partitions() == 12
    with pytest.raises(CommandError, match="Already partitioned"):
        call_command("telemetry_partitioning", "--apply", stdout=StringIO())


def _partitioned_with_old_and_recent_rows(node):
    """Reports with an XID in July and at T0, partitioned by month from July, the clock at T0."""
    for at in (T0 - timedelta(days=130), T0):
        ingest_reports(node.pk, [msgspec.convert(make_report(node.hostname, collected_at=at, xid=79), AgentReport)])
    apply_partitioning(since=date(2026, 7, 1))


def _months_of(table):
    return sorted(month.strftime("%Y_%m") for month in _monthly_partitions(table).values())


@override_settings(TELEMETRY_RAW_RETENTION_DAYS=14, TELEMETRY_REPORT_RETENTION_DAYS=30, TELEMETRY_XID_RETENTION_DAYS=60)
def test_beats_retention_drops_whole_months_past_each_window_and_keeps_the_rest(node):
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is PostgreSQL-only; bin/test runs this on PostgreSQL")
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        _partitioned_with_old_and_recent_rows(node)
        result = roll_up_task()
    # Reports keep October (it ends after T0 - 30 days); XIDs keep September on (T0 - 60 days:
    # 21 September); samples only November (rolled up, then their emptied months dropped).
    assert _months_of("telemetry_nodereport") == ["2026_10", "2026_11", "2026_12", "2027_01"]
    assert _months_of("telemetry_xidrecord") == ["2026_09", "2026_10", "2026_11", "2026_12", "2027_01"]
    assert _months_of("telemetry_gpusample") == ["2026_11", "2026_12", "2027_01"]
    assert "telemetry_gpusample_p2026_07" in result["dropped"]
    assert "telemetry_nodereport_p2026_07" in result["dropped"]
    # The July rows left with their partitions; T0's stayed; July's samples live on as days (hours
    # past TELEMETRY_HOURLY_RETENTION_DAYS).
    assert list(NodeReport.objects.values_list("collected_at", flat=True)) == [T0]
    assert list(XidRecord.objects.values_list("observed_at", flat=True)) == [T0]
    assert set(GpuSample.objects.values_list("collected_at", flat=True)) == {T0}
    assert GpuSampleDaily.objects.filter(day=T0.replace(hour=0) - timedelta(days=130)).count() == 8


def test_a_sample_month_is_not_dropped_before_its_rows_are_rolled_up(node):
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is PostgreSQL-only; bin/test runs this on PostgreSQL")
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        _partitioned_with_old_and_recent_rows(node)
        result = roll_up_and_prune(max_batches=0)  # no batch left to roll July up
    assert "telemetry_gpusample_p2026_07" not in result.dropped
    assert "telemetry_gpusample_p2026_08" in result.dropped  # empty: nothing to roll up
    assert GpuSample.objects.filter(collected_at=T0 - timedelta(days=130)).count() == 8


def test_ensure_ahead_creates_the_coming_months_of_every_table(node):
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is PostgreSQL-only; bin/test runs this on PostgreSQL")
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        _partitioned_with_old_and_recent_rows(node)
    assert ensure_future_partitions(now=T0 + timedelta(days=70)) == 12  # January 2027 and two after
    for table in ("telemetry_nodereport", "telemetry_gpusample", "telemetry_xidrecord", "telemetry_gpusampledaily"):
        assert _months_of(table)[-3:] == ["2027_01", "2027_02", "2027_03"]


@override_settings(TELEMETRY_HOURLY_RETENTION_DAYS=30, TELEMETRY_DAILY_RETENTION_DAYS=60)
def test_hours_become_days_in_the_partitioned_daily_table_and_its_old_months_are_dropped(node):
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is PostgreSQL-only; bin/test runs this on PostgreSQL")
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        _partitioned_with_old_and_recent_rows(node)
        GpuSampleDaily.objects.create(node=node, day=T0.replace(hour=0) - timedelta(days=100), gpu_index=0, n=2880)
        result = roll_up_task()
    # July's samples became hours, the hours days (past 30 days), July's day left with its month
    # (past 60 days, like August's empty one); the day 100 days back sat in August, gone too.
    assert _months_of("telemetry_gpusampledaily") == ["2026_09", "2026_10", "2026_11", "2026_12", "2027_01"]
    assert {"telemetry_gpusampledaily_p2026_07", "telemetry_gpusampledaily_p2026_08"} <= set(result["dropped"])
    assert not GpuSampleHourly.objects.exists() and not GpuSampleDaily.objects.exists()
    assert result["rolled_up_hours"] == 8


def test_apply_partitions_a_history_table_added_after_the_install_was_partitioned(node):
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is PostgreSQL-only; bin/test runs this on PostgreSQL")
    # An install partitioned before GpuSampleDaily existed: the other tables partitioned, it not.
    with connection.cursor() as cursor:
        for statement in partition_ddl(since=date(2026, 10, 1), skip={"telemetry_gpusampledaily"}):
            cursor.execute(statement)
    GpuSampleDaily.objects.create(node=node, day=T0.replace(hour=0), gpu_index=0, n=2880)
    call_command("telemetry_partitioning", "--apply", "--since", "2026-10-01", stdout=StringIO())
    assert "telemetry_gpusampledaily" in partitioned_tables()
    assert _months_of("telemetry_gpusampledaily")[0] == "2026_10"
    assert GpuSampleDaily.objects.get().n == 2880
    with pytest.raises(CommandError, match="Already partitioned"):
        call_command("telemetry_partitioning", "--apply", stdout=StringIO())
