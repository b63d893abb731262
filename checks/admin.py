"""Recorded runs are written by workers; admin only reads them."""
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import CheckRun


@admin.register(CheckRun)
class CheckRunAdmin(admin.ModelAdmin):
    list_display = ["created", "node", "kind", "status", "summary", "started", "finished"]
    list_filter = ["kind", "status"]
    list_select_related = ["node"]
    search_fields = ["node__hostname", "summary", "task_id"]
    raw_id_fields = ["node", "trigger"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
