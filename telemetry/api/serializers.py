"""Serializers of the telemetry API: read-only views of the latest state and series."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..choices import COMMAND_OUTCOMES, CommandVerb
from ..models import AgentCommand, GpuState, NodeHealth


class NodeHealthSerializer(serializers.ModelSerializer[NodeHealth]):
    class Meta:
        model = NodeHealth
        exclude = ["node"]


class GpuStateSerializer(serializers.ModelSerializer[GpuState]):
    class Meta:
        model = GpuState
        exclude = ["id", "node"]


class NodeGpuHealthSerializer(serializers.Serializer[dict[str, Any]]):
    """A node's latest report (``health`` is null until it first reports) and GPU rows."""

    node = serializers.IntegerField()
    hostname = serializers.CharField()
    health = NodeHealthSerializer(allow_null=True)
    gpus = GpuStateSerializer(many=True)


class SamplePointSerializer(serializers.Serializer[dict[str, Any]]):
    t = serializers.DateTimeField(help_text="Start of the bucket.")
    n = serializers.IntegerField(help_text="Samples in the bucket.")
    temperature_max = serializers.FloatField(allow_null=True)
    hbm_temperature_max = serializers.FloatField(allow_null=True)
    power_avg = serializers.FloatField(allow_null=True)
    power_max = serializers.FloatField(allow_null=True)
    utilization_avg = serializers.FloatField(allow_null=True)
    ecc_volatile_corrected_max = serializers.IntegerField(allow_null=True)
    ecc_volatile_uncorrected_max = serializers.IntegerField(allow_null=True)
    ecc_aggregate_uncorrected_max = serializers.IntegerField(allow_null=True)


class GpuPointsSerializer(serializers.Serializer[dict[str, Any]]):
    index = serializers.IntegerField()
    points = SamplePointSerializer(many=True)


class GpuSamplesSerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.IntegerField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket_s = serializers.IntegerField(help_text="Width of each bucket in seconds.")
    # The stubs see Serializer.fields overridden; DRF's metaclass takes declared fields out of the
    # class, so this is the response's "fields" key and Serializer.fields stays as it is.
    fields = serializers.ListField(child=serializers.CharField())  # type: ignore[assignment]
    gpus = GpuPointsSerializer(many=True)


class DcgmPushResultSerializer(serializers.Serializer[dict[str, Any]]):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    hosts = serializers.ListField(child=serializers.CharField(), help_text="Hosts stored.")
    unknown_hosts = serializers.ListField(
        child=serializers.CharField(), help_text="Hosts that match no node: nothing stored for them."
    )


class AgentCommandSerializer(serializers.ModelSerializer[AgentCommand]):
    """A command for a node's agent, as operators read it (the result only in the detail list's row)."""

    class Meta:
        model = AgentCommand
        fields = [
            "id",
            "node",
            "verb",
            "args",
            "status",
            "issued_by_name",
            "reason",
            "created",
            "expires_at",
            "delivered_at",
            "finished_at",
            "summary",
            "result",
        ]
        read_only_fields = fields


class IssueCommandSerializer(serializers.Serializer[dict[str, Any]]):
    """An operator's request; ``args`` are checked per verb by ``telemetry.commands.clean_args``."""

    verb = serializers.ChoiceField(choices=CommandVerb.choices)
    args = serializers.JSONField(required=False, default=dict)
    reason = serializers.CharField(help_text="Why: it is kept in the node's history.")
    ttl_s = serializers.IntegerField(
        required=False, default=900, min_value=60, max_value=86400, help_text="Expires undelivered after this."
    )


class AgentCommandOrderSerializer(serializers.Serializer[dict[str, Any]]):
    """What the agent gets for one command: only what it needs to run it."""

    id = serializers.IntegerField()
    verb = serializers.CharField()
    args = serializers.JSONField()
    expires_at = serializers.DateTimeField()


class AgentCommandsSerializer(serializers.Serializer[dict[str, Any]]):
    commands = AgentCommandOrderSerializer(many=True)


class CommandResultSerializer(serializers.Serializer[dict[str, Any]]):
    """The agent's outcome of a command it was handed."""

    status = serializers.ChoiceField(choices=COMMAND_OUTCOMES)
    summary = serializers.CharField(required=False, default="", allow_blank=True, max_length=2000)
    result = serializers.DictField(required=False, default=dict)


class CommandResultAnswerSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    status = serializers.CharField()
    changed = serializers.BooleanField(help_text="False when the command had already finished (a resent result).")


class AgentStateSerializer(serializers.Serializer[Any]):
    """The node's lifecycle state, for the agent's scheduler hooks."""

    state = serializers.CharField()
    in_production = serializers.BooleanField(help_text="False: the node must take no new work.")
    reason = serializers.CharField(help_text="Why it is out, as the scheduler shows it; empty in production.")
