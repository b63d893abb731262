"""Indexes for the node list's prefix search, PostgreSQL only.

``istartswith`` compiles to ``UPPER(col::text) LIKE UPPER('abc%')``: only an index on that very
expression, with the pattern operator class (the database's collation is not C), can answer it
without reading every row. SQLite (tests, small demos) does without.
"""

from django.db import migrations

INDEXES = [
    ("nodes_node_hostname_upper_like", "nodes_node", "hostname"),
    ("nodes_node_serial_upper_like", "nodes_node", "serial"),
    ("nodes_node_bmc_address_upper_like", "nodes_node", "bmc_address"),
    ("nodes_gpu_uuid_upper_like", "nodes_gpu", "uuid"),
]


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, table, column in INDEXES:
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} (UPPER({column}::text) text_pattern_ops)")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _, _ in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("nodes", "0007_training_step_kind")]
    operations = [migrations.RunPython(create, drop)]
