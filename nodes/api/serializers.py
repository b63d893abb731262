"""Serializers for nodes, their history and their lifecycle transitions.

State is read-only everywhere: it changes only through a transition POST,
which goes through ``nodes.services``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from fleet.api.serializers import (
    BriefClusterSerializer,
    BriefHardwareProfileSerializer,
    BriefPersonaSerializer,
    BriefRackSerializer,
    BriefSiteSerializer,
    BriefTenantSerializer,
)
from nodes.choices import STATE_PHASE, GpuHealth, MaintenanceWork, NodeState, Phase
from nodes.models import GPU, Node, NodeEvent
from nodes.services import usable_gpu_count


class GPUSerializer(serializers.ModelSerializer[GPU]):
    """One GPU in a node, with its own health (read-only: it changes through ``nodes.services``)."""

    health = serializers.ChoiceField(choices=GpuHealth.choices, read_only=True)
    health_label = serializers.CharField(source="get_health_display", read_only=True)

    class Meta:
        model = GPU
        fields = ["index", "uuid", "serial", "model", "health", "health_label", "health_changed_at", "health_reason"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer[Node]):
    """A GPU server with its place, owner, state and GPUs."""

    url = serializers.HyperlinkedIdentityField(view_name="api:node-detail")
    site = BriefSiteSerializer(read_only=True)
    cluster = BriefClusterSerializer(read_only=True, allow_null=True)
    rack = BriefRackSerializer(read_only=True, allow_null=True)
    tenant = BriefTenantSerializer(read_only=True, allow_null=True)
    hardware_profile = BriefHardwareProfileSerializer(read_only=True)
    persona = BriefPersonaSerializer(read_only=True, allow_null=True)
    state = serializers.ChoiceField(choices=NodeState.choices, read_only=True)
    state_label = serializers.CharField(source="get_state_display", read_only=True)
    phase = serializers.SerializerMethodField()
    gpus = GPUSerializer(many=True, read_only=True)
    usable_gpu_count = serializers.SerializerMethodField(help_text="GPUs work may run on: all but the fenced.")

    class Meta:
        model = Node
        fields = [
            "id",
            "url",
            "hostname",
            "serial",
            "bmc_address",
            "site",
            "cluster",
            "rack",
            "rack_unit",
            "tenant",
            "hardware_profile",
            "persona",
            "state",
            "state_label",
            "phase",
            "state_changed_at",
            "is_revalidation",
            "gpus",
            "usable_gpu_count",
            "last_updated",
            "created",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=Phase.choices))
    def get_phase(self, node: Node) -> str:
        return STATE_PHASE[node.state]

    def get_usable_gpu_count(self, node: Node) -> int:
        return usable_gpu_count(node.gpus.all())  # the viewset prefetches the GPUs: no query per node


class NodeEventSerializer(serializers.ModelSerializer[NodeEvent]):
    """One append-only row of a node's history."""

    class Meta:
        model = NodeEvent
        fields = [
            "id",
            "created",
            "kind",
            "transition",
            "source_state",
            "target_state",
            "reason",
            "actor_name",
            "actor_kind",
            "correlation_id",
            "details",
        ]
        read_only_fields = fields


class NodeStateSerializer(serializers.ModelSerializer[Node]):
    """Where a node stands after a transition."""

    state = serializers.ChoiceField(choices=NodeState.choices, read_only=True)
    state_label = serializers.CharField(source="get_state_display", read_only=True)

    class Meta:
        model = Node
        fields = ["id", "hostname", "state", "state_label", "state_changed_at", "is_revalidation", "last_updated"]
        read_only_fields = fields


class AvailableTransitionSerializer(serializers.Serializer[Any]):
    """A transition the requesting user may run on the node now (a button, in the portal)."""

    # "label" and "style" are keys of the response; the stubs see Field.label and Field.style
    # overridden, but DRF's metaclass takes declared fields out of the class.
    name = serializers.CharField(help_text="Use in POST /api/nodes/{id}/transitions/{name}/.")
    label = serializers.CharField()  # type: ignore[assignment]
    target = serializers.ChoiceField(choices=NodeState.choices, help_text="The state the node moves to.")
    style = serializers.CharField(  # type: ignore[assignment]
        help_text="Hint for a button's colour: primary, success, warning or danger."
    )


class TransitionReasonSerializer(serializers.Serializer[Any]):
    """Why the transition is run; every change of state needs a reason, kept in the history."""

    # trim_whitespace (the default) turns "   " into "" so it is refused as blank.
    reason = serializers.CharField(allow_blank=False)


class EndMaintenanceSerializer(serializers.Serializer[Any]):
    """What was done in the maintenance (it picks the re-validation plan), and the reason."""

    work = serializers.ChoiceField(
        choices=MaintenanceWork.choices,
        help_text="none: the inventory check only; firmware: firmware, inventory, burn-in; hardware: "
        "inventory, burn-in, fabric, reliability; other: every Day 1 stage.",
    )
    reason = serializers.CharField(allow_blank=False)


class TransitionResultSerializer(serializers.Serializer[dict[str, Any]]):
    """The history row the transition wrote, and the node's new state."""

    node = NodeStateSerializer()
    event = NodeEventSerializer()


class GpuActionResultSerializer(serializers.Serializer[dict[str, Any]]):
    """The GPU as it is now, how many of the node's GPUs take work, and the history row written."""

    gpu = GPUSerializer()
    usable_gpu_count = serializers.IntegerField()
    event = NodeEventSerializer()


class DetailSerializer(serializers.Serializer[dict[str, Any]]):
    """An error with a human-readable message."""

    detail = serializers.CharField()


class ReasonErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """Why a transition request was refused before it reached the state machine."""

    reason = serializers.ListField(child=serializers.CharField())
