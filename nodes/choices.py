"""Lifecycle states, their labels, colours and phases: the one place tables,
filters, charts and the API read them from."""

from __future__ import annotations

from django.db import models


class NodeState(models.TextChoices):
    """Where a node is in its life, named as an operator says it."""

    # Day 0
    ENROLLED = "enrolled", "Enrolled"
    INITIALIZING = "initializing", "Initializing"
    ONBOARD = "onboard", "Onboard"
    # Day 1 (also the road back: re-validation)
    FIRMWARE_UPDATE = "firmware_update", "Firmware update"
    INVENTORY_CHECK = "inventory_check", "Inventory check"
    BURN_IN = "burn_in", "Burn-in"
    FABRIC_CHECK = "fabric_check", "Fabric check"
    RELIABILITY_ASSESSMENT = "reliability_assessment", "Reliability assessment"
    # Day 2+
    PRODUCTION = "production", "Production"
    DRAIN_PENDING = "drain_pending", "Drain pending"
    DRAINING = "draining", "Draining"
    # An operator's planned work (or plain planned drain): out of production, not in trouble.
    MAINTENANCE = "maintenance", "Maintenance"
    TRIAGE = "triage", "Triage"
    REMEDIATING = "remediating", "Remediation in progress"
    REPAIR = "repair", "Repair"
    RMA = "rma", "RMA"
    DECOMMISSIONED = "decommissioned", "Decommissioned"


class Phase(models.TextChoices):
    """The coarse phase a state belongs to; drives grouping on the dashboard."""

    DAY0 = "day0", "Day 0: initialization"
    DAY1 = "day1", "Day 1: validation"
    PRODUCTION = "production", "In production"
    OUT = "out", "Out of production"
    RETIRED = "retired", "Retired"


# Column headings where space is short (the fleet overview's table).
PHASE_SHORT: dict[str, str] = {
    Phase.DAY0: "Day 0",
    Phase.DAY1: "Day 1",
    Phase.PRODUCTION: "Production",
    Phase.OUT: "Out",
    Phase.RETIRED: "Retired",
}

S = NodeState

DAY1_STAGES: tuple[str, ...] = (
    S.FIRMWARE_UPDATE,
    S.INVENTORY_CHECK,
    S.BURN_IN,
    S.FABRIC_CHECK,
    S.RELIABILITY_ASSESSMENT,
)

STATE_PHASE: dict[str, str] = {
    S.ENROLLED: Phase.DAY0,
    S.INITIALIZING: Phase.DAY0,
    S.ONBOARD: Phase.DAY0,
    **dict.fromkeys(DAY1_STAGES, Phase.DAY1),
    S.PRODUCTION: Phase.PRODUCTION,
    S.DRAIN_PENDING: Phase.PRODUCTION,
    S.DRAINING: Phase.OUT,
    S.MAINTENANCE: Phase.OUT,
    S.TRIAGE: Phase.OUT,
    S.REMEDIATING: Phase.OUT,
    S.REPAIR: Phase.OUT,
    S.RMA: Phase.OUT,
    S.DECOMMISSIONED: Phase.RETIRED,
}

# States an operator should look at: the node is not serving and needs work. Maintenance is not
# trouble: an operator took the node out on purpose and ends it (``end_maintenance``).
TROUBLE_STATES: tuple[str, ...] = (S.DRAIN_PENDING, S.DRAINING, S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA)

# Badge colours (CSS custom property suffixes in static/css/app.css, and chart colours).
STATE_COLOURS: dict[str, str] = {
    S.ENROLLED: "#8b95a5",
    S.INITIALIZING: "#6c8ebf",
    S.ONBOARD: "#4a78c2",
    S.FIRMWARE_UPDATE: "#7b61c9",
    S.INVENTORY_CHECK: "#8d5fd3",
    S.BURN_IN: "#a05ad6",
    S.FABRIC_CHECK: "#b355cf",
    S.RELIABILITY_ASSESSMENT: "#c24fc0",
    S.PRODUCTION: "#2e9e5b",
    S.DRAIN_PENDING: "#d9a21b",
    S.DRAINING: "#e08a1e",
    S.MAINTENANCE: "#3f8fa6",
    S.TRIAGE: "#e0641e",
    S.REMEDIATING: "#d94a3a",
    S.REPAIR: "#c0392b",
    S.RMA: "#8e2a20",
    S.DECOMMISSIONED: "#555c66",
}

# Fixed positions of the states on the lifecycle graph (x: left to right through life,
# y: main road at 0, detours above/below). Hand-laid so the picture stays stable.
STATE_LAYOUT: dict[str, tuple[float, float]] = {
    S.ENROLLED: (0, 0),
    S.INITIALIZING: (1, 0),
    S.ONBOARD: (2, 0),
    S.FIRMWARE_UPDATE: (3, 0),
    S.INVENTORY_CHECK: (4, 0),
    S.BURN_IN: (5, 0),
    S.FABRIC_CHECK: (6, 0),
    S.RELIABILITY_ASSESSMENT: (7, 0),
    S.PRODUCTION: (8, 0),
    S.DRAIN_PENDING: (8, -1.2),
    S.DRAINING: (7, -1.8),
    S.MAINTENANCE: (4, -1.4),
    S.TRIAGE: (5.5, -2.2),
    S.REMEDIATING: (4, -3.2),
    S.REPAIR: (5.5, -3.6),
    S.RMA: (7, -3.4),
    S.DECOMMISSIONED: (1.5, -3.0),
}


class MaintenanceWork(models.TextChoices):
    """What was done to a node in maintenance: it picks the re-validation plan that ends it
    (``validation.choices.MAINTENANCE_PLANS``): the less was touched, the shorter the road back."""

    NONE = "none", "Nothing touched"
    FIRMWARE = "firmware", "Firmware changed"
    HARDWARE = "hardware", "Hardware swapped (GPU, NIC, cable, memory)"
    OTHER = "other", "Other"


class ActorKind(models.TextChoices):
    """Who acted: a person, or a component of the system."""

    USER = "user", "User"
    SYSTEM = "system", "System"


class EventKind(models.TextChoices):
    """What a history row records."""

    TRANSITION = "transition", "State change"
    FORCED = "forced", "Forced state change"
    FINDING = "finding", "Finding"
    ACTION = "action", "Action"
    NOTE = "note", "Operator note"
    GPU = "gpu", "GPU state change"


EVENT_KIND_COLOURS: dict[str, str] = {
    EventKind.TRANSITION: "#4a78c2",
    EventKind.FORCED: "#c0392b",
    EventKind.FINDING: "#e0641e",
    EventKind.ACTION: "#2e9e5b",
    EventKind.NOTE: "#8b95a5",
    EventKind.GPU: "#a05ad6",
}


class GpuHealth(models.TextChoices):
    """One GPU's own health, apart from its node's lifecycle state: a finding naming the GPU makes
    it suspect, an operator fences it (no work may use it), re-validation or an operator clears it."""

    HEALTHY = "healthy", "Healthy"
    SUSPECT = "suspect", "Suspect"
    FENCED = "fenced", "Fenced"


GPU_HEALTH_COLOURS: dict[str, str] = {
    GpuHealth.HEALTHY: "#2e9e5b",
    GpuHealth.SUSPECT: "#d9a21b",
    GpuHealth.FENCED: "#c0392b",
}


# --- Recorded runs of background work on a node (``Run``): every reader's one vocabulary.


class RunKind(models.TextChoices):
    """What a run did. Later stages (firmware, burn-in, ...) add their kinds here."""

    TRANSITION_FOLLOWUP = "transition_followup", "Transition follow-up"
    # Active checks: requested from the portal, run by the node agent when the node is idle.
    GPU_STRESS = "gpu_stress", "GPU stress test"
    DCGM_DIAG = "dcgm_diag", "DCGM diagnostics"
    NCCL_TEST = "nccl_test", "NCCL all-reduce test"
    MEMORY_TEST = "memory_test", "GPU memory test"
    # A workload named in the agent's config (e.g. a short training step), judged by the profile's figures.
    TRAINING_STEP = "training_step", "Training-step check"
    # Day 1 stages (validation app): one run per stage entered, triggered by the transition into it.
    STAGE_FIRMWARE = "stage_firmware", "Firmware stage"
    STAGE_INVENTORY = "stage_inventory", "Inventory check stage"
    STAGE_BURN_IN = "stage_burn_in", "Burn-in stage"
    STAGE_FABRIC = "stage_fabric", "Fabric and cable check stage"
    STAGE_RELIABILITY = "stage_reliability", "Reliability assessment stage"


ACTIVE_KINDS: tuple[str, ...] = (
    RunKind.GPU_STRESS,
    RunKind.DCGM_DIAG,
    RunKind.NCCL_TEST,
    RunKind.MEMORY_TEST,
    RunKind.TRAINING_STEP,
)
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

RUN_STATUS_COLOURS: dict[str, str] = {
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
