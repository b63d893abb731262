"""Admin for telemetry: latest state and dead letters read-only, exporter targets editable.

The history tables (reports, samples, XID records) have composite primary keys, which
the admin does not support; they are read through the node page and the API.
"""

from __future__ import annotations

from django.contrib import admin

from nodewarden.records import ReadOnlyAdmin

from .models import AgentToken, DcgmExporterTarget, GpuState, IngestRejection, NodeHealth


@admin.register(NodeHealth)
class NodeHealthAdmin(ReadOnlyAdmin):
    list_display = [
        "node",
        "last_report_at",
        "last_received_at",
        "source",
        "gpu_count",
        "gpu_compute_processes",
        "driver_version",
        "agent_version",
    ]
    list_filter = ["source"]
    search_fields = ["node__hostname"]
    list_select_related = ["node"]
    raw_id_fields = ["node"]


@admin.register(GpuState)
class GpuStateAdmin(ReadOnlyAdmin):
    list_display = [
        "node",
        "index",
        "uuid",
        "updated_at",
        "temperature_c",
        "power_w",
        "ecc_volatile_uncorrected",
        "remapped_rows_pending",
        "nvlink_links_up",
    ]
    search_fields = ["node__hostname", "uuid", "serial"]
    list_select_related = ["node"]
    raw_id_fields = ["node"]


@admin.register(IngestRejection)
class IngestRejectionAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "source", "status", "hostname", "node", "short_reason", "body_size", "remote_addr"]
    list_filter = ["source", "status"]
    search_fields = ["hostname", "reason", "remote_addr"]
    list_select_related = ["node"]
    raw_id_fields = ["node"]
    date_hierarchy = "received_at"

    @admin.display(description="reason")
    def short_reason(self, obj: IngestRejection) -> str:
        return obj.reason[:120]


@admin.register(DcgmExporterTarget)
class DcgmExporterTargetAdmin(admin.ModelAdmin[DcgmExporterTarget]):
    list_display = ["url", "site", "cluster", "enabled", "interval_s", "last_scraped_at", "last_error"]
    list_filter = ["enabled", "site"]
    search_fields = ["url"]
    list_select_related = ["site", "cluster"]
    readonly_fields = ["last_scraped_at", "last_error"]


@admin.register(AgentToken)
class AgentTokenAdmin(ReadOnlyAdmin):
    """Tokens are issued with ``manage.py issue_agent_token`` (shown once) and never edited here."""

    list_display = ["prefix", "node", "created", "created_by", "last_used", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["node__hostname", "prefix"]
    list_select_related = ["node", "created_by"]
    raw_id_fields = ["node"]
    exclude = ["key_hash"]
