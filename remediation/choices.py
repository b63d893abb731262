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
    "reset_gpu": Rung.GPU_RESET,
    "reboot": Rung.REBOOT,
    "power_cycle": Rung.POWER_CYCLE,
    "reimage": Rung.REIMAGE,
    "inspect": Rung.REPAIR,
    "rma": Rung.RMA,
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
    CLEARED = "cleared", "Cleared by itself before the job ended: stood down"
    FENCED = "fenced", "GPU fenced: the node serves on with fewer GPUs"
    STOPPED = "stopped", "Stopped by an operator"
    FAILED = "failed", "Failed"


OPEN = (Status.AWAITING_APPROVAL, Status.QUEUED, Status.DRAINING, Status.RUNNING, Status.VALIDATING)
DONE = (Status.HANDED_OFF, Status.SUCCEEDED, Status.CLEARED, Status.FENCED, Status.STOPPED, Status.FAILED)
# What the operator verbs accept (remediation.services guards; the node panel offers the same).
APPROVABLE = (Status.AWAITING_APPROVAL,)
SKIPPABLE = (Status.RUNNING, Status.QUEUED, Status.AWAITING_APPROVAL)


class StepStatus(models.TextChoices):
    """A step is passed only once its success check has: the re-validation that follows the
    action (or, for a reimage, the reinstalled node's rejoin and then re-validation)."""

    RUNNING = "running", "Running"
    VERIFYING = "verifying", "Done; re-validating"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


STATUS_COLOURS: dict[str, str] = {
    Status.AWAITING_APPROVAL: "#7b61c9",
    Status.QUEUED: "#8b95a5",
    Status.DRAINING: "#d9a21b",
    Status.RUNNING: "#e0641e",
    Status.VALIDATING: "#4a78c2",
    Status.HANDED_OFF: "#c0392b",
    Status.SUCCEEDED: "#2e9e5b",
    Status.CLEARED: "#7fb89a",
    Status.FENCED: "#5a8f7b",
    Status.STOPPED: "#555c66",
    Status.FAILED: "#8e2a20",
}
STEP_COLOURS: dict[str, str] = {
    StepStatus.RUNNING: "#e0641e",
    StepStatus.VERIFYING: "#4a78c2",
    StepStatus.PASSED: "#2e9e5b",
    StepStatus.FAILED: "#c0392b",
    StepStatus.SKIPPED: "#8b95a5",
}


class Domain(models.TextChoices):
    """Failure domains for blast-radius limits and circuit breakers."""

    CLUSTER = "cluster", "Cluster"
    RACK = "rack", "Rack"
    TENANT = "tenant", "Tenant"
