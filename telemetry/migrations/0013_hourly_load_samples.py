"""Hourly roll-ups count their samples under load one by one (load_n, load_temperature_avg), so that
the trends read a packed hour's roll-up instead of decoding its pack. Nullable, no default, no
CHECK: adding them is a catalogue change on PostgreSQL, however many hours the table holds; rows
rolled up before stay NULL and readers fall back to the hour's averages."""

from django.db import migrations, models

import telemetry.models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0012_gpustate_hot_updates"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpusamplehourly",
            name="load_n",
            field=models.IntegerField(
                blank=True, help_text="samples at LOAD_UTILIZATION_PCT or busier, with a temperature", null=True
            ),
        ),
        migrations.AddField(
            model_name="gpusamplehourly",
            name="load_temperature_avg",
            field=telemetry.models.RealField(blank=True, null=True),
        ),
    ]
