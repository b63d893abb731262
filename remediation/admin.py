"""Admin of remediation: policies, maintenance windows and blast-radius limits are
configuration (editable); holds are placed and released through ``remediation.services``
(only an active hold's end can be edited); circuit breakers are read-only with a "reset"
action that asks for a reason; remediations and their steps are history (read-only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from nodes.models import OPERATE
from nodes.services import Actor
from nodewarden.admin_actions import reason_or_page
from nodewarden.errors import ReasonRequired
from nodewarden.records import ReadOnlyAdmin

from . import services
from .machine import RemediationConflict
from .models import (
    BlastRadiusLimit,
    CircuitBreaker,
    Hold,
    MaintenanceWindow,
    Remediation,
    RemediationPolicy,
    RemediationStep,
)

TARGETS = ("node", "cluster", "rack", "tenant")


def _with_reason(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    title: str,
    button: str,
    verb: Callable[[int, Actor, str], object],
) -> HttpResponse | None:
    """Ask for a reason (an intermediate page), then run ``verb`` on each selected row."""
    reason, page = reason_or_page(modeladmin, request, queryset, title=title, button=button)
    if reason is None:
        return page  # the page asking for a reason
    done = 0
    for pk in queryset.values_list("pk", flat=True):
        try:
            verb(pk, Actor(user=request.user), reason)
            done += 1
        except (ReasonRequired, RemediationConflict, services.RemediationForbidden) as exc:
            modeladmin.message_user(request, f"#{pk}: {exc}", messages.ERROR)
    modeladmin.message_user(request, f"{done} done.")
    return None


@admin.register(RemediationPolicy)
class RemediationPolicyAdmin(admin.ModelAdmin[RemediationPolicy]):
    """Which findings lead to which plan, first match by priority (lowest first)."""

    list_display = [
        "name",
        "enabled",
        "priority",
        "match_rule",
        "match_xid",
        "match_severity",
        "match_component",
        "urgency",
        "first_rung",
        "requires_approval",
        "disruptive_only_in_window",
        "stand_down_if_cleared",
        "shadow",
    ]
    list_display_links = ["name"]
    list_editable = ["enabled"]
    list_filter = ["enabled", "urgency", "first_rung", "requires_approval", "shadow"]
    ordering = ["priority", "name"]
    search_fields = ["name", "match_rule", "match_component"]


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(admin.ModelAdmin[MaintenanceWindow]):
    list_display = ["id", "cluster", "weekdays", "start_hour", "end_hour"]
    list_select_related = ["cluster"]


@admin.register(BlastRadiusLimit)
class BlastRadiusLimitAdmin(admin.ModelAdmin[BlastRadiusLimit]):
    list_display = ["domain", "max_share", "max_count", "max_drains_per_hour"]


class HoldForm(forms.ModelForm[Hold]):
    class Meta:
        model = Hold
        fields = [*TARGETS, "reason", "until"]
        help_texts = {"node": "One target, or none for the whole fleet."}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if sum(data.get(name) is not None for name in TARGETS) > 1:
            raise forms.ValidationError("A hold has one target: a node, cluster, rack or tenant (none: the fleet).")
        return data


@admin.register(Hold)
class HoldAdmin(admin.ModelAdmin[Hold]):
    """Holds are placed through ``place_hold`` (kept on the node's history) and released with a reason."""

    form = HoldForm
    list_display = [
        "id",
        "node",
        "cluster",
        "rack",
        "tenant",
        "reason",
        "actor_name",
        "created",
        "until",
        "released_at",
    ]
    list_filter = ["released_at"]
    list_select_related = ["node", "cluster", "rack", "tenant"]
    search_fields = ["node__hostname", "cluster__name", "reason", "actor_name"]
    raw_id_fields = ["node"]
    actions = ["release_action"]

    def get_readonly_fields(self, request: HttpRequest, obj: Hold | None = None) -> list[str]:
        if obj is None:
            return []
        # Target and reason are what the hold was placed for; only its end may move.
        frozen = [*TARGETS, "reason", "actor_name", "created", "released_at", "released_reason"]
        return frozen + (["until"] if obj.released_at else [])

    def get_fields(self, request: HttpRequest, obj: Hold | None = None) -> tuple[str, ...]:
        if obj is None:
            return (*TARGETS, "reason", "until")
        return (*TARGETS, "reason", "actor_name", "created", "until", "released_at", "released_reason")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and request.user.has_perm(OPERATE)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # released, never deleted: the hold explains why nothing happened

    def save_model(self, request: HttpRequest, obj: Hold, form: forms.ModelForm[Hold], change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        hold = services.place_hold(
            actor=Actor(user=request.user),
            reason=obj.reason,
            until=obj.until,
            **{f"{name}_id": getattr(obj, f"{name}_id") for name in TARGETS},
        )
        obj.pk, obj.actor_name, obj.created = hold.pk, hold.actor_name, hold.created

    @admin.action(description="Release (reason required)")
    def release_action(self, request: HttpRequest, queryset: QuerySet[Hold]) -> HttpResponse | None:
        return _with_reason(
            self,
            request,
            queryset.filter(released_at__isnull=True),
            title="Release holds",
            button="Release holds",
            verb=lambda pk, actor, reason: services.release_hold(pk, actor=actor, reason=reason),
        )


@admin.register(CircuitBreaker)
class CircuitBreakerAdmin(ReadOnlyAdmin):
    """Tripped by a spike of findings; reset only through ``reset_breaker``, with a reason."""

    list_display = ["id", "cluster", "tripped_at", "reason", "reset_at", "reset_by", "reset_reason"]
    list_filter = ["reset_at"]
    list_select_related = ["cluster"]
    actions = ["reset_action"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and request.user.has_perm(OPERATE)  # the changelist, for the action

    @admin.action(description="Reset (reason required): automated actions resume in the cluster")
    def reset_action(self, request: HttpRequest, queryset: QuerySet[CircuitBreaker]) -> HttpResponse | None:
        return _with_reason(
            self,
            request,
            queryset.filter(reset_at__isnull=True),
            title="Reset circuit breakers",
            button="Reset breakers",
            verb=lambda pk, actor, reason: services.reset_breaker(pk, actor=actor, reason=reason),
        )


class StepInline(admin.TabularInline[RemediationStep, Remediation]):
    model = RemediationStep
    fields = ("rung", "status", "started", "finished", "deadline", "attempts", "detail")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False


@admin.register(Remediation)
class RemediationAdmin(ReadOnlyAdmin):
    """History: operators approve, skip and stop on the node page or through the API."""

    list_display = ["id", "node", "status", "rung", "urgency", "policy", "created", "finished"]
    list_filter = ["status", "rung", "urgency"]
    list_select_related = ["node", "policy"]
    search_fields = ["node__hostname", "queued_reason"]
    raw_id_fields = ["node", "finding", "policy"]
    date_hierarchy = "created"
    inlines = [StepInline]


@admin.register(RemediationStep)
class RemediationStepAdmin(ReadOnlyAdmin):
    list_display = ["id", "remediation", "rung", "status", "started", "finished", "attempts"]
    list_filter = ["status", "rung"]
    list_select_related = ["remediation__node"]
    search_fields = ["remediation__node__hostname", "detail"]
    raw_id_fields = ["remediation"]
