"""Serializers of the telemetry API: read-only views of the latest state and series."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..models import GpuState, NodeHealth


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
