"""Admin of the fabric: devices are editable (role, rack, node); plans, runs, discrepancies,
counter snapshots, flaps and manual validations are history (read-only); tickets are
read-only with a "close" action that asks for a reason and goes through ``fabric.services``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from nodes.models import OPERATE
from nodes.services import Actor
from nodewarden.admin_actions import reason_or_page
from nodewarden.errors import ReasonRequired
from nodewarden.records import ReadOnlyAdmin

from . import services
from .models import (
    CablingPlan,
    DiscoveryRun,
    Discrepancy,
    FabricDevice,
    LinkFlap,
    ManualValidation,
    PortCounterSnapshot,
    Ticket,
)


@admin.register(FabricDevice)
class FabricDeviceAdmin(admin.ModelAdmin[FabricDevice]):
    """Where a device is and whose it is; what the fabric says of it (name, GUID, seen) is read-only."""

    list_display = ["name", "kind", "role", "rack", "node", "in_plan", "guid", "last_seen"]
    list_filter = ["kind", "role", "in_plan"]
    list_select_related = ["node"]
    search_fields = ["name", "guid", "rack", "node__hostname"]
    raw_id_fields = ["node"]
    fields = ["name", "kind", "role", "rack", "node", "guid", "in_plan", "last_seen"]
    readonly_fields = ["name", "kind", "guid", "in_plan", "last_seen"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # devices come from plans and discovery

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # plans and history point at them


@admin.register(CablingPlan)
class CablingPlanAdmin(ReadOnlyAdmin):
    list_display = ["id", "created", "links", "actor_name", "source", "note"]
    search_fields = ["source", "note", "actor_name"]


@admin.register(DiscoveryRun)
class DiscoveryRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "started", "source", "status", "devices", "links", "actor_name", "plan"]
    list_filter = ["source", "status"]
    date_hierarchy = "started"


@admin.register(Discrepancy)
class DiscrepancyAdmin(ReadOnlyAdmin):
    list_display = ["run", "kind", "a_endpoint", "b_endpoint", "expected", "found", "ticket"]
    list_filter = ["kind"]
    list_select_related = ["run", "ticket"]
    search_fields = ["a_endpoint", "b_endpoint", "key"]
    raw_id_fields = ["run", "ticket"]


@admin.register(PortCounterSnapshot)
class PortCounterSnapshotAdmin(ReadOnlyAdmin):
    list_display = ["taken_at", "device", "port", "run"]
    list_select_related = ["device"]
    search_fields = ["device__name"]
    raw_id_fields = ["run", "device"]


@admin.register(LinkFlap)
class LinkFlapAdmin(ReadOnlyAdmin):
    list_display = ["observed_at", "device", "port", "count", "run"]
    list_select_related = ["device"]
    search_fields = ["device__name"]
    raw_id_fields = ["run", "device"]


@admin.register(ManualValidation)
class ManualValidationAdmin(ReadOnlyAdmin):
    list_display = ["created", "actor_name", "scope", "result"]
    list_filter = ["result"]
    search_fields = ["scope", "notes", "actor_name"]


@admin.register(Ticket)
class TicketAdmin(ReadOnlyAdmin):
    list_display = ["id", "title", "kind", "status", "opened_at", "times_seen", "closed_at"]
    list_filter = ["status", "kind"]
    search_fields = ["title", "key"]
    raw_id_fields = ["first_run", "last_run"]
    actions = ["close_action"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and request.user.has_perm(OPERATE)  # the changelist, for the action

    @admin.action(description="Close (reason required; the next run reopens a persisting problem)")
    def close_action(self, request: HttpRequest, queryset: QuerySet[Ticket]) -> HttpResponse | None:
        reason, page = reason_or_page(
            self,
            request,
            queryset,
            title="Close fabric tickets",
            button="Close tickets",
            intro="Your name and your reason are kept with each ticket and on its nodes' histories. "
            "A problem that persists is reopened by the next run.",
        )
        if reason is None:
            return page  # the page asking for a reason
        closed = 0
        for pk in queryset.filter(status="open").values_list("pk", flat=True):
            try:
                services.close_ticket(pk, actor=Actor(user=request.user), reason=reason)
                closed += 1
            except ReasonRequired as exc:
                self.message_user(request, f"Ticket {pk}: {exc}", messages.ERROR)
        self.message_user(request, f"{closed} ticket(s) closed.")
        return None
