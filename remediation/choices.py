"""Remediation vocabularies: the escalation ladder, urgencies, statuses, safety domains."""
from __future__ import annotations

from django.db import models


class Rung(models.TextChoices):
    """The escalation ladder, in order: each rung tried once per incident, then the next."""

    GPU_RESET = "gpu_reset", "GPU reset"
    REBOOT = "reboot", "Reboot"
    POWER_CYCLE = "power_cycle", "BMC power cycle"
    REIMAGE = "reimage", "Reimage"
    REPAIR = "repair", "Repair (technician)"
    RMA = "rma", "RMA"


LADDER: tuple[str, ...] = tuple(Rung.values)
# Rungs that take the node down or touch its disks: policies may keep them to maintenance windows.
DISRUPTIVE = (Rung.REBOOT, Rung.POWER_CYCLE, Rung.REIMAGE)
# Rungs that end the automated part: a person (technician, vendor) takes over.
HAND_OFF = (Rung.REPAIR, Rung.RMA)


def next_rung(rung: str) -> str:
    i = LADDER.index(rung)
    return LADDER[min(i + 1, len(LADDER) - 1)]


# The first rung a finding's recommended action (health.RecommendedAction) points at.
RECOMMENDED_RUNG = {
    "reset_gpu": Rung.GPU_RESET, "reboot": Rung.REBOOT, "power_cycle": Rung.POWER_CYCLE,
    "reimage": Rung.REIMAGE, "inspect": Rung.REPAIR, "rma": Rung.RMA,
}


class Urgency(models.TextChoices):
    NOW = "now", "Cordon and act now (even under a job)"
    WHEN_IDLE = "when_idle", "Drain when the current job ends, then act"
    WATCH = "watch", "Record and watch"


class Status(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting an operator's approval"
    QUEUED = "queued", "Queued (safety limit, hold or window)"
    DRAINING = "draining", "Waiting for the drain"
    RUNNING = "running", "Running a rung"
    VALIDATING = "validating", "Re-validating"
    HANDED_OFF = "handed_off", "Handed to repair or RMA"
    SUCCEEDED = "succeeded", "Back in production"
    STOPPED = "stopped", "Stopped by an operator"
    FAILED = "failed", "Failed"


OPEN = (Status.AWAITING_APPROVAL, Status.QUEUED, Status.DRAINING, Status.RUNNING, Status.VALIDATING)
DONE = (Status.HANDED_OFF, Status.SUCCEEDED, Status.STOPPED, Status.FAILED)


class StepStatus(models.TextChoices):
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


class Domain(models.TextChoices):
    """Failure domains for blast-radius limits and circuit breakers."""

    CLUSTER = "cluster", "Cluster"
    RACK = "rack", "Rack"
    TENANT = "tenant", "Tenant"
