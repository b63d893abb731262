"""Health tables: the XID catalog, rules and their thresholds, findings, alerts.

Findings are append-only history (like ``nodes.NodeEvent``); alerts are the
deduplicated, mutable view an operator works from. Only ``health.services``
writes either.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from fleet.models import HardwareProfile
from nodes.models import Node, NodeEvent
from nodewarden.records import AppendOnlyQuerySet

from .choices import SEVERITY_RANK, AlertState, RecommendedAction, Severity

User = settings.AUTH_USER_MODEL


class XidDefinition(models.Model):
    """One NVIDIA XID: what it means, how bad it is, what to do first.

    Seeded from ``health/data/xid_catalog.csv``; operators may override severity and
    action in the admin, always with a reason (kept in ``edited_reason``).
    """

    xid = models.PositiveIntegerField(primary_key=True, verbose_name="XID")
    name = models.CharField(max_length=100)
    meaning = models.TextField(blank=True)
    severity = models.CharField(max_length=20, choices=Severity.choices)
    recommended_action = models.CharField(max_length=30, choices=RecommendedAction.choices)
    nvidia_bucket = models.CharField(max_length=60, blank=True, help_text="NVIDIA's immediate-action bucket.")
    investigatory_action = models.CharField(max_length=200, blank=True)
    gpu_reset = models.BooleanField(
        default=False, verbose_name="GPU reset", help_text="NVIDIA's recovery for this XID resets the GPU."
    )
    edited_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    edited_reason = models.CharField(max_length=300, blank=True)
    edited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["xid"]
        verbose_name = "XID definition"

    def __str__(self) -> str:
        return f"XID {self.xid} {self.name}"


class HealthRule(models.Model):
    """The thresholds of one rule (``key`` from ``health.rules`` registry).

    A row with a hardware profile overrides the default row (profile empty) for
    nodes of that profile. ``shadow`` rules record what they would have done and
    act on nothing.
    """

    key = models.CharField(max_length=60, db_index=True)
    hardware_profile = models.ForeignKey(
        HardwareProfile,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="health_rules",
        help_text="Empty: the default for every profile.",
    )
    enabled = models.BooleanField(default=True)
    shadow = models.BooleanField(default=False, help_text="Record findings only: no alert, no history event.")
    severity = models.CharField(max_length=20, choices=Severity.choices)
    recommended_action = models.CharField(
        max_length=30, choices=RecommendedAction.choices, default=RecommendedAction.NONE
    )
    threshold = models.FloatField(null=True, blank=True)
    clear_threshold = models.FloatField(null=True, blank=True, help_text="Hysteresis: clears only past this.")
    window_seconds = models.PositiveIntegerField(null=True, blank=True)
    count = models.PositiveIntegerField(null=True, blank=True, help_text="Events within the window that fire.")
    clear_after_seconds = models.PositiveIntegerField(default=0, help_text="The condition must stay clear this long.")
    params = models.JSONField(default=dict, blank=True)
    description = models.TextField(blank=True)
    updated = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["key", "hardware_profile__name"]
        constraints = [
            # Two partial constraints: NULLs never collide in a plain unique constraint.
            models.UniqueConstraint(
                fields=["key"], condition=Q(hardware_profile__isnull=True), name="health_rule_one_default"
            ),
            models.UniqueConstraint(
                fields=["key", "hardware_profile"],
                condition=Q(hardware_profile__isnull=False),
                name="health_rule_one_per_profile",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.hardware_profile or 'default'})"


class AppendOnlyModel(models.Model):
    """Rows that are written once. ``LINKABLE`` fields may be filled once, later, in the same transaction."""

    LINKABLE: tuple[str, ...] = ()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        fields = set(kwargs.get("update_fields") or ())
        if not self._state.adding and not (fields and fields <= set(self.LINKABLE)):
            raise PermissionError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError(f"{type(self).__name__} rows are append-only")


class HealthRuleChange(AppendOnlyModel):
    """Who changed a rule or an XID definition, when, why, and from what to what."""

    created = models.DateTimeField(default=timezone.now)
    rule = models.ForeignKey(HealthRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="changes")
    xid = models.ForeignKey(XidDefinition, on_delete=models.SET_NULL, null=True, blank=True, related_name="changes")
    target = models.CharField(max_length=150, help_text="Copy of the rule key/profile or the XID.")
    actor = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    changes = models.JSONField(default=dict, help_text="field -> [old, new]")

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.target} by {self.actor_name}"


class RuleWindow(models.Model):
    """Recent event times of a windowed rule on one subject (bounded list); written only when an event happens."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    rule = models.CharField(max_length=60)
    subject = models.CharField(max_length=200)
    events = models.JSONField(default=list, help_text="ISO timestamps, oldest first, bounded.")
    updated = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "rule", "subject"], name="rule_window_unique")]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject} on {self.node_id}"


class Alert(models.Model):
    """The open (or resolved) problem behind one or more findings, deduplicated per node and key."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="alerts")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    rule = models.CharField(max_length=60)
    subject = models.CharField(max_length=200, blank=True)
    dedupe_key = models.CharField(max_length=300, help_text="rule|gpu|subject")
    severity = models.CharField(max_length=20, choices=Severity.choices)
    # Denormalised for sorting by severity in SQL (SEVERITY_RANK).
    severity_rank = models.PositiveSmallIntegerField(default=0)
    recommended_action = models.CharField(
        max_length=30, choices=RecommendedAction.choices, default=RecommendedAction.NONE
    )
    summary = models.TextField()
    state = models.CharField(max_length=10, choices=AlertState.choices, default=AlertState.FIRING)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    occurrences = models.PositiveIntegerField(default=1)
    clearing_since = models.DateTimeField(
        null=True, blank=True, help_text="Condition seen clear since; resolves after the rule's delay."
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_reason = models.CharField(max_length=300, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    acknowledged_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_note = models.CharField(max_length=300, blank=True)
    silenced_until = models.DateTimeField(null=True, blank=True)
    silenced_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    silenced_reason = models.CharField(max_length=300, blank=True)
    last_finding = models.ForeignKey("Finding", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-severity_rank", "-last_seen"]
        constraints = [
            # At most one firing alert per condition; resolved ones pile up as history.
            models.UniqueConstraint(
                fields=["node", "dedupe_key"], condition=Q(state="firing"), name="one_firing_alert_per_condition"
            ),
        ]
        indexes = [
            models.Index(fields=["state", "-severity_rank", "-last_seen"], name="alert_list"),
            # /api/alerts/ and the alert page without a state filter: worst first, read in index order
            # (without it, every request sorts the whole table to keep the first 50).
            models.Index(fields=["-severity_rank", "-last_seen", "-id"], name="alert_rank"),
            models.Index(fields=["node", "state"], name="alert_node_state"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.dedupe_key} ({self.state})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.severity_rank = SEVERITY_RANK[Severity(self.severity)]
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "severity" in update_fields:
            kwargs["update_fields"] = {*update_fields, "severity_rank"}
        super().save(*args, **kwargs)

    @property
    def is_firing(self) -> bool:
        return self.state == AlertState.FIRING

    def is_silenced(self, now: Any = None) -> bool:
        """Silenced alerts still count occurrences; lists hide them and remediation skips them."""
        return self.silenced_until is not None and self.silenced_until > (now or timezone.now())


class Finding(AppendOnlyModel):
    """One rule firing on one node (and GPU), with its evidence: append-only history."""

    LINKABLE = ("event",)  # the history row is written after the finding, to carry its id

    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, related_name="findings")
    hostname = models.CharField(max_length=253)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    rule = models.CharField(max_length=60, db_index=True)
    xid = models.PositiveIntegerField(null=True, blank=True, verbose_name="XID")
    severity = models.CharField(max_length=20, choices=Severity.choices)
    recommended_action = models.CharField(
        max_length=30, choices=RecommendedAction.choices, default=RecommendedAction.NONE
    )
    summary = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=30, blank=True, help_text="agent, dcgm-exporter, alertmanager, ...")
    subject = models.CharField(max_length=200, blank=True)
    observed_at = models.DateTimeField(default=timezone.now)
    created = models.DateTimeField(default=timezone.now)
    shadow = models.BooleanField(default=False)
    actor_name = models.CharField(max_length=150, blank=True)
    alert = models.ForeignKey(Alert, on_delete=models.SET_NULL, null=True, blank=True, related_name="findings")
    event = models.ForeignKey(NodeEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["node", "-created"], name="finding_node_created"),
            models.Index(fields=["-created"], name="finding_created"),
        ]

    def __str__(self) -> str:
        gpu = f" GPU{self.gpu_index}" if self.gpu_index is not None else ""
        return f"{self.hostname}{gpu}: {self.rule} ({self.severity})"


class UnroutedAlert(AppendOnlyModel):
    """An Alertmanager alert no node could be found for: kept, never silently dropped."""

    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    status = models.CharField(max_length=20, blank=True)
    fingerprint = models.CharField(max_length=100, blank=True)
    alertname = models.CharField(max_length=200, blank=True)
    labels = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    reason = models.CharField(max_length=300)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"{self.alertname or self.fingerprint}: {self.reason}"


class AlertmanagerTally(models.Model):
    """Pushes to one Alertmanager (``health.alertmanager_push``): counters for /metrics, shared by
    every worker process. The URL is kept without its credentials."""

    receiver = models.CharField(max_length=300, unique=True)
    pushes = models.PositiveBigIntegerField(default=0, help_text="POSTs Alertmanager accepted.")
    failures = models.PositiveBigIntegerField(default=0, help_text="POSTs refused or unanswered.")
    alerts_sent = models.PositiveBigIntegerField(default=0)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return f"{self.receiver}: {self.pushes} pushed, {self.failures} failed"
