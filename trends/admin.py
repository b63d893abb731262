"""Admin of trends: flags and runs are what the daily evaluation found (read-only)."""

from __future__ import annotations

from django.contrib import admin

from nodewarden.records import ReadOnlyAdmin

from .models import TrendFlag, TrendRun


@admin.register(TrendFlag)
class TrendFlagAdmin(ReadOnlyAdmin):
    list_display = ["id", "node", "kind", "figure", "score", "created", "updated", "cleared_at"]
    list_filter = ["kind", "figure", "cleared_at"]
    list_select_related = ["node"]
    search_fields = ["node__hostname"]
    raw_id_fields = ["node", "finding"]


@admin.register(TrendRun)
class TrendRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "started", "finished", "nodes", "opened", "refreshed", "cleared"]
