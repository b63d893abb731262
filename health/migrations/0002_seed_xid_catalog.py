"""Seed the XID catalog from health/data/xid_catalog.csv (rows an operator edited are kept)."""

from django.db import migrations


def seed(apps, schema_editor):
    from health.xid import read_catalog

    XidDefinition = apps.get_model("health", "XidDefinition")
    existing = set(XidDefinition.objects.values_list("xid", flat=True))
    XidDefinition.objects.bulk_create([XidDefinition(**row) for row in read_catalog() if row["xid"] not in existing])


class Migration(migrations.Migration):
    dependencies = [("health", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
