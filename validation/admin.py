"""Admin for Day 1 configuration: thresholds per hardware profile, plans per re-entry reason."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import Day1Spec, PersonaChange, RevalidationPlan


@admin.register(Day1Spec)
class Day1SpecAdmin(admin.ModelAdmin[Day1Spec]):
    list_display = (
        "hardware_profile",
        "burn_in_seconds",
        "min_tflops_per_gpu",
        "dcgm_level",
        "min_busbw_gbps",
        "soak_seconds",
        "stage_timeout_seconds",
    )
    list_select_related = ("hardware_profile",)


@admin.register(RevalidationPlan)
class RevalidationPlanAdmin(admin.ModelAdmin[RevalidationPlan]):
    list_display = ("reentry", "stages", "note")


@admin.register(PersonaChange)
class PersonaChangeAdmin(admin.ModelAdmin[PersonaChange]):
    """Read-only: re-roles go through the API (validation.personas), which keeps the history."""

    list_display = ("node", "from_persona", "to_persona", "status", "requested_by", "created", "finished_at")
    list_filter = ("status",)
    list_select_related = ("node", "from_persona", "to_persona")
    raw_id_fields = ("node",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
