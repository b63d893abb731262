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
