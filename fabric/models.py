"""The InfiniBand fabric: devices, the cabling plan, discovery runs with what they found,
port counters over time, link flaps, discrepancies, technician tickets and manual checks.

Devices are named as the fabric names them: a switch by its node description ("leaf01"),
an HCA by "<host> <device>" ("gpu-node-01 mlx5_0"), as ibnetdiscover and iblinkinfo print
it. A port is "<device name>/<port number>". Discovery and validation rows are written in
bulk by ``fabric.services.record_run``, the only writer.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from nodes.models import Node

from .choices import DeviceKind, DeviceRole, DiscrepancyKind, RunSource, RunStatus, TicketStatus, ValidationResult


class FabricDevice(models.Model):
    """A switch or an HCA, from the plan or from discovery; an HCA is tied to its node by host name."""

    name = models.CharField(max_length=200, unique=True, help_text='Node description: "leaf01", "gpu-node-01 mlx5_0".')
    kind = models.CharField(max_length=10, choices=DeviceKind.choices)
    role = models.CharField(max_length=10, choices=DeviceRole.choices, default=DeviceRole.OTHER)
    guid = models.CharField(max_length=20, blank=True, db_index=True)
    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="fabric_devices")
    rack = models.CharField(max_length=100, blank=True)
    in_plan = models.BooleanField(default=False)
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class CablingPlan(models.Model):
    """One imported version of the cabling plan; the newest is in force."""

    created = models.DateTimeField(default=timezone.now)
    actor_name = models.CharField(max_length=150)
    source = models.CharField(max_length=300, blank=True, help_text="File name or API.")
    links = models.PositiveIntegerField(default=0)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"Plan {self.pk} ({self.links} links, {self.created:%Y-%m-%d})"


class PlannedLink(models.Model):
    """One cable as designed: which port should connect to which, at what width and rate."""

    plan = models.ForeignKey(CablingPlan, on_delete=models.CASCADE, related_name="planned_links")
    a_device = models.ForeignKey(FabricDevice, on_delete=models.PROTECT, related_name="+")
    a_port = models.PositiveSmallIntegerField()
    b_device = models.ForeignKey(FabricDevice, on_delete=models.PROTECT, related_name="+")
    b_port = models.PositiveSmallIntegerField()
    width = models.CharField(max_length=8, blank=True, help_text='"4X"; blank: any.')
    rate_gbps = models.FloatField(null=True, blank=True, help_text="Expected link rate; blank: any.")

    class Meta:
        ordering = ["plan", "id"]
        indexes = [models.Index(fields=["plan", "a_device"]), models.Index(fields=["plan", "b_device"])]

    def __str__(self) -> str:
        return f"{self.a_device.name}/{self.a_port} <-> {self.b_device.name}/{self.b_port}"


class DiscoveryRun(models.Model):
    """One look at the fabric: what the tools saw, and how it compared with the plan."""

    source = models.CharField(max_length=20, choices=RunSource.choices)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    plan = models.ForeignKey(CablingPlan, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")
    actor_name = models.CharField(max_length=150)
    started = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)
    devices = models.PositiveIntegerField(default=0)
    links = models.PositiveIntegerField(default=0)
    summary = models.JSONField(
        default=dict, blank=True, help_text="Discrepancies by kind, tickets opened/closed, timings."
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started", "-id"]
        indexes = [models.Index(fields=["status", "-started"])]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.get_source_display()}, {self.started:%Y-%m-%d %H:%M})"


class DiscoveryOutput(models.Model):
    """The raw text a tool printed for a run (evidence; uploads are kept as sent)."""

    run = models.ForeignKey(DiscoveryRun, on_delete=models.CASCADE, related_name="outputs")
    tool = models.CharField(max_length=40)
    text = models.TextField()

    def __str__(self) -> str:
        return f"{self.tool} output of run {self.run_id}"


class DiscoveredLink(models.Model):
    """A cable as a run found it (or a port found down, with no peer)."""

    run = models.ForeignKey(DiscoveryRun, on_delete=models.CASCADE, related_name="discovered_links")
    a_device = models.ForeignKey(FabricDevice, on_delete=models.CASCADE, related_name="+")
    a_port = models.PositiveSmallIntegerField()
    b_device = models.ForeignKey(FabricDevice, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    b_port = models.PositiveSmallIntegerField(null=True, blank=True)
    width = models.CharField(max_length=8, blank=True)
    rate_gbps = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=20, blank=True)
    phys_state = models.CharField(max_length=20, blank=True)

    class Meta:
        indexes = [models.Index(fields=["run", "a_device"])]

    def __str__(self) -> str:
        return f"run {self.run_id}: device {self.a_device_id}/{self.a_port} -> {self.b_device_id}/{self.b_port}"


class PortCounterSnapshot(models.Model):
    """A port's error counters at a run, and their increase since the port's previous snapshot
    (a counter lower than before was reset: the increase is its new value)."""

    run = models.ForeignKey(DiscoveryRun, on_delete=models.CASCADE, related_name="counter_snapshots")
    device = models.ForeignKey(FabricDevice, on_delete=models.CASCADE, related_name="counter_snapshots")
    port = models.PositiveSmallIntegerField()
    taken_at = models.DateTimeField()
    counters = models.JSONField(default=dict)
    deltas = models.JSONField(default=dict, blank=True)
    seconds_since_previous = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-taken_at", "-id"]
        indexes = [models.Index(fields=["device", "port", "-taken_at"])]

    def __str__(self) -> str:
        return f"device {self.device_id}/{self.port} at {self.taken_at:%Y-%m-%d %H:%M}"


class LinkFlap(models.Model):
    """The link at a port went down and up (its LinkDownedCounter rose) between two looks."""

    device = models.ForeignKey(FabricDevice, on_delete=models.CASCADE, related_name="flaps")
    port = models.PositiveSmallIntegerField()
    run = models.ForeignKey(DiscoveryRun, on_delete=models.CASCADE, related_name="flaps")
    observed_at = models.DateTimeField()
    count = models.PositiveIntegerField(help_text="LinkDownedCounter increase since the previous look.")

    class Meta:
        ordering = ["-observed_at", "-id"]
        indexes = [models.Index(fields=["device", "port", "-observed_at"])]

    def __str__(self) -> str:
        return f"device {self.device_id}/{self.port}: {self.count} flap(s) at {self.observed_at:%Y-%m-%d %H:%M}"


class Ticket(models.Model):
    """A technician ticket: one per problem on one cable, updated while seen, closed when a
    later run finds it fixed."""

    key = models.CharField(max_length=300, help_text="The problem's identity: kind and ports.")
    kind = models.CharField(max_length=20, choices=DiscrepancyKind.choices)
    status = models.CharField(max_length=10, choices=TicketStatus.choices, default=TicketStatus.OPEN)
    title = models.CharField(max_length=300)
    detail = models.TextField(blank=True)
    endpoints = models.JSONField(default=list, help_text='Ports involved, e.g. ["leaf01/3", "gpu-node-02 mlx5_0/1"].')
    nodes = models.ManyToManyField(Node, blank=True, related_name="fabric_tickets")
    opened_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    first_run = models.ForeignKey(DiscoveryRun, on_delete=models.SET_NULL, null=True, related_name="+")
    last_run = models.ForeignKey(DiscoveryRun, on_delete=models.SET_NULL, null=True, related_name="+")
    times_seen = models.PositiveIntegerField(default=1)
    closed_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=Q(status="open"), name="one_open_ticket_per_problem")
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"


class Discrepancy(models.Model):
    """One difference a run found between the fabric and the plan, or in the counters."""

    run = models.ForeignKey(DiscoveryRun, on_delete=models.CASCADE, related_name="discrepancies")
    kind = models.CharField(max_length=20, choices=DiscrepancyKind.choices)
    key = models.CharField(max_length=300)
    a_endpoint = models.CharField(max_length=220)
    b_endpoint = models.CharField(max_length=220, blank=True)
    expected = models.CharField(max_length=300, blank=True)
    found = models.CharField(max_length=300, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    ticket = models.ForeignKey(Ticket, on_delete=models.SET_NULL, null=True, blank=True, related_name="discrepancies")

    class Meta:
        verbose_name_plural = "discrepancies"
        ordering = ["kind", "a_endpoint"]
        indexes = [models.Index(fields=["run", "kind"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.a_endpoint}"


class ManualValidation(models.Model):
    """A fabric team's hands-on check (the weekly walk): who, when, what, result, notes."""

    created = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    actor_name = models.CharField(max_length=150)
    scope = models.CharField(max_length=300, help_text='What was checked: "leaf-r3 optics", "spine01-04 uplinks".')
    result = models.CharField(max_length=10, choices=ValidationResult.choices)
    notes = models.TextField(blank=True)
    run = models.ForeignKey(DiscoveryRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.scope} ({self.get_result_display()}) by {self.actor_name}"
