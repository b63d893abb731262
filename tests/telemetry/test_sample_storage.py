"""What a GPU sample costs on disk (issue 17, a year of 100,000 nodes): narrow columns, PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from django.db import connection, transaction

from telemetry.ingest import IngestRefused, ingest_reports
from telemetry.models import GpuSample, GpuSampleDaily, GpuSampleHourly
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
    assert _avg_row_bytes(GpuSample._meta.db_table) <= 180  # was 208
    hourly = _column_types(GpuSampleHourly._meta.db_table)
    assert {hourly[c] for c in ("temperature_avg", "temperature_max", "power_avg", "utilization_avg")} == {"real"}
    assert _avg_row_bytes(GpuSampleHourly._meta.db_table) <= 183  # was 200; +8 for the samples under load (0013)
    daily = _column_types(GpuSampleDaily._meta.db_table)
    assert {daily[c] for c in ("temperature_avg", "power_avg", "load_temperature_avg")} == {"real"}
    assert daily["memory_used_max"] == "integer" and daily["pcie_link_gen_min"] == "smallint"


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


@needs_postgresql
def test_the_migrations_narrow_a_partitioned_install_and_keep_its_rows(node):
    # An install that ran `telemetry_partitioning --apply` before the narrow columns (0008) and
    # the index without key (0009): the parent's ALTERs must reach every partition, rows intact.
    # All inside the test's transaction (PostgreSQL's DDL is transactional): rolled back after.
    from django.db.migrations.executor import MigrationExecutor

    from telemetry.partitioning import partition_ddl

    def migrate(target):
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate([("telemetry", target)])

    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("telemetry")[0][1]
    migrate("0007_agentcommand_answer_by")
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO telemetry_gpusample (node_id, collected_at, gpu_index, temperature_c, memory_used_mib,"
                " pcie_link_gen) VALUES (%s, %s, 0, 61.5, 81559, 5), (%s, %s, 1, 62.5, 4294967296, 5)",
                [node.pk, T0, node.pk, T0],
            )
        # Partitioned as the code before 0009 did it: the (node, time, GPU) primary key.
        old_key = "ALTER TABLE telemetry_gpusample ADD PRIMARY KEY (node_id, collected_at, gpu_index);"
        with transaction.atomic(), connection.cursor() as cursor:
            # GpuSampleDaily came later (0010): not there to partition at 0007.
            for statement in partition_ddl(since=T0.date().replace(day=1), skip={"telemetry_gpusampledaily"}):
                cursor.execute(old_key if "gpusample_node_time" in statement else statement)
        migrate(latest)
        rows = sorted(GpuSample.objects.values_list("gpu_index", "temperature_c", "memory_used_mib", "pcie_link_gen"))
        # A value too wide for its new column (the old schema let 2**32 MiB through) becomes NULL.
        assert rows == [(0, 61.5, 81559, 5), (1, 62.5, None, 5)]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_inherits i"
                " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_attribute a ON a.attrelid = c.oid"
                " WHERE i.inhparent = 'telemetry_gpusample'::regclass AND a.attname = 'temperature_c'"
            )
            partitions = dict(cursor.fetchall())
            cursor.execute(
                "SELECT count(*) FROM pg_constraint WHERE conrelid = 'telemetry_gpusample'::regclass AND contype = 'p'"
            )
            keys = cursor.fetchone()[0]
            cursor.execute(
                "SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%%(node_id, collected_at)'"
                " AND tablename LIKE 'telemetry_gpusample%%'"
            )
            indexed = cursor.fetchone()[0]
        assert len(partitions) > 2 and set(partitions.values()) == {"real"}
        assert keys == 0 and indexed == len(partitions) + 1  # the parent's index and each partition's
        migrate("0007_agentcommand_answer_by")  # and back: the key and the wide types return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_constraint WHERE conrelid = 'telemetry_gpusample'::regclass AND contype = 'p'"
            )
            assert cursor.fetchone()[0] == 1
    finally:
        migrate(latest)
