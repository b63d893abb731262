"""Tenant scoping: the one place that decides which nodes a user may see.

Staff see the whole fleet. A customer's user sees only its tenant's nodes, and
anything else answers 404 (not 403), so other tenants' hostnames do not leak.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from fleet.models import Tenant

from .models import Node, NodeEvent


def user_tenant_id(user: Any) -> int | None:
    membership = getattr(user, "tenant_membership", None)
    return membership.tenant_id if membership is not None else None


def is_operator_view(user: Any) -> bool:
    """Staff see everything; everyone else is scoped to a tenant."""
    return bool(user.is_authenticated and user.is_staff)


def visible_nodes(user: Any) -> QuerySet[Node]:
    if is_operator_view(user):
        return Node.objects.all()
    tenant_id = user_tenant_id(user) if user.is_authenticated else None
    if tenant_id is None:
        return Node.objects.none()
    return Node.objects.filter(tenant_id=tenant_id)


def visible_events(user: Any) -> QuerySet[NodeEvent]:
    if is_operator_view(user):
        return NodeEvent.objects.all()
    return NodeEvent.objects.filter(node__in=visible_nodes(user))


def visible_tenants(user: Any) -> QuerySet[Tenant]:
    if is_operator_view(user):
        return Tenant.objects.all()
    tenant_id = user_tenant_id(user) if user.is_authenticated else None
    return Tenant.objects.filter(pk=tenant_id) if tenant_id else Tenant.objects.none()


def visible_node_or_404(user: Any, pk: int) -> Node:
    """The node if this user may see it; 404 otherwise (never 403: existence is not leaked)."""
    from django.shortcuts import get_object_or_404

    return get_object_or_404(visible_nodes(user).select_related("hardware_profile"), pk=pk)


def staff_only(view: Any) -> Any:
    """A page for staff only: log in first; anyone else gets 404, so fleet-wide pages
    (fabric, remediation, trends, reports) do not even show customers that they exist."""
    from functools import wraps

    from django.contrib.auth.decorators import login_required
    from django.http import Http404

    @wraps(view)
    def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_operator_view(request.user):
            raise Http404("No such page")
        return view(request, *args, **kwargs)

    return login_required(wrapper)
