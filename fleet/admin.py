"""Admin for the fleet inventory."""

from django.contrib import admin

from .models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant, TenantMembership


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
