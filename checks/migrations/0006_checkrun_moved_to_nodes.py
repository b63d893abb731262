"""CheckRun moved to the nodes app (nodes 0004): state only, the table stays as it is."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("checks", "0005_checkrun_scheduler_hold"),
        ("nodes", "0004_checkrun_moved_from_checks"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="CheckRun")],
        ),
    ]
