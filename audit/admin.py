"""Admin of the fleet auditor: runs are records, read only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from .models import AuditRun


@admin.register(AuditRun)
class AuditRunAdmin(admin.ModelAdmin[AuditRun]):
    list_display = ("started", "source", "breach_total", "raised", "cleared", "finished")
    list_filter = ("source",)
    date_hierarchy = "started"

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
