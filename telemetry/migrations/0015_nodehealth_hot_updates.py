"""NodeHealth's row is rewritten by every report: make that update a HOT one (no index entry).

The index on last_received_at goes: the column moves with every report, so each update wrote a
new row version on another page and an entry in both indexes, and the table bloated faster than
autovacuum cleaned it. bench/ingest.py, 2,000 nodes, one full run each way:
- before: no update HOT, the table 443 MB at the end; 3,810 reports/s at 0.49 ms of CPU a report;
- after: every update HOT, 31 MB; 4,233 reports/s at 0.44 ms.
On PostgreSQL the pages keep half their room free for the new versions, as GpuState's do
(migration 0012): about one 2 kB row a page. The heartbeat sweep (health.tasks), the index's one
selective reader, runs once a minute and now reads the table through (a sequential scan, which
does not crowd the shared buffers): 130 ms at 100,000 nodes, against the index's cost on every
report. Rows written before this move to roomier pages as they are updated.
"""

from django.db import migrations

FILLFACTOR = 50


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE telemetry_nodehealth SET (fillfactor = {FILLFACTOR})")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE telemetry_nodehealth RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0014_no_compression_of_fresh_rows"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="nodehealth", name="nodehealth_received"),
        migrations.RunPython(set_fillfactor, reset_fillfactor),
    ]
