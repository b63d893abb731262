"""Serializers of the Day 1 API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from checks.api.serializers import CheckRunSerializer
from nodes.models import Run

from ..choices import Stage


class StageRunSerializer(CheckRunSerializer):
    """A stage run: a recorded run of kind ``stage_*``, with its stage's name and evidence."""

    stage = serializers.SerializerMethodField()
    evidence = serializers.SerializerMethodField()

    class Meta(CheckRunSerializer.Meta):
        fields = [*CheckRunSerializer.Meta.fields, "stage", "evidence"]
        read_only_fields = fields

    def get_stage(self, run: Run) -> str:
        from ..choices import BY_RUN_KIND

        return BY_RUN_KIND[run.kind].stage

    def get_evidence(self, run: Run) -> dict[str, Any]:
        evidence: dict[str, Any] = (run.details or {}).get("evidence", {})  # JSON: Any to mypy
        return evidence


class StageActionSerializer(serializers.Serializer[Any]):
    """Why an operator starts or skips a stage; kept in the node's history."""

    reason = serializers.CharField(allow_blank=False)


# "label" is a key of these responses: DRF's metaclass takes declared fields out of the class, so
# Field.label stays as it is (the stubs see it overridden).
class StageCountSerializer(serializers.Serializer[Any]):
    stage = serializers.ChoiceField(choices=Stage.choices)
    label = serializers.CharField()  # type: ignore[assignment]
    state = serializers.CharField()
    count = serializers.IntegerField()


class StageDurationSerializer(serializers.Serializer[Any]):
    stage = serializers.ChoiceField(choices=Stage.choices)
    label = serializers.CharField()  # type: ignore[assignment]
    runs = serializers.IntegerField()
    median_s = serializers.FloatField(allow_null=True)
    slowest_s = serializers.FloatField(allow_null=True)


class FailureReasonSerializer(serializers.Serializer[Any]):
    stage = serializers.ChoiceField(choices=Stage.choices)
    label = serializers.CharField()  # type: ignore[assignment]
    reason = serializers.CharField()
    count = serializers.IntegerField()


class YieldSerializer(serializers.Serializer[Any]):
    released = serializers.IntegerField()
    failed = serializers.IntegerField()
    yield_pct = serializers.FloatField(allow_null=True)


class Day1SummarySerializer(serializers.Serializer[Any]):
    window_days = serializers.IntegerField()
    counts = StageCountSerializer(many=True)
    durations = StageDurationSerializer(many=True)
    failures = FailureReasonSerializer(many=True)
    day1_yield = YieldSerializer()


class PersonaChangeRequestSerializer(serializers.Serializer[Any]):
    """Re-role a node: the persona to give it, and why."""

    persona = serializers.CharField(help_text="Persona name.")
    reason = serializers.CharField(allow_blank=False)


class PersonaChangeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    node = serializers.IntegerField(source="node_id")
    from_persona = serializers.CharField(source="from_persona.name", allow_null=True, default=None)
    to_persona = serializers.CharField(source="to_persona.name")
    status = serializers.CharField()
    reason = serializers.CharField()
    requested_by = serializers.CharField()
    created = serializers.DateTimeField()
    applied_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
