"""Kinds and outcomes of recorded runs, with their badge colours: one place for all readers."""

from django.db import models


class RunKind(models.TextChoices):
    """What a run did. Later stages (firmware, burn-in, ...) add their kinds here."""

    TRANSITION_FOLLOWUP = "transition_followup", "Transition follow-up"
    # Active checks: requested from the portal, run by the node agent when the node is idle.
    GPU_STRESS = "gpu_stress", "GPU stress test"
    DCGM_DIAG = "dcgm_diag", "DCGM diagnostics"
    NCCL_TEST = "nccl_test", "NCCL all-reduce test"
    MEMORY_TEST = "memory_test", "GPU memory test"
    # Day 1 stages (validation app): one run per stage entered, triggered by the transition into it.
    STAGE_FIRMWARE = "stage_firmware", "Firmware stage"
    STAGE_INVENTORY = "stage_inventory", "Inventory check stage"
    STAGE_BURN_IN = "stage_burn_in", "Burn-in stage"
    STAGE_FABRIC = "stage_fabric", "Fabric and cable check stage"
    STAGE_RELIABILITY = "stage_reliability", "Reliability assessment stage"


ACTIVE_KINDS: tuple[str, ...] = (RunKind.GPU_STRESS, RunKind.DCGM_DIAG, RunKind.NCCL_TEST, RunKind.MEMORY_TEST)
STAGE_KINDS: tuple[str, ...] = (
    RunKind.STAGE_FIRMWARE,
    RunKind.STAGE_INVENTORY,
    RunKind.STAGE_BURN_IN,
    RunKind.STAGE_FABRIC,
    RunKind.STAGE_RELIABILITY,
)


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"  # for an active check: requested, not yet claimed by the agent
    RUNNING = "running", "Running"  # for an active check: claimed by the agent
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    # The tool is missing on the node (no dcgmi, no nccl-tests): not a hardware failure.
    NOT_AVAILABLE = "not_available", "Not available"
    SUPERSEDED = "superseded", "Superseded"
    CANCELLED = "cancelled", "Cancelled"
    SKIPPED = "skipped", "Skipped"  # a Day 1 stage an operator skipped (audited) or the plan leaves out
    ERROR = "error", "Error"


FINISHED = (
    RunStatus.PASSED,
    RunStatus.FAILED,
    RunStatus.NOT_AVAILABLE,
    RunStatus.SUPERSEDED,
    RunStatus.CANCELLED,
    RunStatus.SKIPPED,
    RunStatus.ERROR,
)
OPEN = (RunStatus.QUEUED, RunStatus.RUNNING)
# What a node agent may report for a check it ran.
AGENT_OUTCOMES = (RunStatus.PASSED, RunStatus.FAILED, RunStatus.NOT_AVAILABLE, RunStatus.ERROR)

STATUS_COLOURS: dict[str, str] = {
    RunStatus.QUEUED: "#8b95a5",
    RunStatus.RUNNING: "#4a78c2",
    RunStatus.PASSED: "#2e9e5b",
    RunStatus.FAILED: "#c0392b",
    RunStatus.NOT_AVAILABLE: "#7f8c8d",
    RunStatus.SUPERSEDED: "#8b95a5",
    RunStatus.CANCELLED: "#8b95a5",
    RunStatus.SKIPPED: "#b0a14f",
    RunStatus.ERROR: "#e0641e",
}
