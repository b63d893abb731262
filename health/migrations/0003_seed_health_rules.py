"""Create the default row of every rule in the registry (health.rules), with domain-facts.md defaults.

Existing rows are left alone, so operators' edits survive; a rule added to the code later
runs on its code defaults until a migration like this one creates its row.
"""

from django.db import migrations


def seed(apps, schema_editor):
    from health.rules import REGISTRY

    HealthRule = apps.get_model("health", "HealthRule")
    existing = set(HealthRule.objects.filter(hardware_profile__isnull=True).values_list("key", flat=True))
    HealthRule.objects.bulk_create(
        [HealthRule(**spec.defaults()) for key, spec in REGISTRY.items() if key not in existing]
    )


class Migration(migrations.Migration):
    dependencies = [("health", "0002_seed_xid_catalog")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
