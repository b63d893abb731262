"""Report and health rows stay whole on their page: no compression, no TOAST, under 8,160 bytes.

A report's summary and a node's latest host and InfiniBand state are about 2 kB of jsonb, over
PostgreSQL's default TOAST threshold (about 2 kB): every insert and upsert compressed them with
pglz, 2.4 % of PostgreSQL's CPU in bench/ingest.py (perf), for rows that live an hour (reports,
packed after it: telemetry.packing compresses the hour whole) or one per node (health). With
toast_tuple_target at its maximum a row is only toasted past 8,160 bytes.
"""

from django.db import migrations

TABLES = ("telemetry_nodereport", "telemetry_nodehealth")


def _heaps(schema_editor, table):
    """The table, or its partitions where it is partitioned (telemetry.partitioning: a partitioned
    table has no storage of its own; its new partitions get the setting as they are created)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relname = %s AND c.relkind = 'r'"
            " UNION ALL SELECT p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent"
            " JOIN pg_class p ON p.oid = i.inhrelid WHERE c.relname = %s",
            [table, table],
        )
        return [row[0] for row in cursor.fetchall()]


def set_target(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in TABLES:
            for heap in _heaps(schema_editor, table):
                schema_editor.execute(f'ALTER TABLE "{heap}" SET (toast_tuple_target = 8160)')


def reset_target(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in TABLES:
            for heap in _heaps(schema_editor, table):
                schema_editor.execute(f'ALTER TABLE "{heap}" RESET (toast_tuple_target)')


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0013_hourly_load_samples"),
    ]

    operations = [migrations.RunPython(set_target, reset_target, elidable=False)]
