"""Telemetry tables. Agent tokens live here: they are what lets a node report."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from nodes.models import Node


class AgentToken(models.Model):
    """A node agent's long-lived credential. Only a SHA-256 of the token is stored; the
    token itself is shown once, when issued (``telemetry.services.issue_agent_token``)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="The token's first characters, to tell tokens apart.")
    created = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.prefix}… for node {self.node_id}"


class NodeHealth(models.Model):
    """The latest a node reported, one row per node, kept apart from the history so that
    dashboards, the idle check and the heartbeat rule read one small row."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="health")
    last_report_at = models.DateTimeField(help_text="collected_at of the newest report")
    last_received_at = models.DateTimeField(help_text="when the portal received the newest report")
    source = models.CharField(max_length=20, default="agent")  # "agent" or "dcgm-exporter"
    agent_version = models.CharField(max_length=200, blank=True)
    driver_version = models.CharField(max_length=200, blank=True)
    cuda_version = models.CharField(max_length=200, blank=True)
    gpu_count = models.PositiveSmallIntegerField(null=True, blank=True)
    # Sum over GPUs of running compute processes: 0 means no job is using the GPUs.
    gpu_compute_processes = models.PositiveIntegerField(null=True, blank=True)
    host = models.JSONField(default=dict, blank=True)  # HostVitals
    ib_ports = models.JSONField(default=list, blank=True)  # [IbPortReading]
    collector_errors = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "node health"
        indexes = [models.Index(fields=["last_received_at"], name="nodehealth_received")]

    def __str__(self) -> str:
        return f"health of node {self.node_id}"
