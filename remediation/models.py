"""Remediation: policies, one remediation per incident with its steps up the ladder, and the
safety rails (holds, maintenance windows, blast-radius limits, circuit breakers)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from fleet.models import Cluster, Rack, Tenant
from nodes.models import Node

from .choices import OPEN, Domain, Rung, Status, StepStatus, Urgency


class RemediationPolicy(models.Model):
    """Which findings lead to which plan: matched by rule, XID, severity and component, in
    priority order (lowest first); the first match decides. Empty match fields match anything."""

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    priority = models.PositiveSmallIntegerField(default=100)
    match_rule = models.CharField(max_length=60, blank=True, help_text="health rule, e.g. xid, gpu_temperature.")
    match_xid = models.PositiveIntegerField(null=True, blank=True)
    match_severity = models.CharField(max_length=20, blank=True, help_text="catastrophic, degraded, warning, info.")
    match_component = models.CharField(max_length=60, blank=True, help_text="A substring of the finding's subject.")
    urgency = models.CharField(max_length=20, choices=Urgency.choices)
    first_rung = models.CharField(
        max_length=20,
        choices=Rung.choices,
        blank=True,
        help_text="Blank: the finding's recommended action (the XID catalog's), else reboot.",
    )
    requires_approval = models.BooleanField(default=False, help_text="An operator approves before anything is done.")
    disruptive_only_in_window = models.BooleanField(
        default=False, help_text="Reboot, power cycle and reimage wait for a maintenance window."
    )
    shadow = models.BooleanField(default=False, help_text="Record what would be done; do nothing.")
    stand_down_if_cleared = models.BooleanField(
        default=True,
        help_text="A drain waiting for the job to end is cancelled if the finding's condition "
        "cleared meanwhile (a link that flapped once, a passing hot spell).",
    )

    class Meta:
        ordering = ["priority", "name"]
        verbose_name_plural = "remediation policies"

    def __str__(self) -> str:
        return self.name


class Remediation(models.Model):
    """One incident on one node: the finding, the policy, the rung, and why."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="remediations")
    finding = models.ForeignKey("health.Finding", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    policy = models.ForeignKey(RemediationPolicy, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    status = models.CharField(max_length=20, choices=Status.choices)
    urgency = models.CharField(max_length=20, choices=Urgency.choices)
    rung = models.CharField(max_length=20, choices=Rung.choices)
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)
    finding_created = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the finding was recorded (a copy, filled on save)."
    )
    decisions = models.JSONField(default=list, blank=True, help_text="Each decision: when, what, why, who.")
    queued_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["status", "updated"]),
            models.Index(fields=["node", "-created"]),
            # The reports' time to recover: the remediations that succeeded in a period, read
            # from the index alone (with the finding's time copied here, no finding is read).
            models.Index(
                fields=["status", "finished"],
                include=["node", "finding", "finding_created", "created"],
                name="remediation_status_finished",
            ),
            # The reports' remediations by rung: those begun in a period (from the index alone).
            models.Index(fields=["created"], include=["rung", "status"], name="remediation_created"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=Q(status__in=[s.value for s in OPEN]), name="one_open_remediation_per_node"
            )
        ]

    def __str__(self) -> str:
        return f"{self.node} {self.get_rung_display()} ({self.get_status_display()})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The finding's time is copied once: time to recover counts from it, and the reports read
        # thousands of recoveries without a lookup of their findings. A finding never changes its time.
        if self.finding_created is None and (finding := self.finding) is not None:
            self.finding_created = finding.created
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "finding_created"}
        super().save(*args, **kwargs)

    @property
    def is_open(self) -> bool:
        return self.status in OPEN

    @property
    def time_to_recover(self) -> timedelta | None:
        if self.status == Status.SUCCEEDED and self.finished:
            return self.finished - self.created
        return None


class RemediationStep(models.Model):
    """One rung tried: when, how it went, and what the BMC, agent or scheduler said."""

    remediation = models.ForeignKey(Remediation, on_delete=models.CASCADE, related_name="steps")
    rung = models.CharField(max_length=20, choices=Rung.choices)
    status = models.CharField(max_length=10, choices=StepStatus.choices, default=StepStatus.RUNNING)
    started = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)
    acted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the rung's action was carried out (its success check follows)."
    )
    deadline = models.DateTimeField()
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Task deliveries that worked on it.")
    last_activity = models.DateTimeField(
        null=True, blank=True, help_text="When a worker last took the step up, or the reconciler queued it again."
    )
    detail = models.TextField(blank=True)
    # Set once the BMC has PXE-booted the node: from then on the step waits on the node itself (its
    # agent's join with this generation's token passes it; the deadline fails it), not on a worker.
    boot_generation = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="Reimage: the boot config generation the node was PXE-booted to install.",
    )
    # Set once the GPU reset is queued for the node's agent: the step then waits on the command's end
    # (``services.gpu_reset_answered``; the deadline fails it), and a redelivered task issues no second one.
    agent_command = models.ForeignKey(
        "telemetry.AgentCommand",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        help_text="GPU reset: the agent command that carries it out.",
    )

    class Meta:
        ordering = ["remediation", "started", "id"]
        constraints = [models.UniqueConstraint(fields=["remediation", "rung"], name="one_step_per_rung")]

    def __str__(self) -> str:
        return f"{self.get_rung_display()} ({self.get_status_display()}) of remediation {self.remediation_id}"


class Hold(models.Model):
    """No automated action on a node, or on a whole domain, until released (or until ``until``)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="holds")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    reason = models.TextField()
    actor_name = models.CharField(max_length=150)
    created = models.DateTimeField(default=timezone.now)
    until = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    released_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        target = self.node or self.cluster or self.rack or self.tenant or "fleet"
        return f"Hold on {target}: {self.reason[:60]}"


class MaintenanceWindow(models.Model):
    """When disruptive rungs may run (UTC), fleet-wide or for one cluster."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    weekdays = models.JSONField(default=list, help_text="0 = Monday ... 6 = Sunday; empty: every day.")
    start_hour = models.PositiveSmallIntegerField()
    end_hour = models.PositiveSmallIntegerField(help_text="Exclusive; may be below start_hour (over midnight).")

    def __str__(self) -> str:
        return f"{self.start_hour:02}:00-{self.end_hour:02}:00 UTC, days {self.weekdays or 'all'}"

    def is_open(self, at: datetime) -> bool:
        if self.weekdays and at.weekday() not in self.weekdays:
            return False
        if self.start_hour <= self.end_hour:
            return self.start_hour <= at.hour < self.end_hour
        return at.hour >= self.start_hour or at.hour < self.end_hour


class BlastRadiusLimit(models.Model):
    """Most nodes of one domain out of production or in remediation at once, and new drains an hour."""

    domain = models.CharField(max_length=10, choices=Domain.choices, unique=True)
    max_share = models.FloatField(default=0.1, help_text="Share of the domain's serving nodes.")
    max_count = models.PositiveIntegerField(default=50)
    max_drains_per_hour = models.PositiveIntegerField(default=20)

    def __str__(self) -> str:
        return (
            f"{self.get_domain_display()}: {self.max_share:.0%} / {self.max_count} / {self.max_drains_per_hour} per h"
        )


class CircuitBreaker(models.Model):
    """Tripped when findings spike in a cluster: automated actions stop there until an operator resets it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="circuit_breakers")
    tripped_at = models.DateTimeField(default=timezone.now)
    reason = models.TextField()
    reset_at = models.DateTimeField(null=True, blank=True)
    reset_by = models.CharField(max_length=150, blank=True)
    reset_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-tripped_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster"], condition=Q(reset_at__isnull=True), name="one_tripped_breaker_per_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {'tripped' if self.reset_at is None else 'reset'} ({self.reason[:60]})"
