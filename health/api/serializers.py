"""Serializers for findings, alerts, rules and the XID catalog (all read-only; verbs are POSTs)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from fleet.models import HardwareProfile

from ..models import Alert, Finding, HealthRule, XidDefinition


class FindingSerializer(serializers.ModelSerializer[Finding]):
    """One rule firing on one node (and GPU), with its evidence."""

    class Meta:
        model = Finding
        fields = [
            "id",
            "node",
            "hostname",
            "gpu_index",
            "rule",
            "xid",
            "severity",
            "recommended_action",
            "summary",
            "evidence",
            "source",
            "subject",
            "observed_at",
            "created",
            "shadow",
            "alert",
            "event",
        ]
        read_only_fields = fields


class AlertSerializer(serializers.ModelSerializer[Alert]):
    """A deduplicated condition on a node; silenced alerts are flagged for the remediation policy."""

    hostname = serializers.CharField(source="node.hostname", read_only=True)
    acknowledged_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    silenced_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    silenced = serializers.SerializerMethodField()

    class Meta:
        model = Alert
        fields = [
            "id",
            "node",
            "hostname",
            "gpu_index",
            "rule",
            "subject",
            "dedupe_key",
            "severity",
            "recommended_action",
            "summary",
            "state",
            "first_seen",
            "last_seen",
            "occurrences",
            "clearing_since",
            "resolved_at",
            "resolved_reason",
            "resolved_by",
            "acknowledged_by",
            "acknowledged_at",
            "acknowledged_note",
            "silenced",
            "silenced_until",
            "silenced_by",
            "silenced_reason",
            "last_finding",
        ]
        read_only_fields = fields

    def get_silenced(self, alert: Alert) -> bool:
        return alert.is_silenced()


class ReasonSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(allow_blank=False, max_length=300)


class AcknowledgeSerializer(serializers.Serializer[Any]):
    note = serializers.CharField(allow_blank=False, max_length=300)


class SilenceSerializer(serializers.Serializer[Any]):
    """Silence until a time, or for some minutes (one of the two), with a reason."""

    until = serializers.DateTimeField(required=False)
    minutes = serializers.IntegerField(required=False, min_value=1, max_value=30 * 24 * 60)
    reason = serializers.CharField(allow_blank=False, max_length=300)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("until" in attrs) == ("minutes" in attrs):
            raise serializers.ValidationError({"until": "Give either until or minutes."})
        return attrs


class HealthRuleSerializer(serializers.ModelSerializer[HealthRule]):
    hardware_profile: serializers.SlugRelatedField[HardwareProfile] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = HealthRule
        fields = [
            "id",
            "key",
            "hardware_profile",
            "enabled",
            "shadow",
            "severity",
            "recommended_action",
            "threshold",
            "clear_threshold",
            "window_seconds",
            "count",
            "clear_after_seconds",
            "params",
            "description",
            "updated",
        ]
        read_only_fields = fields


class XidDefinitionSerializer(serializers.ModelSerializer[XidDefinition]):
    class Meta:
        model = XidDefinition
        fields = [
            "xid",
            "name",
            "meaning",
            "severity",
            "recommended_action",
            "gpu_reset",
            "nvidia_bucket",
            "investigatory_action",
            "edited_reason",
            "edited_at",
        ]
        read_only_fields = fields


class WebhookResultSerializer(serializers.Serializer[Any]):
    accepted = serializers.IntegerField()
    resolved = serializers.IntegerField()
    unmatched = serializers.ListField(child=serializers.DictField())


class ReportBadNodeSerializer(serializers.Serializer[Any]):
    """A customer's report of a bad node: why (required), and the job that suffered (optional)."""

    reason = serializers.CharField(allow_blank=False, max_length=1000)
    job_id = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")


class ReportBadNodeAnswerSerializer(serializers.Serializer[Any]):
    """What the report became: a new finding, or (``duplicate``) a note on the open report."""

    duplicate = serializers.BooleanField()
    finding = serializers.IntegerField(allow_null=True, help_text="The finding recorded (null for a duplicate).")
    event = serializers.IntegerField(help_text="The node's history row that records the report.")
