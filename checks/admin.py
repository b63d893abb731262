"""Recorded runs are written by workers and node agents; admin only reads them."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from nodes.models import Run

from .models import FreshnessTarget
from .specs import describe_figures


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = ["created", "node", "kind", "status", "figures_text", "summary", "started", "finished"]
    list_filter = ["kind", "status"]
    list_select_related = ["node"]
    search_fields = ["node__hostname", "summary", "task_id"]
    raw_id_fields = ["node", "trigger", "requested_by"]
    readonly_fields = ["figures", "params", "figures_text"]

    @admin.display(description="Figures")
    def figures_text(self, obj: Run) -> str:
        return describe_figures(obj.kind, obj.figures)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(FreshnessTarget)
class FreshnessTargetAdmin(admin.ModelAdmin[FreshnessTarget]):
    """Per-profile overrides of the default freshness targets (checks.freshness.DEFAULT_TARGETS)."""

    list_display = ["profile", "kind", "max_age"]
    list_editable = ["max_age"]
    list_filter = ["profile", "kind"]
    list_select_related = ["profile"]
