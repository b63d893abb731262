"""What Nodewarden still owes a workload scheduler.

A lifecycle reaction (``schedulers.reactions``) that could not reach the scheduler is kept
here, one row per node, until a later attempt succeeds: the drain follower retries it with
back-off, so an operator's cordon reaches Slurm even when slurmctld was down at the time.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PendingReaction(models.Model):
    """A node's scheduler reaction that failed and is to be tried again (deleted once it succeeds)."""

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="pending_reaction")
    reaction = models.CharField(max_length=20)
    reason = models.TextField()
    attempts = models.PositiveIntegerField(default=1)
    last_error = models.TextField(blank=True)
    first_failed_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["next_attempt_at"]

    def __str__(self) -> str:
        return f"{self.reaction} owed to node {self.node_id} ({self.attempts} attempt(s))"
