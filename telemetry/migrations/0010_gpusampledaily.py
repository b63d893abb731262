"""GpuSampleDaily: hourly roll-ups past TELEMETRY_HOURLY_RETENTION_DAYS, one row per GPU and day (issue 17).

A BRIN index on the day, PostgreSQL only, as the other history tables have (migration 0004): the
retention beat prunes by time alone. On an install partitioned already, ``manage.py
telemetry_partitioning --apply`` partitions this table too (it partitions those not yet partitioned).
"""

import django.db.models.deletion
from django.db import migrations, models

import telemetry.models

BRIN = "CREATE INDEX IF NOT EXISTS telemetry_gpusampledaily_time_brin ON telemetry_gpusampledaily USING brin (day)"


def create_brin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BRIN)


def drop_brin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS telemetry_gpusampledaily_time_brin")


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0010_maintenance_state"),
        ("telemetry", "0009_sample_index_not_primary_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="GpuSampleDaily",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "node", "day", "gpu_index", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("day", models.DateTimeField(help_text="midnight UTC of the day")),
                ("gpu_index", models.PositiveSmallIntegerField()),
                ("n", models.PositiveIntegerField()),
                ("temperature_avg", telemetry.models.RealField(blank=True, null=True)),
                ("temperature_max", telemetry.models.RealField(blank=True, null=True)),
                ("hbm_temperature_max", telemetry.models.RealField(blank=True, null=True)),
                ("power_avg", telemetry.models.RealField(blank=True, null=True)),
                ("power_max", telemetry.models.RealField(blank=True, null=True)),
                ("utilization_avg", telemetry.models.RealField(blank=True, null=True)),
                ("memory_used_max", models.IntegerField(blank=True, null=True)),
                ("ecc_volatile_corrected_max", models.BigIntegerField(blank=True, null=True)),
                ("ecc_volatile_uncorrected_max", models.BigIntegerField(blank=True, null=True)),
                ("ecc_aggregate_corrected_max", models.BigIntegerField(blank=True, null=True)),
                ("ecc_aggregate_uncorrected_max", models.BigIntegerField(blank=True, null=True)),
                ("remapped_rows_correctable_max", models.BigIntegerField(blank=True, null=True)),
                ("remapped_rows_uncorrectable_max", models.BigIntegerField(blank=True, null=True)),
                ("nvlink_crc_errors_max", models.BigIntegerField(blank=True, null=True)),
                ("nvlink_replay_errors_max", models.BigIntegerField(blank=True, null=True)),
                ("nvlink_recovery_errors_max", models.BigIntegerField(blank=True, null=True)),
                ("pcie_replay_count_max", models.BigIntegerField(blank=True, null=True)),
                ("pcie_link_gen_min", models.SmallIntegerField(blank=True, null=True)),
                ("pcie_link_width_min", models.SmallIntegerField(blank=True, null=True)),
                ("load_n", models.PositiveIntegerField(default=0, help_text="samples in hours under load")),
                ("load_temperature_avg", telemetry.models.RealField(blank=True, null=True)),
                (
                    "node",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="nodes.node",
                    ),
                ),
            ],
            options={
                "verbose_name": "GPU sample (daily)",
                "verbose_name_plural": "GPU samples (daily)",
            },
        ),
        migrations.RunPython(create_brin, drop_brin),
    ]
