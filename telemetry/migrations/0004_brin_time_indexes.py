"""BRIN indexes on the history tables' time columns, PostgreSQL only.

Retention and roll-up scan by time alone; a BRIN index costs almost nothing on insert
(rows arrive roughly in time order) where a B-tree on 24,000 rows a second would not.
SQLite (tests, small demos) does without.
"""

from django.db import migrations

INDEXES = [
    ("telemetry_gpusample_time_brin", "telemetry_gpusample", "collected_at"),
    ("telemetry_nodereport_time_brin", "telemetry_nodereport", "collected_at"),
    ("telemetry_xidrecord_time_brin", "telemetry_xidrecord", "observed_at"),
    ("telemetry_gpusamplehourly_time_brin", "telemetry_gpusamplehourly", "hour"),
]


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, table, column in INDEXES:
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING brin ({column})")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _, _ in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0003_history_and_latest_state")]
    operations = [migrations.RunPython(create, drop)]
