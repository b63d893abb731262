"""Serializers of the trends API: flags (read-only, with their evidence) and the lemon report."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..models import TrendFlag


class TrendFlagSerializer(serializers.ModelSerializer[TrendFlag]):
    """A node degrading in a figure, under its peers in a figure, or a lemon; open while
    ``cleared_at`` is empty. ``evidence`` holds the points and fit, the peers, or the signals."""

    hostname = serializers.CharField(source="node.hostname", read_only=True)
    hardware_profile = serializers.CharField(source="node.hardware_profile.name", read_only=True)
    open = serializers.BooleanField(source="is_open", read_only=True)

    class Meta:
        model = TrendFlag
        fields = [
            "id",
            "node",
            "hostname",
            "hardware_profile",
            "kind",
            "figure",
            "score",
            "window_days",
            "open",
            "evidence",
            "finding",
            "created",
            "updated",
            "cleared_at",
        ]
        read_only_fields = fields


class LemonSerializer(serializers.Serializer[Any]):
    """One node's lemon score with the signals behind it (raw values) and each one's points."""

    node = serializers.IntegerField(read_only=True)
    hostname = serializers.CharField(read_only=True)
    profile = serializers.CharField(read_only=True)
    score = serializers.FloatField(read_only=True, help_text="0-100; flagged from the threshold up.")
    flagged = serializers.BooleanField(read_only=True)
    signals = serializers.DictField(child=serializers.FloatField(), read_only=True)
    contributions = serializers.DictField(
        child=serializers.FloatField(), read_only=True, help_text="Points of the score per signal; they add up to it."
    )


class LemonReportSerializer(serializers.Serializer[Any]):
    """The top lemon offenders of the last evaluation, highest score first."""

    run = serializers.IntegerField(read_only=True, allow_null=True)
    evaluated_at = serializers.DateTimeField(read_only=True, allow_null=True)
    window_days = serializers.IntegerField(read_only=True)
    threshold = serializers.FloatField(read_only=True)
    weights = serializers.DictField(child=serializers.FloatField(), read_only=True)
    results = LemonSerializer(many=True, read_only=True)
