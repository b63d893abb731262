"""manage.py telemetry_partitioning: the DDL that range-partitions the history by month."""

from __future__ import annotations

from datetime import date, timedelta
from io import StringIO

import msgspec
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from telemetry.ingest import ingest_reports
from telemetry.models import GpuSample, NodeReport, XidRecord
from telemetry.partitioning import ensure_future_partitions, partition_ddl, partitioned_tables
from telemetry.schema import AgentReport
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
    ):
        assert (
            f"CREATE TABLE {table} (LIKE {table}_unpartitioned INCLUDING DEFAULTS) "
            f"PARTITION BY RANGE ({column});" in ddl
        )
        assert (
            f"CREATE TABLE IF NOT EXISTS {table}_p2026_10 PARTITION OF {table} "
            f"FOR VALUES FROM ('2026-10-01') TO ('2026-11-01');" in ddl
        )
        assert f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT;" in ddl
    assert "ALTER TABLE telemetry_gpusample ADD PRIMARY KEY (node_id, collected_at, gpu_index);" in ddl


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
    assert partitioned_tables() == {"telemetry_gpusample", "telemetry_nodereport", "telemetry_xidrecord"}
    assert (NodeReport.objects.count(), GpuSample.objects.count(), XidRecord.objects.count()) == (1, 8, 1)
    later = msgspec.convert(make_report(node.hostname, collected_at=T0 + timedelta(seconds=30)), AgentReport)
    assert ingest_reports(node.pk, [later, first]).duplicates == 1  # the primary key still deduplicates
    assert GpuSample.objects.count() == 16
    assert ensure_future_partitions() == 9
    with pytest.raises(CommandError, match="Already partitioned"):
        call_command("telemetry_partitioning", "--apply", stdout=StringIO())
