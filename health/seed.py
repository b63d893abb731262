"""The XID catalog and the default health rules, put in place after every migrate (and
every flush, e.g. between transactional tests): missing rows are created, rows an
operator edited are left alone. Without them every XID would read "unknown, warning"."""
from __future__ import annotations

from typing import Any


def ensure_health_defaults(**kwargs: Any) -> None:
    """post_migrate receiver: create the missing XID definitions and default rule rows."""
    from . import ruleconfig, xid
    from .models import HealthRule, XidDefinition
    from .rules import REGISTRY

    known = set(XidDefinition.objects.values_list("xid", flat=True))
    XidDefinition.objects.bulk_create([XidDefinition(**row) for row in xid.read_catalog() if row["xid"] not in known])
    keys = set(HealthRule.objects.filter(hardware_profile__isnull=True).values_list("key", flat=True))
    HealthRule.objects.bulk_create([HealthRule(**spec.defaults()) for key, spec in REGISTRY.items() if key not in keys])
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()
