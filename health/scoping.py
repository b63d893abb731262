"""Which alerts and findings a user may see: those of the nodes ``nodes.scoping`` lets them see."""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from nodes.scoping import is_operator_view, visible_nodes

from .models import Alert, Finding


def visible_alerts(user: Any) -> QuerySet[Alert]:
    if is_operator_view(user):
        return Alert.objects.all()
    return Alert.objects.filter(node__in=visible_nodes(user))


def visible_findings(user: Any) -> QuerySet[Finding]:
    if is_operator_view(user):
        return Finding.objects.all()
    return Finding.objects.filter(node__in=visible_nodes(user))
