"""Which tickets and cases a user may see: those of the nodes they may see (nodes.scoping).
Staff see all; a customer sees its tenant's nodes' records, read-only; others answer 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from nodes.scoping import is_operator_view, visible_nodes

from .models import RepairTicket, RmaCase


def visible_tickets(user: Any) -> QuerySet[RepairTicket]:
    if is_operator_view(user):
        return RepairTicket.objects.all()
    return RepairTicket.objects.filter(node__in=visible_nodes(user))


def visible_cases(user: Any) -> QuerySet[RmaCase]:
    if is_operator_view(user):
        return RmaCase.objects.all()
    return RmaCase.objects.filter(node__in=visible_nodes(user))
