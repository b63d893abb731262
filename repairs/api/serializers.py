"""Serializers of the repairs API: tickets and cases are read-only; every change is a POST
of a named verb with its reason. Request serializers carry the app's prefix so their schema
components never collide with another app's."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from nodewarden.bounds import BIGINT_MAX

from ..choices import RmaOutcome
from ..models import RepairEvent, RepairTicket, RmaCase


class RepairEventSerializer(serializers.ModelSerializer[RepairEvent]):
    """One change of a ticket or case: from, to, who, why (append-only)."""

    actor = serializers.CharField(source="actor_name", read_only=True)
    # Plain strings: one enum under two names would be ambiguous in the schema; the record's
    # own ``state`` documents the values.
    from_state = serializers.CharField(read_only=True, help_text="Empty when the record was opened.")
    to_state = serializers.CharField(read_only=True)

    class Meta:
        model = RepairEvent
        fields = ["id", "verb", "from_state", "to_state", "actor", "reason", "created"]
        read_only_fields = fields


class RepairTicketSerializer(serializers.ModelSerializer[RepairTicket]):
    """A technician's ticket with its place (copied at open time) and its history."""

    opened_by = serializers.CharField(source="opened_by_name", read_only=True)
    events = RepairEventSerializer(many=True, read_only=True)

    class Meta:
        model = RepairTicket
        fields = [
            "id",
            "node",
            "hostname",
            "site",
            "rack",
            "rack_unit",
            "component",
            "what",
            "state",
            "assignee",
            "opened_by",
            "notes",
            "finding_id",
            "remediation_id",
            "created",
            "updated",
            "resolved_at",
            "events",
        ]
        read_only_fields = fields


class RmaCaseSerializer(serializers.ModelSerializer[RmaCase]):
    """A return to the vendor with its serials, the vendor's case, the outcome and its history."""

    opened_by = serializers.CharField(source="opened_by_name", read_only=True)
    events = RepairEventSerializer(many=True, read_only=True)

    class Meta:
        model = RmaCase
        fields = [
            "id",
            "node",
            "hostname",
            "vendor",
            "part",
            "failed_serial",
            "replacement_serial",
            "vendor_case_number",
            "state",
            "outcome",
            "opened_by",
            "notes",
            "created",
            "updated",
            "shipped_at",
            "returned_at",
            "closed_at",
            "events",
        ]
        read_only_fields = fields


class RepairReasonSerializer(serializers.Serializer[Any]):
    """Why; kept in the ticket's or case's history and the node's."""

    reason = serializers.CharField(allow_blank=False, max_length=1000)


class RepairStartSerializer(RepairReasonSerializer):
    assignee = serializers.CharField(
        required=False, allow_blank=True, max_length=150, default="", help_text="Technician taking the ticket."
    )


class RmaShipSerializer(RepairReasonSerializer):
    vendor_case_number = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")


class RmaReceiveSerializer(RepairReasonSerializer):
    # A string checked by the service: the enum is documented once, on RmaCase.outcome, so
    # another app's "outcome" field can never make its schema name ambiguous.
    outcome = serializers.CharField(max_length=20, help_text="One of: " + ", ".join(RmaOutcome.values) + ".")
    replacement_serial = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        default="",
        help_text="Serial of the part that came back (required if replaced).",
    )


class RepairTicketOpenSerializer(RepairReasonSerializer):
    """Open a ticket on the node; ``move_node`` sends a node in triage or remediation to repair."""

    component = serializers.CharField(max_length=200, help_text='e.g. "GPU 3 (serial ...)", "DIMM B4".')
    what = serializers.CharField(max_length=10_000, help_text="What to check or replace.")
    assignee = serializers.CharField(required=False, allow_blank=True, max_length=150, default="")
    notes = serializers.CharField(required=False, allow_blank=True, max_length=10_000, default="")
    # Bounded like the column (bigint): 2**63 is a 400 naming the field, not a database error.
    finding_id = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=BIGINT_MAX
    )
    remediation_id = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=BIGINT_MAX
    )
    move_node = serializers.BooleanField(required=False, default=True)


class RmaCaseOpenSerializer(RepairReasonSerializer):
    """Open an RMA case on the node; ``move_node`` sends a node in triage or repair to RMA."""

    vendor = serializers.CharField(max_length=100)
    part = serializers.CharField(max_length=200)
    failed_serial = serializers.CharField(max_length=100)
    vendor_case_number = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")
    notes = serializers.CharField(required=False, allow_blank=True, max_length=10_000, default="")
    move_node = serializers.BooleanField(required=False, default=True)
