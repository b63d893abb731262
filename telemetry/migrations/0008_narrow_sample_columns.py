"""Narrow the sample history's columns (issue 17: a year of 100,000 nodes on disk).

Readings become 4-byte ``real``, clocks and memory ``integer``, PCIe link figures ``smallint``,
in GpuSample and GpuSampleHourly. On PostgreSQL each table is rewritten once, by one ALTER TABLE
changing all its columns (Django's AlterFields would rewrite it once per column); on a partitioned
table the parent's ALTER reaches every partition. A value too wide for its new column (only an
absurd one: the schema now refuses them) becomes NULL rather than failing the migration. Elsewhere
(SQLite) the declared types change nothing stored: only the state moves.
"""

from django.db import migrations, models

import telemetry.models

INT_MAX, SMALLINT_MAX = 2_147_483_647, 32_767
COLUMNS = {
    "telemetry_gpusample": {
        "temperature_c": "real",
        "hbm_temperature_c": "real",
        "power_w": "real",
        "utilization_pct": "real",
        "sm_clock_mhz": "integer",
        "memory_used_mib": "integer",
        "pcie_link_gen": "smallint",
        "pcie_link_width": "smallint",
    },
    "telemetry_gpusamplehourly": {
        "temperature_avg": "real",
        "temperature_max": "real",
        "hbm_temperature_max": "real",
        "power_avg": "real",
        "power_max": "real",
        "utilization_avg": "real",
        "memory_used_max": "integer",
        "pcie_link_gen_min": "smallint",
        "pcie_link_width_min": "smallint",
    },
}
_BOUND = {"integer": INT_MAX, "smallint": SMALLINT_MAX}


def _alter(schema_editor, wide: bool) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, columns in COLUMNS.items():
        clauses = []
        for column, narrow in columns.items():
            if wide:
                clauses.append(f"ALTER COLUMN {column} TYPE {'double precision' if narrow == 'real' else 'bigint'}")
            elif narrow == "real":
                clauses.append(f"ALTER COLUMN {column} TYPE real")
            else:
                bound = _BOUND[narrow]
                clauses.append(
                    f"ALTER COLUMN {column} TYPE {narrow} USING "
                    f"CASE WHEN {column} BETWEEN 0 AND {bound} THEN {column} END"
                )
        schema_editor.execute(f"ALTER TABLE {table} {', '.join(clauses)}")


def narrow(apps, schema_editor):
    _alter(schema_editor, wide=False)


def widen(apps, schema_editor):
    _alter(schema_editor, wide=True)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0007_agentcommand_answer_by"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(narrow, widen)],
            state_operations=[
                migrations.AlterField(
                    model_name="gpusample",
                    name="hbm_temperature_c",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="memory_used_mib",
                    field=models.IntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="pcie_link_gen",
                    field=models.SmallIntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="pcie_link_width",
                    field=models.SmallIntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="power_w",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="sm_clock_mhz",
                    field=models.IntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="temperature_c",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusample",
                    name="utilization_pct",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="hbm_temperature_max",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="memory_used_max",
                    field=models.IntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="pcie_link_gen_min",
                    field=models.SmallIntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="pcie_link_width_min",
                    field=models.SmallIntegerField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="power_avg",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="power_max",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="temperature_avg",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="temperature_max",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
                migrations.AlterField(
                    model_name="gpusamplehourly",
                    name="utilization_avg",
                    field=telemetry.models.RealField(blank=True, null=True),
                ),
            ],
        ),
    ]
