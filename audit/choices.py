"""The fleet auditor's invariants: names, labels and what each one says, in one place."""

from __future__ import annotations

from django.db import models


class Invariant(models.TextChoices):
    """What must hold between what Nodewarden believes and the world (docs/auditor.md)."""

    SCHEDULER_AGREEMENT = "scheduler_agreement", "Scheduler agrees with the node's state"
    FOREIGN_CORDON = "foreign_cordon", "Production node cordoned by someone else"
    UNHANDLED_ALERT = "unhandled_alert", "Production node with an alert nothing acts on"
    LIVE_REMEDIATION = "live_remediation", "Open remediation with a live step or a queued plan"
    BMC_POWER = "bmc_power", "BMC power matches the node's state"
    TRANSIENT_TIMEOUT = "transient_timeout", "No node past its transient state's timeout"


RULE_PREFIX = "audit."  # a breach's finding rule: "audit.<invariant>"

INVARIANT_COLOURS: dict[str, str] = {
    Invariant.SCHEDULER_AGREEMENT: "#e0641e",
    Invariant.FOREIGN_CORDON: "#d9a21b",
    Invariant.UNHANDLED_ALERT: "#c0392b",
    Invariant.LIVE_REMEDIATION: "#7b61c9",
    Invariant.BMC_POWER: "#4a78c2",
    Invariant.TRANSIENT_TIMEOUT: "#8e2a20",
}


def rule_for(invariant: str) -> str:
    return f"{RULE_PREFIX}{invariant}"
