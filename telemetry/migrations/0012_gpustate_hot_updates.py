"""GpuState's rows are rewritten by every report: make that update a HOT one (no index entry).

The node's own index goes (the (node, index) constraint serves every read by node), and on
PostgreSQL the table's pages keep half their room free for the new row versions. In
bench/ingest.py every update became HOT (42% before) and the upsert of a group's GPU rows took
2.6 ms instead of 4.0. Rows written before this move to roomier pages as they are updated.
"""

import django.db.models.deletion
from django.db import migrations, models

FILLFACTOR = 50
NODE_INDEX = "telemetry_gpustate_node_id_07fd25c5"  # Django's name for the foreign key's own index


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE telemetry_gpustate SET (fillfactor = {FILLFACTOR})")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE telemetry_gpustate RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0011_telemetry_hour_pack"),
    ]

    operations = [
        # The index by name, not an AlterField: that would drop and remake the foreign key too, which
        # PostgreSQL refuses in a transaction that has pending trigger events (a test's).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="gpustate",
                    name="node",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="gpu_states",
                        to="nodes.node",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {NODE_INDEX}",
                    f"CREATE INDEX IF NOT EXISTS {NODE_INDEX} ON telemetry_gpustate (node_id)",
                ),
            ],
        ),
        migrations.RunPython(set_fillfactor, reset_fillfactor),
    ]
