"""Serializers of the remediation API: remediations (read-only, with their steps and
decisions), holds and circuit breakers; the verbs' bodies carry a reason."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from fleet.models import Cluster, Rack, Tenant
from nodes.models import Node

from ..models import CircuitBreaker, Hold, Remediation, RemediationPolicy, RemediationStep


class RemediationStepSerializer(serializers.ModelSerializer[RemediationStep]):
    """One rung tried: when, how it went, and what the BMC, agent or scheduler said."""

    class Meta:
        model = RemediationStep
        fields = ["id", "rung", "status", "started", "finished", "deadline", "attempts", "detail"]
        read_only_fields = fields


class DecisionSerializer(serializers.Serializer[dict[str, Any]]):
    """One decision: when, what and why, who (a user, or system:remediation)."""

    at = serializers.DateTimeField(read_only=True)
    what = serializers.CharField(read_only=True)
    who = serializers.CharField(read_only=True)
    finding = serializers.IntegerField(read_only=True, required=False, help_text="The finding it was about, if any.")


class RemediationSerializer(serializers.ModelSerializer[Remediation]):
    """One incident on one node: the finding, the policy, the rung, every rung tried and every
    decision (why this rung and not another), oldest first."""

    hostname = serializers.CharField(source="node.hostname", read_only=True)
    finding_summary = serializers.CharField(source="finding.summary", read_only=True, allow_null=True)
    policy: serializers.SlugRelatedField[RemediationPolicy] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    steps = RemediationStepSerializer(many=True, read_only=True)
    decisions = DecisionSerializer(many=True, read_only=True)

    class Meta:
        model = Remediation
        fields = [
            "id",
            "node",
            "hostname",
            "status",
            "rung",
            "urgency",
            "policy",
            "finding",
            "finding_summary",
            "queued_reason",
            "created",
            "updated",
            "finished",
            "steps",
            "decisions",
        ]
        read_only_fields = fields


class RemediationReasonSerializer(serializers.Serializer[Any]):
    """Why an operator acts; kept on the remediation and on the node's history."""

    reason = serializers.CharField(allow_blank=False, max_length=1000)


class HoldSerializer(serializers.ModelSerializer[Hold]):
    """No automated action on a node, cluster, rack or tenant (none: the whole fleet) until released."""

    hostname = serializers.CharField(source="node.hostname", read_only=True, allow_null=True)
    cluster_name = serializers.CharField(source="cluster.name", read_only=True, allow_null=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = Hold
        fields = [
            "id",
            "node",
            "hostname",
            "cluster",
            "cluster_name",
            "rack",
            "tenant",
            "reason",
            "actor_name",
            "created",
            "until",
            "released_at",
            "released_reason",
            "active",
        ]
        read_only_fields = fields

    def get_active(self, hold: Hold) -> bool:
        return hold.released_at is None and (hold.until is None or hold.until > timezone.now())


class HoldRequestSerializer(serializers.Serializer[Any]):
    """Where to hold automated actions (one target, or ``fleet``), until when, and why."""

    node = serializers.PrimaryKeyRelatedField(queryset=Node.objects.all(), required=False, allow_null=True)
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all(), required=False, allow_null=True)
    rack = serializers.PrimaryKeyRelatedField(queryset=Rack.objects.all(), required=False, allow_null=True)
    tenant = serializers.PrimaryKeyRelatedField(queryset=Tenant.objects.all(), required=False, allow_null=True)
    fleet = serializers.BooleanField(default=False, help_text="Hold the whole fleet (no other target).")
    until = serializers.DateTimeField(required=False, allow_null=True, help_text="Empty: until released.")
    reason = serializers.CharField(allow_blank=False, max_length=1000)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        targets = [name for name in ("node", "cluster", "rack", "tenant") if attrs.get(name) is not None]
        if len(targets) + attrs["fleet"] != 1:
            raise serializers.ValidationError("Give exactly one of node, cluster, rack, tenant, or fleet: true.")
        if attrs.get("until") is not None and attrs["until"] <= timezone.now():
            raise serializers.ValidationError({"until": ["The hold would end in the past."]})
        return attrs


class CircuitBreakerSerializer(serializers.ModelSerializer[CircuitBreaker]):
    """A cluster's breaker: tripped by a spike of findings, reset by an operator."""

    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    tripped = serializers.SerializerMethodField()

    class Meta:
        model = CircuitBreaker
        fields = [
            "id",
            "cluster",
            "cluster_name",
            "tripped",
            "tripped_at",
            "reason",
            "reset_at",
            "reset_by",
            "reset_reason",
        ]
        read_only_fields = fields

    def get_tripped(self, breaker: CircuitBreaker) -> bool:
        return breaker.reset_at is None
