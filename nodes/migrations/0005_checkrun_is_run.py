"""CheckRun is Run: the record of every background run (active checks, Day 1 stages, follow-ups),
so "check" names only the active checks. The table keeps its name (``checks_checkrun``, set in
Meta), so the rename changes Django's bookkeeping only; the node's reverse accessor is ``runs``."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0004_checkrun_moved_from_checks"),
    ]

    operations = [
        migrations.RenameModel(old_name="CheckRun", new_name="Run"),
        migrations.AlterField(
            model_name="run",
            name="node",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="runs", to="nodes.node"),
        ),
    ]
