"""Which alerts and findings a user may see: those of the nodes ``nodes.scoping`` lets them see.

A customer does not see the fleet auditor's findings (``audit.*``): they say that Nodewarden's books
and its scheduler or BMC disagree, which is the operators' to put right, not a fact about the node."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from nodes.scoping import is_operator_view, visible_nodes

from .models import Alert, Finding

INTERNAL_PREFIX = "audit."  # the fleet auditor's rules (audit.invariants)


def visible_alerts(user: Any) -> QuerySet[Alert]:
    if is_operator_view(user):
        return Alert.objects.all()
    return Alert.objects.filter(node__in=visible_nodes(user)).exclude(rule__startswith=INTERNAL_PREFIX)


def visible_findings(user: Any) -> QuerySet[Finding]:
    if is_operator_view(user):
        return Finding.objects.all()
    return Finding.objects.filter(node__in=visible_nodes(user)).exclude(rule__startswith=INTERNAL_PREFIX)
