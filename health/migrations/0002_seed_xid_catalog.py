"""Seed the XID catalog from health/data/xid_catalog.csv (rows an operator edited are kept)."""

from django.db import migrations


def seed(apps, schema_editor):
    from health.xid import read_catalog

    XidDefinition = apps.get_model("health", "XidDefinition")
    # Only the columns this migration's model has: later ones (gpu_reset, 0005) are filled by their own.
    known = {f.name for f in XidDefinition._meta.get_fields()}
    existing = set(XidDefinition.objects.values_list("xid", flat=True))
    XidDefinition.objects.bulk_create(
        [
            XidDefinition(**{k: v for k, v in row.items() if k in known})
            for row in read_catalog()
            if row["xid"] not in existing
        ]
    )


class Migration(migrations.Migration):
    dependencies = [("health", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
