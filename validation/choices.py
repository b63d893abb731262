"""The Day 1 stages: their order, the node state each one is, the verb that passes it, and
the kind of run that records it. One table, read by the pipeline, pages, API and admin."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models

from nodes.choices import MaintenanceWork, NodeState, RunKind


class Stage(models.TextChoices):
    FIRMWARE = "firmware", "Firmware"
    INVENTORY = "inventory", "Inventory check"
    BURN_IN = "burn_in", "Burn-in"
    FABRIC = "fabric", "Fabric and cable check"
    RELIABILITY = "reliability", "Reliability assessment"


@dataclass(frozen=True)
class StageInfo:
    stage: str
    state: str  # the node state while the stage runs
    pass_verb: str  # nodes.services verb that moves the node on when the stage passes
    run_kind: str  # checks.Run kind that records each run of the stage


STAGES: tuple[StageInfo, ...] = (
    StageInfo(Stage.FIRMWARE, NodeState.FIRMWARE_UPDATE, "pass_firmware", RunKind.STAGE_FIRMWARE),
    StageInfo(Stage.INVENTORY, NodeState.INVENTORY_CHECK, "pass_inventory_check", RunKind.STAGE_INVENTORY),
    StageInfo(Stage.BURN_IN, NodeState.BURN_IN, "pass_burn_in", RunKind.STAGE_BURN_IN),
    StageInfo(Stage.FABRIC, NodeState.FABRIC_CHECK, "pass_fabric_check", RunKind.STAGE_FABRIC),
    StageInfo(Stage.RELIABILITY, NodeState.RELIABILITY_ASSESSMENT, "release_to_production", RunKind.STAGE_RELIABILITY),
)
BY_STAGE = {s.stage: s for s in STAGES}
BY_STATE = {s.state: s for s in STAGES}
BY_RUN_KIND = {s.run_kind: s for s in STAGES}
# The transitions that put a node into a stage: entering a validation pass, or passing the stage before.
ENTERING_TRANSITIONS = ("start_validation", "revalidate", "end_maintenance", *(s.pass_verb for s in STAGES[:-1]))
# The transitions that begin a walk through the Day 1 stages (a pass).
PASS_TRANSITIONS = ("start_validation", "revalidate", "end_maintenance")


class Reentry(models.TextChoices):
    """Why a node walks the Day 1 road: first time, or back from somewhere (re-validation)."""

    FIRST = "first", "First validation"
    TRIAGE = NodeState.TRIAGE.value, "Back from triage"
    REMEDIATING = NodeState.REMEDIATING.value, "Back from remediation"
    REPAIR = NodeState.REPAIR.value, "Back from repair"
    RMA = NodeState.RMA.value, "Back from RMA"
    # The end of an operator's maintenance, by what was done (``nodes.choices.MaintenanceWork``).
    MAINTENANCE_NONE = "maintenance_none", "After maintenance: nothing touched"
    MAINTENANCE_FIRMWARE = "maintenance_firmware", "After maintenance: firmware changed"
    MAINTENANCE_HARDWARE = "maintenance_hardware", "After maintenance: hardware swapped"
    MAINTENANCE_OTHER = "maintenance_other", "After maintenance: other work"


def maintenance_reentry(work: str) -> str:
    """The re-entry reason (and so the plan) of a maintenance ended with ``work`` done."""
    return f"maintenance_{work if work in MaintenanceWork.values else MaintenanceWork.OTHER}"


# The plan a re-entry walks when no ``RevalidationPlan`` row says otherwise: every stage, except
# after maintenance, where what was done says what must be checked again: nothing touched, only
# that the node still holds what its profile says; firmware, the firmware and what it may have
# changed; hardware, what a swapped GPU, NIC, cable or DIMM may break (fabric included).
MAINTENANCE_PLANS: dict[str, list[str]] = {
    Reentry.MAINTENANCE_NONE: [Stage.INVENTORY],
    Reentry.MAINTENANCE_FIRMWARE: [Stage.FIRMWARE, Stage.INVENTORY, Stage.BURN_IN],
    Reentry.MAINTENANCE_HARDWARE: [Stage.INVENTORY, Stage.BURN_IN, Stage.FABRIC, Stage.RELIABILITY],
    Reentry.MAINTENANCE_OTHER: list(Stage.values),
}
