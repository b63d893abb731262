"""GpuSample: a (node, time) index instead of the (node, time, GPU) primary key, on PostgreSQL.

The primary key checked nothing (samples come only from reports new in the same transaction,
NodeReport's key deduplicates) and held one B-tree entry per GPU row; the plain index holds one
deduplicated entry per report and serves every reader (a node's time range). Django keeps the
composite key in its state (a model needs one); SQLite keeps the constraint too (tests, demos).
On a partitioned table the parent's DROP CONSTRAINT and CREATE INDEX reach every partition.
"""

from django.db import migrations, models

TABLE = "telemetry_gpusample"


def _primary_key(schema_editor) -> str | None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'", [TABLE])
        row = cursor.fetchone()
    return row[0] if row else None


def drop_primary_key(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql" and (name := _primary_key(schema_editor)):
        schema_editor.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {schema_editor.quote_name(name)}")


def restore_primary_key(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql" and not _primary_key(schema_editor):
        schema_editor.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (node_id, collected_at, gpu_index)")


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0008_narrow_sample_columns"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="gpusample",
            index=models.Index(fields=["node", "collected_at"], name="gpusample_node_time"),
        ),
        migrations.RunPython(drop_primary_key, restore_primary_key),
    ]
