"""Admin: tickets, cases and their history are read-only (they change only through
``repairs.services``, from the portal or the API); webhook endpoints are editable; failed
deliveries get a "retry now" action."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from nodes.models import OPERATE
from nodewarden.records import ReadOnlyAdmin

from . import webhooks
from .choices import WebhookEvent
from .models import RepairEvent, RepairTicket, RmaCase, WebhookDelivery, WebhookEndpoint


class EventInline(admin.TabularInline[RepairEvent, Any]):
    model = RepairEvent
    extra = 0
    can_delete = False
    fields = readonly_fields = ("created", "verb", "from_state", "to_state", "actor_name", "reason")
    ordering = ["created", "id"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TicketEventInline(EventInline):
    fk_name = "ticket"


class CaseEventInline(EventInline):
    fk_name = "rma_case"


@admin.register(RepairTicket)
class RepairTicketAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "hostname",
        "component",
        "state",
        "site",
        "rack",
        "rack_unit",
        "assignee",
        "created",
        "resolved_at",
    ]
    list_filter = ["state", "site"]
    search_fields = ["hostname", "component", "what", "assignee"]
    date_hierarchy = "created"
    raw_id_fields = ["node", "opened_by"]
    inlines = [TicketEventInline]


@admin.register(RmaCase)
class RmaCaseAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "hostname",
        "vendor",
        "part",
        "failed_serial",
        "replacement_serial",
        "vendor_case_number",
        "state",
        "outcome",
        "created",
    ]
    list_filter = ["state", "outcome", "vendor"]
    search_fields = ["hostname", "vendor", "part", "failed_serial", "replacement_serial", "vendor_case_number"]
    date_hierarchy = "created"
    raw_id_fields = ["node", "opened_by"]
    inlines = [CaseEventInline]


@admin.register(RepairEvent)
class RepairEventAdmin(ReadOnlyAdmin):
    list_display = [
        "created",
        "ticket",
        "rma_case",
        "hostname",
        "verb",
        "from_state",
        "to_state",
        "actor_name",
        "reason",
    ]
    list_filter = ["verb", "to_state"]
    list_select_related = ["ticket", "rma_case"]
    search_fields = ["hostname", "actor_name", "reason"]


class WebhookEndpointForm(forms.ModelForm[WebhookEndpoint]):
    url = forms.URLField(max_length=500, assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices, widget=forms.CheckboxSelectMultiple, required=False
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["name", "url", "secret", "events", "active"]
        widgets = {"secret": forms.PasswordInput(render_value=True)}


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin[WebhookEndpoint]):
    form = WebhookEndpointForm
    list_display = ["name", "url", "active", "created"]
    list_filter = ["active"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created",
        "endpoint",
        "event",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "last_error",
    ]
    list_filter = ["status", "event", "endpoint"]
    list_select_related = ["endpoint"]
    actions = ["retry_now"]

    @admin.action(description="Retry now (a fresh set of attempts)", permissions=["retry"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = webhooks.retry_now(queryset.values_list("pk", flat=True))
        messages.success(request, f"{count} deliver{'y' if count == 1 else 'ies'} queued again.")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(OPERATE)
