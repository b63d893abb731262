"""Who may call which REST endpoint: the only DRF permission classes of the portal.

Next to ``nodes.scoping`` (which rows a user sees) because the two are one policy:

- staff (operators, viewers) see the whole fleet; a customer's user sees its tenant's nodes and the
  records about them, and anything else answers 404, never 403, so its existence does not leak;
- writes need the operate permission (``nodes.operate_node``), checked after the lookup, so a row
  the user cannot see answers 404 before a row the user cannot change answers 403;
- node agents authenticate with their own token and reach only the agent endpoints.

A view may set ``permission_denied_message`` to say in its own words what was refused.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, permissions
from rest_framework.request import Request

from .models import OPERATE
from .scoping import is_operator_view


class _Permission(permissions.BasePermission):
    message = "You may not operate nodes."

    def refuse(self, view: Any) -> bool:
        # DRF builds the permissions per request, so the instance may carry the view's wording.
        self.message = getattr(view, "permission_denied_message", self.message)
        return False


def _signed_in(request: Request) -> bool:
    return bool(request.user and request.user.is_authenticated)


def _writes_allowed(request: Request, view: Any) -> bool:
    """Reads, a method the view does not have (it answers 405 itself), or the operate permission."""
    method = request.method or "GET"
    return (
        method in permissions.SAFE_METHODS
        or getattr(view, method.lower(), None) is None
        or request.user.has_perm(OPERATE)
    )


class IsNodeAgent(_Permission):
    """Only an authenticated node agent (not a portal user) may call agent endpoints."""

    message = "This endpoint is for node agents: authenticate with 'Authorization: Bearer nwa_...'."

    def has_permission(self, request: Request, view: Any) -> bool:
        # telemetry.auth.AgentIdentity says so; a portal user never does.
        return bool(getattr(request.user, "is_node_agent", False)) or self.refuse(view)


class CanOperate(_Permission):
    """A signed-in user (a person or a service account, e.g. Alertmanager's) with the operate permission."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return (_signed_in(request) and request.user.has_perm(OPERATE)) or self.refuse(view)


class IsStaffOperator(CanOperate):
    """Staff with the operate permission: fleet-wide writes that name nodes of any tenant."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return (_signed_in(request) and request.user.is_staff and super().has_permission(request, view)) or (
            self.refuse(view)
        )


class CanOperateObject(_Permission):
    """Reads for whoever sees the object (the view's queryset is scoped); writes need the operate
    permission, checked per object, i.e. after the lookup (404 before 403)."""

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        return _writes_allowed(request, view) or self.refuse(view)


class StaffOnly(_Permission):
    """Staff business (fabric, holds and breakers, trends): anyone else is told it does not exist
    (404, as for another tenant's node); writes need the operate permission."""

    customer_view = "absent"  # nodewarden/openapi.py marks these operations so in the schema

    def has_permission(self, request: Request, view: Any) -> bool:
        if not _signed_in(request):
            return False
        if not is_operator_view(request.user):
            raise exceptions.NotFound()
        return _writes_allowed(request, view) or self.refuse(view)


class CanOperateOrOwnTenant(_Permission):
    """Records a customer keeps about its own tenant (e.g. event-feed subscriptions): reads for
    whoever is signed in (the view's queryset is scoped); writes need the operate permission from
    staff, while a customer's user writes for its own tenant only (the service binds it)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not _signed_in(request):
            return False
        return not is_operator_view(request.user) or _writes_allowed(request, view) or self.refuse(view)
