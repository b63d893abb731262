"""Fabric vocabularies: device kinds and roles, discrepancy kinds with their severities,
ticket and run states. One place for pages, API, validation and admin."""

from __future__ import annotations

from django.db import models


class DeviceKind(models.TextChoices):
    SWITCH = "switch", "Switch"
    CA = "ca", "Host channel adapter"


class DeviceRole(models.TextChoices):
    SPINE = "spine", "Spine"
    LEAF = "leaf", "Leaf"
    HOST = "host", "Host HCA"
    OTHER = "other", "Other"


class DiscrepancyKind(models.TextChoices):
    MISSING = "missing", "Missing link"
    MISWIRED = "miswired", "Miswired link"
    SWAPPED = "swapped", "Swapped cables"
    UNEXPECTED = "unexpected", "Unexpected link"
    LINK_DOWN = "link_down", "Link down"
    DEGRADED = "degraded", "Degraded width or speed"
    UNKNOWN_DEVICE = "unknown_device", "Unknown device"
    COUNTER_ERRORS = "counter_errors", "Error counters rising"
    FLAPPING = "flapping", "Link flapping"


# What a discrepancy means for the nodes it touches (health severities, see health.choices).
KIND_SEVERITY: dict[str, str] = {
    DiscrepancyKind.MISSING: "degraded",
    DiscrepancyKind.MISWIRED: "degraded",
    DiscrepancyKind.SWAPPED: "degraded",
    DiscrepancyKind.LINK_DOWN: "degraded",
    DiscrepancyKind.DEGRADED: "degraded",
    DiscrepancyKind.FLAPPING: "degraded",
    DiscrepancyKind.COUNTER_ERRORS: "warning",
    DiscrepancyKind.UNEXPECTED: "warning",
    DiscrepancyKind.UNKNOWN_DEVICE: "warning",
}
# Kinds that fail a node's Day 1 fabric and cable check.
BLOCKING_KINDS = (
    DiscrepancyKind.MISSING,
    DiscrepancyKind.MISWIRED,
    DiscrepancyKind.SWAPPED,
    DiscrepancyKind.LINK_DOWN,
    DiscrepancyKind.DEGRADED,
    DiscrepancyKind.FLAPPING,
)

KIND_COLOURS: dict[str, str] = {
    DiscrepancyKind.MISSING: "#c0392b",
    DiscrepancyKind.MISWIRED: "#e67e22",
    DiscrepancyKind.SWAPPED: "#d35400",
    DiscrepancyKind.UNEXPECTED: "#8e44ad",
    DiscrepancyKind.LINK_DOWN: "#c0392b",
    DiscrepancyKind.DEGRADED: "#d4ac0d",
    DiscrepancyKind.UNKNOWN_DEVICE: "#7f8c8d",
    DiscrepancyKind.COUNTER_ERRORS: "#d4ac0d",
    DiscrepancyKind.FLAPPING: "#e74c3c",
}


class RunSource(models.TextChoices):
    COLLECTOR = "collector", "Collector (scheduled)"
    UPLOAD = "upload", "Uploaded output"
    AGENTS = "agents", "Node agents' counters"


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class TicketStatus(models.TextChoices):
    OPEN = "open", "Open"
    CLOSED = "closed", "Closed (fixed)"


class ValidationResult(models.TextChoices):
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    PARTIAL = "partial", "Partly checked"
