"""Trend flags (what the daily evaluation found, open until the condition is gone) and the
evaluation runs themselves (when, how many nodes, the top lemon offenders). Only
``trends.services`` writes either."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from nodes.models import Node

from .choices import FlagKind


class TrendFlag(models.Model):
    """A node degrading in one figure, under its peers in one figure, or a lemon: open while the
    condition holds (``cleared_at`` empty), with the evidence of the latest evaluation."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="trend_flags")
    kind = models.CharField(max_length=20, choices=FlagKind.choices)
    figure = models.CharField(max_length=60, help_text='e.g. "nccl_busbw_gbps", "ecc_corrected", "lemon_score".')
    score = models.FloatField(
        help_text="degrading: change per week (% for bandwidth and TFLOP/s); "
        "underperformer: % below the peers' median; lemon: score 0-100."
    )
    evidence = models.JSONField(default=dict, blank=True, help_text="The points, fit, peers or signals behind it.")
    window_days = models.PositiveSmallIntegerField()
    finding = models.ForeignKey("health.Finding", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(default=timezone.now, help_text="The last evaluation that saw it.")
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["kind", "cleared_at"], name="trendflag_kind_open"),
            models.Index(fields=["node", "-created"], name="trendflag_node_created"),
        ]
        constraints = [
            # One open flag per node, kind and figure: a second evaluation refreshes it, never doubles it.
            models.UniqueConstraint(
                fields=["node", "kind", "figure"], condition=Q(cleared_at__isnull=True), name="one_open_trend_flag"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.kind} {self.figure}{'' if self.is_open else ' (cleared)'}"

    @property
    def is_open(self) -> bool:
        return self.cleared_at is None


class TrendRun(models.Model):
    """One daily evaluation over the fleet: what it looked at and what it changed."""

    started = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)
    nodes = models.PositiveIntegerField(default=0, help_text="Nodes evaluated.")
    opened = models.PositiveIntegerField(default=0)
    refreshed = models.PositiveIntegerField(default=0)
    cleared = models.PositiveIntegerField(default=0)
    params = models.JSONField(default=dict, blank=True, help_text="Windows and thresholds used.")
    top_lemons = models.JSONField(
        default=list, blank=True, help_text="The highest lemon scores: node, hostname, score, signals, contributions."
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started", "-id"]

    def __str__(self) -> str:
        return f"trend run {self.pk} at {self.started:%Y-%m-%d %H:%M}"
