"""Tenant scoping: the one place that decides which nodes a user may see.

Staff see the whole fleet. A customer's user sees only its tenant's nodes, and
anything else answers 404 (not 403), so other tenants' hostnames do not leak.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

# The tenant rules live with the tenants (fleet, below nodes); imported here so callers ask one module.
from fleet.scoping import is_operator_view, user_tenant_id, visible_tenants

from .models import Node, NodeEvent

__all__ = [
    "is_operator_view",
    "staff_only",
    "user_tenant_id",
    "visible_events",
    "visible_node_or_404",
    "visible_nodes",
    "visible_tenants",
]


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
