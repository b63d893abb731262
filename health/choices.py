"""Severities, recommended actions and alert states: labels and colours in one place."""

from django.db import models


class Severity(models.TextChoices):
    """How bad a finding is; the remediation policy (issue 6) acts on it.

    catastrophic: the node cannot run work (cordon and act now, even under a job);
    degraded: it should leave production when the current job ends (drain pending);
    warning: recorded and watched; info: recorded only.
    """

    CATASTROPHIC = "catastrophic", "Catastrophic"
    DEGRADED = "degraded", "Degraded"
    WARNING = "warning", "Warning"
    INFO = "info", "Info"


SEVERITY_RANK: dict[str, int] = {Severity.INFO: 0, Severity.WARNING: 1, Severity.DEGRADED: 2, Severity.CATASTROPHIC: 3}
SEVERITY_COLOURS = {
    Severity.CATASTROPHIC: "#c0392b",
    Severity.DEGRADED: "#e67e22",
    Severity.WARNING: "#d4ac0d",
    Severity.INFO: "#7f8c8d",
}


class RecommendedAction(models.TextChoices):
    """The first rung worth trying, as the signal's source recommends it."""

    NONE = "none", "None"
    CHECK_APPLICATION = "check_application", "Check the application"
    RESET_GPU = "reset_gpu", "Reset GPU"
    REBOOT = "reboot", "Reboot"
    POWER_CYCLE = "power_cycle", "Power cycle (BMC)"
    REIMAGE = "reimage", "Reimage"
    INSPECT = "inspect", "Hardware inspection"
    RMA = "rma", "RMA"


class AlertState(models.TextChoices):
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"
