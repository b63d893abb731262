"""Recorded runs of background work on a node: every task run leaves a row."""
from __future__ import annotations

from django.db import models
from django.utils import timezone

from nodes.models import Node, NodeEvent

from .choices import RunKind, RunStatus


class CheckRun(models.Model):
    """One run of a check or a follow-up task on a node, with timings, outcome and figures."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="check_runs")
    kind = models.CharField(max_length=40, choices=RunKind.choices)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    trigger = models.ForeignKey(
        NodeEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs",
        help_text="The history row (e.g. a transition) that asked for this run.",
    )
    task_id = models.CharField(max_length=100, blank=True)
    created = models.DateTimeField(default=timezone.now)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    summary = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["node", "-created"])]
        constraints = [
            # A re-delivered task finds its run instead of doing the work twice.
            models.UniqueConstraint(fields=["trigger", "kind"], name="one_run_per_trigger_and_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.node_id}: {self.status}"

    @property
    def duration_seconds(self) -> float | None:
        if self.started and self.finished:
            return (self.finished - self.started).total_seconds()
        return None
