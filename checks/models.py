"""Recorded runs of background work on a node: every task run leaves a row."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from nodes.models import Node, NodeEvent

from .choices import ACTIVE_KINDS, OPEN, RunKind, RunStatus
from .specs import describe_figures

OUTPUT_MAX_BYTES = 64 * 1024  # the tail of a tool's output worth keeping on the run


class CheckRun(models.Model):
    """One run of a check or a follow-up task on a node, with timings, outcome and figures."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="check_runs")
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

    @property
    def figures_text(self) -> str:
        return describe_figures(self.kind, self.figures)
