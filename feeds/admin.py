"""Admin of the event feed: subscriptions (deactivate) and the dead-letter list (redeliver)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from . import delivery
from .models import DeadLetter, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin[Subscription]):
    list_display = ["url", "tenant", "cluster", "active", "cursor", "failures", "delivered_count", "last_error"]
    list_filter = ["active"]
    list_select_related = ["tenant", "cluster"]
    raw_id_fields = ["created_by"]
    # Delivery state is the sweep's: editing it by hand would skip or repeat events.
    readonly_fields = [
        "cursor",
        "failures",
        "next_attempt_at",
        "lease_until",
        "last_error",
        "delivered_count",
        "last_delivered_at",
    ]


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin[DeadLetter]):
    list_display = ["event_id", "event_type", "subscription", "status", "attempts", "last_error", "updated"]
    list_filter = ["status", "event_type"]
    list_select_related = ["subscription"]
    actions = ["redeliver"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a dead letter is evidence: redeliver it, never edit it

    @admin.action(description="Redeliver (next sweep)")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        count = delivery.queue_redelivery(queryset.values_list("pk", flat=True))
        self.message_user(request, f"{count} dead letter(s) queued for redelivery.", messages.SUCCESS)
