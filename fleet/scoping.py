"""Tenant scoping of the fleet's own records: who is staff, which tenant a user belongs to,
and which tenants a user may see. ``nodes.scoping`` builds the node rules on these."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from .models import Tenant


def user_tenant_id(user: Any) -> int | None:
    """The tenant of the user's membership; None for staff and users without one."""
    membership = getattr(user, "tenant_membership", None)
    return membership.tenant_id if membership is not None else None


def is_operator_view(user: Any) -> bool:
    """Staff see everything; everyone else is scoped to a tenant."""
    return bool(user.is_authenticated and user.is_staff)


def visible_tenants(user: Any) -> QuerySet[Tenant]:
    """Every tenant for staff; a customer's user sees only its own."""
    if is_operator_view(user):
        return Tenant.objects.all()
    tenant_id = user_tenant_id(user) if user.is_authenticated else None
    return Tenant.objects.filter(pk=tenant_id) if tenant_id else Tenant.objects.none()
