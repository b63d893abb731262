"""Admin for the fleet inventory."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from .models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant, TenantMembership
from .schedulerkinds import scheduler_kind_choices


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin[Site]):
    list_display = ["name", "slug", "location"]
    search_fields = ["name", "slug", "location"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin[Cluster]):
    list_display = ["name", "site", "scheduler_kind", "scheduler_endpoint"]
    list_filter = ["site", "scheduler_kind"]
    list_select_related = ["site"]
    search_fields = ["name"]

    def formfield_for_dbfield(self, db_field: models.Field[Any, Any], request: HttpRequest, **kwargs: Any) -> Any:
        # The field has no choices (kinds are registered at start-up): offer the registered ones.
        # A posted value outside them fails the form, and the model's validator says which exist.
        if db_field.name == "scheduler_kind":
            return forms.ChoiceField(
                choices=scheduler_kind_choices(), initial=db_field.default, help_text=db_field.help_text
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin[Rack]):
    list_display = ["name", "site"]
    list_filter = ["site"]
    list_select_related = ["site"]
    search_fields = ["name"]


class MembershipInline(admin.TabularInline[TenantMembership, Tenant]):
    model = TenantMembership
    raw_id_fields = ["user"]
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ["name", "slug"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(HardwareProfile)
class HardwareProfileAdmin(admin.ModelAdmin[HardwareProfile]):
    list_display = ["name", "gpu_model", "gpu_count", "hca_count", "hca_rate_gbps", "memory_gb"]
    search_fields = ["name", "gpu_model"]


@admin.register(Persona)
class PersonaAdmin(admin.ModelAdmin[Persona]):
    list_display = ["name", "description"]
    search_fields = ["name"]
