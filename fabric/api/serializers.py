"""Serializers of the fabric API: plans, runs, discrepancies, links, tickets, manual checks
(all read-only; writes are an import, an upload, a close and a record)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from nodes.models import Node

from ..choices import ValidationResult
from ..models import CablingPlan, DiscoveredLink, DiscoveryRun, Discrepancy, FabricDevice, ManualValidation, Ticket


class CablingPlanSerializer(serializers.ModelSerializer[CablingPlan]):
    """One imported version of the cabling plan; the newest is in force."""

    class Meta:
        model = CablingPlan
        fields = ["id", "created", "actor_name", "source", "links", "note"]
        read_only_fields = fields


class PlanUploadSerializer(serializers.Serializer[Any]):
    """A plan as JSON: the CSV text (header a_device,a_port,b_device,b_port[,width,rate_gbps]) and a note."""

    csv = serializers.CharField(trim_whitespace=False, help_text="The plan's CSV text, header first.")
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=1000)


class LineErrorSerializer(serializers.Serializer[Any]):
    line = serializers.IntegerField(help_text="1 is the header (or the tool output's first line).")
    message = serializers.CharField()


class PlanErrorsSerializer(serializers.Serializer[Any]):
    """Every bad line of a refused plan; nothing was stored."""

    # The response's "errors" key: DRF's metaclass takes declared fields out of the class, so
    # Serializer.errors stays as it is (the stubs see it overridden).
    errors = LineErrorSerializer(many=True)  # type: ignore[assignment]


class ToolErrorSerializer(LineErrorSerializer):
    tool = serializers.CharField(help_text='Which upload field: "ibnetdiscover", "perfquery[2]"...')


class DiscoveryErrorsSerializer(serializers.Serializer[Any]):
    """Tool output that could not be read; nothing was stored."""

    errors = ToolErrorSerializer(many=True)  # type: ignore[assignment]  # as in PlanErrorsSerializer


class DiscoveryUploadSerializer(serializers.Serializer[Any]):
    """The text infiniband-diags printed on a host of the fabric, as collected there."""

    ibnetdiscover = serializers.CharField(trim_whitespace=False, help_text="`ibnetdiscover` output.")
    iblinkinfo = serializers.CharField(
        trim_whitespace=False, help_text="`iblinkinfo` output (port states, widths, rates)."
    )
    perfquery = serializers.ListField(
        child=serializers.CharField(trim_whitespace=False),
        required=False,
        max_length=10000,
        help_text="`perfquery` outputs, one per port.",
    )
    ibqueryerrors = serializers.CharField(trim_whitespace=False, required=False, help_text="`ibqueryerrors` output.")


class DiscoveryRunSerializer(serializers.ModelSerializer[DiscoveryRun]):
    """One look at the fabric, with its summary (discrepancies by kind, tickets opened and closed)."""

    tools = serializers.SerializerMethodField(help_text="The tools whose output was kept with the run.")

    class Meta:
        model = DiscoveryRun
        fields = [
            "id",
            "source",
            "status",
            "plan",
            "actor_name",
            "started",
            "finished",
            "devices",
            "links",
            "summary",
            "error",
            "tools",
        ]
        read_only_fields = fields

    def get_tools(self, run: DiscoveryRun) -> list[str]:
        return sorted(o.tool for o in run.outputs.all())


class DiscrepancySerializer(serializers.ModelSerializer[Discrepancy]):
    class Meta:
        model = Discrepancy
        fields = ["id", "run", "kind", "key", "a_endpoint", "b_endpoint", "expected", "found", "evidence", "ticket"]
        read_only_fields = fields


class DiscoveredLinkSerializer(serializers.ModelSerializer[DiscoveredLink]):
    """A cable the run saw, or a port found down with no peer (b_device null)."""

    a_device: serializers.SlugRelatedField[FabricDevice] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    b_device: serializers.SlugRelatedField[FabricDevice] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )

    class Meta:
        model = DiscoveredLink
        fields = ["id", "run", "a_device", "a_port", "b_device", "b_port", "width", "rate_gbps", "state", "phys_state"]
        read_only_fields = fields


class NodeRefSerializer(serializers.ModelSerializer[Node]):
    class Meta:
        model = Node
        fields = ["id", "hostname"]
        read_only_fields = fields


class TicketSerializer(serializers.ModelSerializer[Ticket]):
    """A technician ticket: one problem on one cable; its discrepancies: /api/fabric/discrepancies/?ticket={id}."""

    nodes = NodeRefSerializer(many=True, read_only=True)
    endpoints = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Ticket
        fields = [
            "id",
            "key",
            "kind",
            "status",
            "title",
            "detail",
            "endpoints",
            "nodes",
            "opened_at",
            "closed_at",
            "first_run",
            "last_run",
            "times_seen",
            "closed_reason",
        ]
        read_only_fields = fields


class CloseTicketSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(allow_blank=False, max_length=250)


class ManualValidationSerializer(serializers.ModelSerializer[ManualValidation]):
    class Meta:
        model = ManualValidation
        fields = ["id", "created", "actor_name", "scope", "result", "notes", "run"]
        read_only_fields = fields


class RecordValidationSerializer(serializers.Serializer[Any]):
    """A hands-on check to put on the record (who and when are taken from the request)."""

    scope = serializers.CharField(max_length=300, help_text='What was checked: "leaf-r3 optics".')
    result = serializers.ChoiceField(choices=ValidationResult.choices)
    notes = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
