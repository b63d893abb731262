"""Serializers of the report API: the query (period, cluster, tenant), a tenant's availability per
node with its incidents, and the lifecycle flow."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from nodes.choices import NodeState

from ..availability import Incident, NodeAvailability
from ..choices import Attribution
from ..filters import check_period


class ReportQuerySerializer(serializers.Serializer[Any]):
    """The period (``until`` defaults to now, ``since`` to 30 days before it) and the scope."""

    since = serializers.DateTimeField(required=False, help_text="Start of the period (default: 30 days before until).")
    until = serializers.DateTimeField(required=False, help_text="End of the period, exclusive (default: now).")
    tenant = serializers.SlugField(required=False, help_text="Tenant slug; customers may name only their own.")
    cluster = serializers.CharField(required=False, help_text="Cluster name.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        problem = check_period(attrs.get("since"), attrs.get("until"))
        if problem:
            raise serializers.ValidationError({"since": [problem]})
        return attrs


class FindingRefSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    summary = serializers.CharField()
    rule = serializers.CharField()
    severity = serializers.CharField()
    created = serializers.DateTimeField()
    remediation = serializers.IntegerField()


class IncidentSerializer(serializers.Serializer[Any]):
    """One outage: when the node left production, when it was back (null: not yet), whose downtime it
    was, who or what started it and why, and the finding behind it when a remediation acted on one."""

    left_production = serializers.DateTimeField(source="started")
    back_in_production = serializers.DateTimeField(source="ended", allow_null=True)
    hours_until_back = serializers.SerializerMethodField()
    downtime_hours = serializers.SerializerMethodField(help_text="Hours of this outage inside the period.")
    attribution = serializers.ChoiceField(choices=Attribution.choices)
    initiated_by = serializers.CharField(source="outage.initiated_by")
    reason = serializers.CharField()
    finding = FindingRefSerializer(allow_null=True)

    def get_hours_until_back(self, incident: Incident) -> float | None:
        back = incident.until_back
        return round(back.total_seconds() / 3600, 3) if back is not None else None

    def get_downtime_hours(self, incident: Incident) -> float:
        return round(incident.outage.seconds / 3600, 3)


class NodeAvailabilitySerializer(serializers.Serializer[Any]):
    """One node's period: hours in production and down (the provider's and the customer's), its
    incidents, and availability = production / (production + downtime)."""

    node = serializers.IntegerField(source="node.pk")
    hostname = serializers.CharField(source="node.hostname")
    cluster = serializers.CharField(source="node.cluster.name", allow_null=True, default=None)
    state = serializers.ChoiceField(source="node.state", choices=NodeState.choices)
    production_hours = serializers.SerializerMethodField()
    downtime_hours = serializers.SerializerMethodField()
    provider_downtime_hours = serializers.SerializerMethodField()
    customer_downtime_hours = serializers.SerializerMethodField()
    availability_pct = serializers.FloatField(allow_null=True)
    incident_count = serializers.IntegerField(source="incidents")
    incidents = serializers.SerializerMethodField()

    def get_production_hours(self, row: NodeAvailability) -> float:
        return round(row.serving_s / 3600, 3)

    def get_downtime_hours(self, row: NodeAvailability) -> float:
        return round(row.downtime_s / 3600, 3)

    def get_provider_downtime_hours(self, row: NodeAvailability) -> float:
        return round(row.provider_s / 3600, 3)

    def get_customer_downtime_hours(self, row: NodeAvailability) -> float:
        return round(row.customer_s / 3600, 3)

    @extend_schema_field(IncidentSerializer(many=True))
    def get_incidents(self, row: Any) -> list[dict[str, Any]]:
        # many=True gives a ReturnList; the stubs type .data as a ReturnDict.
        return IncidentSerializer(self.context["incidents"].get(row.node.pk, []), many=True).data  # type: ignore[return-value]


class AvailabilityReportSerializer(serializers.Serializer[Any]):
    """A page of nodes (``limit``/``offset``) with their availability in the period."""

    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    tenant = serializers.CharField(allow_null=True, help_text="Tenant slug; null: every node the caller sees.")
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = NodeAvailabilitySerializer(many=True)


class FlowSerializer(serializers.Serializer[Any]):
    # The response's "source" key: DRF's metaclass takes declared fields out of the class, so
    # Field.source stays as it is (the stubs see it overridden).
    source = serializers.ChoiceField(choices=NodeState.choices)  # type: ignore[assignment]
    target = serializers.ChoiceField(choices=NodeState.choices)
    count = serializers.IntegerField()


class FlowReportSerializer(serializers.Serializer[Any]):
    """State changes in the period from each state to each other, commonest first."""

    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    total = serializers.IntegerField()
    flows = FlowSerializer(many=True)
