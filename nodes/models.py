"""Nodes, their GPUs, and their append-only history.

The lifecycle is declared here and nowhere else. Transition methods only check
and set fields: locking, saving, history and follow-up work belong to
``nodes.services``, the only road to a state change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import RETURN_VALUE, ConcurrentTransitionMixin, FSMField, Transition, transition

from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant
from nodewarden.records import AppendOnlyQuerySet

from .choices import (
    ACTIVE_KINDS,
    DAY1_STAGES,
    OPEN,
    STAGE_KINDS,
    ActorKind,
    EventKind,
    GpuHealth,
    NodeState,
    RunKind,
    RunStatus,
)

S = NodeState
OPERATE = "nodes.operate_node"  # run lifecycle transitions from the portal and API
FORCE = "nodes.force_node_state"  # override the state machine (admin, audited)

# Queues a transition's follow-up work runs on (see nodewarden/celery.py).
Q_PROVISIONING, Q_VALIDATION, Q_REMEDIATION = "provisioning", "validation", "remediation"


def _meta(label: str, queue: str, *, style: str = "primary", admin_only: bool = False) -> dict[str, Any]:
    return {"label": label, "queue": queue, "style": style, "admin_only": admin_only}


class Node(ConcurrentTransitionMixin, models.Model):
    """A GPU server, from enrollment to decommission."""

    if TYPE_CHECKING:
        # django-fsm-2 imports typing.override in a try block that fails on Python 3.11, so to mypy
        # the mixin's __init__ is Any, and Node(...) and Node.objects with it. Typed here again.
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        # FSMField adds this method for the "state" field when the class is created.
        def get_available_user_state_transitions(self, user: Any) -> Iterator[Transition]: ...

    hostname = models.CharField(max_length=253, unique=True)
    serial = models.CharField(max_length=100, unique=True)
    bmc_address = models.CharField(max_length=255, help_text="BMC host or IP (Redfish/IPMI).")
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="nodes")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, null=True, blank=True, related_name="nodes")
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, null=True, blank=True, related_name="nodes")
    rack_unit = models.PositiveSmallIntegerField(null=True, blank=True)
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="nodes",
        help_text="Customer renting the node; empty for unassigned capacity.",
    )
    hardware_profile = models.ForeignKey(HardwareProfile, on_delete=models.PROTECT, related_name="nodes")
    persona = models.ForeignKey(Persona, on_delete=models.PROTECT, null=True, blank=True, related_name="nodes")

    state = FSMField(choices=NodeState.choices, default=NodeState.ENROLLED, protected=True, db_index=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    # True while the node walks the Day 1 stages again after triage, remediation, repair or RMA.
    is_revalidation = models.BooleanField(default=False)

    created = models.DateTimeField(auto_now_add=True)
    last_updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hostname"]
        permissions = [
            ("operate_node", "Can run lifecycle transitions on nodes"),
            ("force_node_state", "Can force a node into any state (audited)"),
        ]
        indexes = [models.Index(fields=["state", "state_changed_at"])]

    def __str__(self) -> str:
        return self.hostname

    # --- Day 0 -----------------------------------------------------------
    @transition(
        field=state,
        source=S.ENROLLED,
        target=S.INITIALIZING,
        permission=OPERATE,
        custom=_meta("Start initialization", Q_PROVISIONING),
    )
    def start_initialization(self) -> None:
        """Boot image, network and cloud-init are being prepared."""

    @transition(
        field=state,
        source=S.INITIALIZING,
        target=S.ONBOARD,
        permission=OPERATE,
        custom=_meta("Mark onboard", Q_PROVISIONING),
    )
    def mark_onboard(self) -> None:
        """The node booted and its agent joined the portal."""

    # --- Day 1 -----------------------------------------------------------
    @transition(
        field=state,
        source=S.ONBOARD,
        target=S.FIRMWARE_UPDATE,
        permission=OPERATE,
        custom=_meta("Start validation", Q_VALIDATION),
    )
    def start_validation(self) -> None:
        """First walk through the Day 1 stages."""
        self.is_revalidation = False

    @transition(
        field=state,
        source=[S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA],
        target=S.FIRMWARE_UPDATE,
        permission=OPERATE,
        custom=_meta("Re-validate", Q_VALIDATION),
    )
    def revalidate(self) -> None:
        """Back from triage, remediation, repair or RMA: every Day 1 check again."""
        self.is_revalidation = True

    @transition(
        field=state,
        source=S.FIRMWARE_UPDATE,
        target=S.INVENTORY_CHECK,
        permission=OPERATE,
        custom=_meta("Pass firmware", Q_VALIDATION, style="success"),
    )
    def pass_firmware(self) -> None:
        """Firmware matches the hardware profile's baseline."""

    @transition(
        field=state,
        source=S.INVENTORY_CHECK,
        target=S.BURN_IN,
        permission=OPERATE,
        custom=_meta("Pass inventory check", Q_VALIDATION, style="success"),
    )
    def pass_inventory_check(self) -> None:
        """The node holds what its hardware profile says."""

    @transition(
        field=state,
        source=S.BURN_IN,
        target=S.FABRIC_CHECK,
        permission=OPERATE,
        custom=_meta("Pass burn-in", Q_VALIDATION, style="success"),
    )
    def pass_burn_in(self) -> None:
        """GPU burn-in and NCCL tests met their thresholds."""

    @transition(
        field=state,
        source=S.FABRIC_CHECK,
        target=S.RELIABILITY_ASSESSMENT,
        permission=OPERATE,
        custom=_meta("Pass fabric check", Q_VALIDATION, style="success"),
    )
    def pass_fabric_check(self) -> None:
        """InfiniBand cabling matches the plan."""

    @transition(
        field=state,
        source=S.RELIABILITY_ASSESSMENT,
        target=S.PRODUCTION,
        permission=OPERATE,
        custom=_meta("Release to production", Q_VALIDATION, style="success"),
    )
    def release_to_production(self) -> None:
        """All Day 1 stages passed."""
        self.is_revalidation = False

    @transition(
        field=state,
        source=[S.INITIALIZING, *DAY1_STAGES],
        target=S.TRIAGE,
        permission=OPERATE,
        custom=_meta("Fail validation", Q_REMEDIATION, style="danger"),
    )
    def fail_validation(self) -> None:
        """A Day 0 or Day 1 stage failed."""

    # --- Day 2+ ----------------------------------------------------------
    @transition(
        field=state,
        source=S.PRODUCTION,
        target=S.DRAIN_PENDING,
        permission=OPERATE,
        custom=_meta("Drain when job ends", Q_REMEDIATION, style="warning"),
    )
    def request_drain(self) -> None:
        """Leave production once the customer's current job ends."""

    @transition(
        field=state,
        source=S.DRAIN_PENDING,
        target=S.PRODUCTION,
        permission=OPERATE,
        custom=_meta("Cancel drain", Q_REMEDIATION),
    )
    def cancel_drain(self) -> None:
        """The reason to drain went away before the job ended."""

    @transition(
        field=state,
        source=[S.PRODUCTION, S.DRAIN_PENDING],
        target=S.DRAINING,
        permission=OPERATE,
        custom=_meta("Drain now", Q_REMEDIATION, style="warning"),
    )
    def start_draining(self) -> None:
        """No new work; the workload scheduler moves work off the node."""

    @transition(
        field=state,
        source=S.DRAINING,
        target=RETURN_VALUE(S.TRIAGE, S.MAINTENANCE),
        permission=OPERATE,
        custom=_meta("Complete drain", Q_REMEDIATION),
    )
    def complete_drain(self, maintenance: bool = False) -> str:
        """No customer work left on the node: it lands in maintenance when an operator planned the
        drain (``nodes.services.planned_maintenance``), in triage when findings took it out."""
        return S.MAINTENANCE if maintenance else S.TRIAGE

    @transition(
        field=state,
        source=S.PRODUCTION,
        target=S.DRAIN_PENDING,
        permission=OPERATE,
        custom=_meta("Start maintenance", Q_REMEDIATION, style="warning"),
    )
    def start_maintenance(self) -> None:
        """An operator's planned work: the node drains once its current job ends, then waits in
        maintenance (not triage) until the operator ends it."""

    @transition(
        field=state,
        source=S.MAINTENANCE,
        target=S.FIRMWARE_UPDATE,
        permission=OPERATE,
        custom={**_meta("End maintenance", Q_VALIDATION, style="success"), "own_form": True},
    )
    def end_maintenance(self) -> None:
        """The operator's work is done: back through the re-validation plan that what was done
        picks (``validation.choices.MAINTENANCE_PLANS``), then production."""
        self.is_revalidation = True

    @transition(
        field=state,
        source=[S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING],
        target=S.TRIAGE,
        permission=OPERATE,
        custom=_meta("Cordon now", Q_REMEDIATION, style="danger"),
    )
    def cordon(self) -> None:
        """Catastrophic finding: out of production at once, job or not."""

    @transition(
        field=state,
        source=S.TRIAGE,
        target=S.REMEDIATING,
        permission=OPERATE,
        custom=_meta("Start remediation", Q_REMEDIATION),
    )
    def start_remediation(self) -> None:
        """An automated fix (reset, reboot, power cycle, reimage) is running."""

    @transition(
        field=state,
        source=S.REMEDIATING,
        target=S.TRIAGE,
        permission=OPERATE,
        custom=_meta("Remediation failed", Q_REMEDIATION, style="danger"),
    )
    def fail_remediation(self) -> None:
        """The fix did not work; back to triage for the next rung."""

    @transition(
        field=state,
        source=[S.TRIAGE, S.REMEDIATING],
        target=S.REPAIR,
        permission=OPERATE,
        custom=_meta("Send to repair", Q_REMEDIATION, style="danger"),
    )
    def send_to_repair(self) -> None:
        """A technician's hands are needed."""

    @transition(
        field=state,
        source=[S.TRIAGE, S.REPAIR],
        target=S.RMA,
        permission=OPERATE,
        custom=_meta("Return to vendor (RMA)", Q_REMEDIATION, style="danger"),
    )
    def send_to_rma(self) -> None:
        """Hardware goes back to the vendor."""

    @transition(
        field=state,
        source=[S.ENROLLED, S.INITIALIZING, S.ONBOARD, S.MAINTENANCE, S.TRIAGE, S.REPAIR, S.RMA],
        target=S.DECOMMISSIONED,
        permission=OPERATE,
        custom=_meta("Decommission", Q_PROVISIONING, style="danger"),
    )
    def decommission(self) -> None:
        """The node leaves the fleet for good."""

    # --- Override --------------------------------------------------------
    @transition(
        field=state,
        source="*",
        target=RETURN_VALUE(*NodeState.values),
        permission=FORCE,
        custom=_meta("Force state", Q_REMEDIATION, style="danger", admin_only=True),
    )
    def force_state(self, target: str) -> str:
        """Admin override past the state machine's rules; always audited."""
        if target not in NodeState.values:
            raise ValueError(f"Unknown state {target!r}")
        self.is_revalidation = False
        return target


class GPU(models.Model):
    """One GPU in a node, with its own health (``nodes.services``: mark_gpu_suspect, fence_gpu,
    clear_gpu are the only road to a change of it; each writes a NodeEvent of kind ``gpu``)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True, verbose_name="UUID")
    serial = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=100, blank=True)
    health = models.CharField(max_length=10, choices=GpuHealth.choices, default=GpuHealth.HEALTHY, editable=False)
    health_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    health_reason = models.TextField(blank=True, editable=False, help_text="Why the GPU is in its health state.")

    class Meta:
        ordering = ["node", "index"]
        verbose_name = "GPU"
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="unique_gpu_index_per_node")]

    def __str__(self) -> str:
        return f"{self.node_id}:GPU{self.index}"

    @property
    def is_usable(self) -> bool:
        """Work may run on it: a suspect GPU still serves (it is watched), a fenced one does not."""
        return self.health != GpuHealth.FENCED


# The kinds of event that change a node's state (what the reports read as its history of states).
STATE_CHANGE_KINDS: tuple[str, ...] = (EventKind.TRANSITION.value, EventKind.FORCED.value)


class NodeEvent(models.Model):
    """One append-only row of a node's life: a state change, a finding, an action or a note.

    The node and the actor are kept both as a foreign key and as a copied name,
    so the record survives the deletion of either.
    """

    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, related_name="events")
    hostname = models.CharField(max_length=253)
    created = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    transition = models.CharField(max_length=50, blank=True)
    source_state = models.CharField(max_length=30, choices=NodeState.choices, blank=True)
    target_state = models.CharField(max_length=30, choices=NodeState.choices, blank=True)
    reason = models.TextField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    actor_name = models.CharField(max_length=150, help_text="Username, or system:<component>.")
    correlation_id = models.CharField(max_length=100, blank=True, help_text="Request or task id.")
    details = models.JSONField(default=dict, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["node", "-created"]),
            models.Index(fields=["-created"]),
            # The reports read state changes only (a minority of the rows): these two answer from the
            # index alone (no heap page per row). By time: a period's flows, of the fleet or of one
            # cluster's or tenant's nodes. By flow: the nodes behind one band of the Sankey.
            models.Index(
                fields=["created"],
                include=["node", "source_state", "target_state"],
                condition=Q(kind__in=STATE_CHANGE_KINDS),
                name="nodeevent_change_time",
            ),
            models.Index(
                fields=["source_state", "target_state", "created"],
                include=["node", "hostname"],
                condition=Q(kind__in=STATE_CHANGE_KINDS),
                name="nodeevent_change_flow",
            ),
        ]

    def __str__(self) -> str:
        if self.source_state or self.target_state:
            return f"{self.hostname}: {self.source_state} -> {self.target_state}"
        return f"{self.hostname}: {self.kind}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise PermissionError("Node history is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("Node history is append-only")

    @property
    def is_state_change(self) -> bool:
        return self.kind in STATE_CHANGE_KINDS


class StateCountSnapshot(models.Model):
    """How many nodes were in each state at a moment, per cluster and tenant.

    Written hourly by Celery beat; the fleet chart of state counts over time reads it.
    Zero counts are not stored.
    """

    taken_at = models.DateTimeField(db_index=True)
    state = models.CharField(max_length=30, choices=NodeState.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    count = models.PositiveIntegerField()

    class Meta:
        ordering = ["taken_at"]
        indexes = [models.Index(fields=["tenant", "taken_at"])]

    def __str__(self) -> str:
        return f"{self.state}: {self.count} at {self.taken_at:%Y-%m-%d %H:%M}"


class DailyStateCount(models.Model):
    """The hourly snapshots of one finished day rolled up per state, cluster and tenant.

    Written by ``nodes.statecounts.roll_up`` (the hourly snapshot task runs it); charts of weeks and
    months read these rows for finished days and the hourly snapshots only for the rest, so a
    90-day chart reads about 130 rows a day instead of 3,000.
    """

    day = models.DateField()
    state = models.CharField(max_length=30, choices=NodeState.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    node_hours = models.PositiveIntegerField(help_text="The day's hourly counts summed.")
    samples = models.PositiveSmallIntegerField(help_text="Snapshots taken that day, fleet-wide (24 when none missed).")

    class Meta:
        ordering = ["day"]
        indexes = [models.Index(fields=["day"]), models.Index(fields=["tenant", "day"])]

    def __str__(self) -> str:
        return f"{self.state}: {self.node_hours} node-hours on {self.day}"


OUTPUT_MAX_BYTES = 64 * 1024  # the tail of a tool's output worth keeping on the run


class Run(models.Model):
    """A recorded background run on a node, with timings, outcome and figures: an active check the
    agent ran (kinds in ACTIVE_KINDS), a Day 1 stage (STAGE_KINDS) or a transition's follow-up.
    "Check" names only the first; "run" names them all (docs/architecture.md, "Names")."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=40, choices=RunKind.choices)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    trigger = models.ForeignKey(
        NodeEvent,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="runs",
        help_text="The history row (e.g. a transition) that asked for this run.",
    )
    task_id = models.CharField(max_length=100, blank=True)
    created = models.DateTimeField(default=timezone.now)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    summary = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    # Active checks (requested from the portal, run by the node agent).
    params = models.JSONField(default=dict, blank=True, help_text="Normalised parameters the agent runs with.")
    figures = models.JSONField(default=dict, blank=True, help_text='Measured numbers, e.g. {"busbw_gbps": 362}.')
    output = models.TextField(blank=True, help_text="The tool's output as the agent sent it (at most 64 KiB).")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    requested_reason = models.TextField(blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True, help_text="When the node agent took the run.")
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="A claimed run without a result by then becomes an error."
    )
    scheduler_hold = models.BooleanField(
        default=False,
        help_text="The node may be held (drained/cordoned) in its workload scheduler for this run and not "
        "given back yet: true from just before the hold is taken until it is released or found "
        "no longer the check's. A production node drained by us is legitimate only while a run "
        "has this set.",
    )

    class Meta:
        # Moved from the checks app (where active checks are run) so that every app can record
        # its runs, and renamed from CheckRun: the table keeps its name.
        db_table = "checks_checkrun"
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["node", "-created"]),
            # Day 1 yield, durations and failures: stage runs of one kind and status finished in a window.
            models.Index(fields=["kind", "status", "finished"], name="checkrun_kind_status_finished"),
            # The sweep for claimed runs past their deadline reads only the few running rows.
            models.Index(fields=["deadline"], condition=Q(status=RunStatus.RUNNING), name="checkrun_running_deadline"),
            # The few runs whose scheduler hold is not given back yet: the release sweep and the fleet audit.
            models.Index(fields=["node"], condition=Q(scheduler_hold=True), name="checkrun_scheduler_hold"),
        ]
        constraints = [
            # A re-delivered task finds its run instead of doing the work twice.
            models.UniqueConstraint(fields=["trigger", "kind"], name="one_run_per_trigger_and_kind"),
            # Two operators asking at once cannot queue the same check twice on a node.
            models.UniqueConstraint(
                fields=["node", "kind"],
                condition=Q(kind__in=ACTIVE_KINDS, status__in=OPEN),
                name="one_open_active_check_per_node_and_kind",
            ),
            # A node walks one Day 1 stage at a time: a second starter (a late follow-up, the orphan
            # sweep, an operator) finds the open run instead of opening another that would withdraw
            # the first's checks (validation.services._open_run).
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(kind__in=STAGE_KINDS, status=RunStatus.RUNNING),
                name="one_open_stage_run_per_node",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.node_id}: {self.status}"

    @property
    def duration_seconds(self) -> float | None:
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None

    @property
    def is_active_check(self) -> bool:
        return self.kind in ACTIVE_KINDS
