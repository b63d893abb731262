"""The XID catalog and the default health rules, put in place after every migrate (and
every flush, e.g. between transactional tests): missing rows are created, rows an
operator edited are left alone. Without them every XID would read "unknown, warning".

A catalog row an operator never edited follows ``health/data/xid_catalog.csv``: when a
new catalog changes its severity or action (XID 43 and 45 lost "check the application"
for NVIDIA's "no action"), the next migrate updates it and logs the change."""

from __future__ import annotations

from typing import Any


def ensure_health_defaults(**kwargs: Any) -> None:
    """post_migrate receiver: create the missing XID definitions and default rule rows."""
    from . import ruleconfig, xid
    from .models import HealthRule, XidDefinition
    from .rules import REGISTRY

    catalog = list(xid.read_catalog())
    known = set(XidDefinition.objects.values_list("xid", flat=True))
    XidDefinition.objects.bulk_create([XidDefinition(**row) for row in catalog if row["xid"] not in known])
    refresh_unedited_xids(catalog)
    keys = set(HealthRule.objects.filter(hardware_profile__isnull=True).values_list("key", flat=True))
    HealthRule.objects.bulk_create([HealthRule(**spec.defaults()) for key, spec in REGISTRY.items() if key not in keys])
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()


CATALOG_FIELDS = ("severity", "recommended_action", "nvidia_bucket", "gpu_reset")


def refresh_unedited_xids(catalog: list[dict[str, Any]]) -> int:
    """Bring XID definitions no operator edited in line with ``catalog``; one change-log row
    per updated XID (actor: the catalog). Returns how many were updated."""
    from django.db import transaction

    from .models import HealthRuleChange, XidDefinition

    rows = {row["xid"]: row for row in catalog}
    updated = 0
    with transaction.atomic():
        for definition in XidDefinition.objects.filter(edited_at__isnull=True, xid__in=list(rows)).order_by("xid"):
            row = rows[definition.xid]
            changes = {f: [getattr(definition, f), row[f]] for f in CATALOG_FIELDS if getattr(definition, f) != row[f]}
            if not changes:
                continue
            for name, (_old, new) in changes.items():
                setattr(definition, name, new)
            definition.save(update_fields=list(changes))
            HealthRuleChange.objects.create(
                xid=definition,
                target=f"XID {definition.xid}",
                actor=None,
                actor_name="xid catalog",
                reason="health/data/xid_catalog.csv changed (NVIDIA's recommended action); this row was never edited",
                changes=changes,
            )
            updated += 1
    return updated
