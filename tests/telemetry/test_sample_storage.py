"""What a GPU sample costs on disk (issue 17, a year of 100,000 nodes): narrow columns, PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from django.db import connection

from telemetry.ingest import IngestRefused, ingest_reports
from telemetry.models import GpuSample, GpuSampleHourly
from telemetry.retention import roll_up_and_prune
from telemetry.schema import AgentReport
from telemetry.testing import make_batch, make_report

from .conftest import T0

pytestmark = pytest.mark.django_db

needs_postgresql = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="measures PostgreSQL's row sizes")


def _avg_row_bytes(table: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT avg(pg_column_size(t.*)) FROM {table} t")  # noqa: S608 - a model's table
        return float(cursor.fetchone()[0])


def _column_types(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s", [table])
        return dict(cursor.fetchall())


@needs_postgresql
def test_a_sample_row_and_its_roll_up_are_narrow(node):
    # Before: float8 for every reading and bigint for clocks, memory and PCIe link (about 200 B a row).
    reports = [msgspec.convert(r, AgentReport) for r in make_batch(node.hostname, start=T0, count=4)["reports"]]
    ingest_reports(node.pk, reports)
    roll_up_and_prune(now=T0 + timedelta(days=30))
    ingest_reports(
        node.pk, [msgspec.convert(make_report(node.hostname, collected_at=T0 + timedelta(hours=2)), AgentReport)]
    )
    types = _column_types(GpuSample._meta.db_table)
    assert {types[c] for c in ("temperature_c", "hbm_temperature_c", "power_w", "utilization_pct")} == {"real"}
    assert types["sm_clock_mhz"] == types["memory_used_mib"] == "integer"
    assert types["pcie_link_gen"] == types["pcie_link_width"] == "smallint"
    assert _avg_row_bytes(GpuSample._meta.db_table) <= 180  # was 216
    hourly = _column_types(GpuSampleHourly._meta.db_table)
    assert {hourly[c] for c in ("temperature_avg", "temperature_max", "power_avg", "utilization_avg")} == {"real"}
    assert _avg_row_bytes(GpuSampleHourly._meta.db_table) <= 175


def test_a_reading_wider_than_its_column_is_refused_naming_the_field(node):
    report = make_report(node.hostname, collected_at=T0)
    report["gpus"][0]["memory_used_mib"] = 2**31
    with pytest.raises((msgspec.ValidationError, IngestRefused), match="memory_used_mib"):
        ingest_reports(node.pk, [msgspec.convert(report, AgentReport)])


@needs_postgresql
def test_samples_carry_one_node_time_index_and_no_per_gpu_key(node):
    # Before: a primary key on (node, time, GPU), one B-tree entry per GPU row. The (node, time)
    # index holds one deduplicated entry per report; NodeReport's key already refuses a resend.
    table = GpuSample._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        indexes = dict(cursor.fetchall())
        cursor.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'", [table])
        assert cursor.fetchone()[0] == 0
    assert indexes["gpusample_node_time"].endswith("USING btree (node_id, collected_at)")
    assert set(indexes) == {"gpusample_node_time", "telemetry_gpusample_time_brin"}
    report = msgspec.convert(make_report(node.hostname, collected_at=T0), AgentReport)
    assert ingest_reports(node.pk, [report]).accepted == 1
    assert ingest_reports(node.pk, [report]).duplicates == 1  # still stored once
    assert GpuSample.objects.count() == 8
