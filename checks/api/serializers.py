"""Serializers for active checks: the operator's request, the run as read back, and the
agent's side (what it is handed, what it reports).

``kind`` and ``status`` are plain strings in the schema where the same name already
carries another choice set (``NodeEvent.kind``), so the generated enum names stay stable.
"""

from __future__ import annotations

import math
from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from nodes.choices import ACTIVE_KINDS, AGENT_OUTCOMES, RunKind, RunStatus
from nodes.models import OUTPUT_MAX_BYTES, Run

from ..specs import describe_figures

KINDS_HELP = "One of: " + ", ".join(ACTIVE_KINDS) + "."
MAX_FIGURES = 64
FIGURE_NAME_MAX = 64


class CheckRequestSerializer(serializers.Serializer[Any]):
    """An operator's request for an active check; the params are checked per kind by the service."""

    kind = serializers.CharField(help_text=KINDS_HELP)
    params = serializers.JSONField(
        required=False,
        default=dict,
        help_text="Per kind, e.g. gpu_stress {seconds, matrix_size, dtype}, "
        "dcgm_diag {level}, nccl_test {min_bytes, max_bytes, gpus}, "
        "memory_test {fraction}. Omitted ones take their defaults.",
    )
    reason = serializers.CharField(allow_blank=False, help_text="Why; kept in the node's history.")

    def validate_kind(self, value: str) -> str:
        if value not in ACTIVE_KINDS:
            raise serializers.ValidationError(f"Unknown check kind {value!r}. {KINDS_HELP}")
        return value


class CancelSerializer(serializers.Serializer[Any]):
    """Why a queued check is withdrawn."""

    reason = serializers.CharField(allow_blank=False)


class CheckRunSerializer(serializers.ModelSerializer[Run]):
    """A recorded run on a node: an active check or a transition follow-up."""

    kind = serializers.CharField(read_only=True, help_text=", ".join(RunKind.values))
    kind_label = serializers.CharField(source="get_kind_display", read_only=True)
    status = serializers.CharField(read_only=True, help_text=", ".join(RunStatus.values))
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    figures_text = serializers.SerializerMethodField()
    duration_seconds = serializers.FloatField(read_only=True, allow_null=True)
    requested_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "node",
            "kind",
            "kind_label",
            "status",
            "status_label",
            "params",
            "figures",
            "figures_text",
            "summary",
            "error",
            "requested_by",
            "requested_reason",
            "trigger",
            "created",
            "claimed_at",
            "deadline",
            "started",
            "finished",
            "duration_seconds",
        ]
        read_only_fields = fields

    def get_figures_text(self, run: Run) -> str:
        """How the figures read (``checks.specs``), e.g. "busbw 362 GB/s"."""
        return describe_figures(run.kind, run.figures)


class CheckRunDetailSerializer(CheckRunSerializer):
    """One run, with the tool's output (left out of lists: up to 64 KiB each)."""

    class Meta(CheckRunSerializer.Meta):
        fields = [*CheckRunSerializer.Meta.fields, "output"]
        read_only_fields = fields


class AgentCheckSerializer(serializers.Serializer[Any]):
    """A check handed to the agent: run ``kind`` with ``params``, then post the result to
    /api/agent/checks/{id}/result/."""

    id = serializers.IntegerField()
    kind = serializers.CharField(help_text=KINDS_HELP)
    params = serializers.JSONField()


class AgentClaimSerializer(serializers.Serializer[Any]):
    """The agent's poll: whether the portal counts the node as idle, why, and the checks it now owns."""

    idle = serializers.BooleanField()
    reason = serializers.CharField()
    checks = AgentCheckSerializer(many=True)


class CheckResultSerializer(serializers.Serializer[Any]):
    """The outcome of one check, as the agent reports it."""

    status = serializers.ChoiceField(
        choices=[(s, RunStatus(s).label) for s in AGENT_OUTCOMES],
        help_text="not_available: the tool is missing on the node.",
    )
    summary = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    figures = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        default=dict,
        help_text='Named numbers, e.g. {"busbw_gbps": 362.4}.',
    )
    output = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="The tool's output, at most 64 KiB of UTF-8.",
    )
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField()

    def validate_figures(self, value: dict[str, Any]) -> dict[str, Any]:
        raw = self.initial_data.get("figures", {})
        if not isinstance(raw, dict):  # a form post's field is a string, whatever DictField made of it
            raise serializers.ValidationError('Send figures as a JSON object, e.g. {"busbw_gbps": 362.4}.')
        if len(raw) > MAX_FIGURES:
            raise serializers.ValidationError(f"At most {MAX_FIGURES} figures.")
        for name, number in raw.items():
            if len(name) > FIGURE_NAME_MAX:
                raise serializers.ValidationError(f"Figure name {name[:20]!r}… is longer than {FIGURE_NAME_MAX}.")
            # FloatField takes true and "12"; a figure must be a real JSON number.
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
                raise serializers.ValidationError(f"{name}: must be a finite number, got {number!r}.")
        return dict(raw)  # as sent (612 stays 612), so a repeated post compares equal

    def validate_output(self, value: str) -> str:
        size = len(value.encode())
        if size > OUTPUT_MAX_BYTES:
            raise serializers.ValidationError(f"At most {OUTPUT_MAX_BYTES} bytes (got {size}); send the tail.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["finished_at"] < attrs["started_at"]:
            raise serializers.ValidationError({"finished_at": ["Must not be before started_at."]})
        return attrs


class CheckResultAnswerSerializer(serializers.Serializer[Any]):
    """The run as recorded."""

    id = serializers.IntegerField()
    status = serializers.CharField()


class GiveBackSerializer(serializers.Serializer[Any]):
    """Why the node is wanted back now; kept in the node's history."""

    reason = serializers.CharField(allow_blank=False, max_length=500)


class GiveBackAnswerSerializer(serializers.Serializer[Any]):
    """The checks that were running on the node and are now preempted (the node is being given back)."""

    preempted = CheckRunSerializer(many=True)


class AgentRunStateSerializer(serializers.Serializer[Any]):
    """What the agent asks while a check runs: carry on (``wanted``), or kill the check and post nothing."""

    id = serializers.IntegerField()
    status = serializers.CharField(help_text=", ".join(RunStatus.values))
    wanted = serializers.BooleanField()
    reason = serializers.CharField()
