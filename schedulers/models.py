"""What Nodewarden still owes a workload scheduler.

Every lifecycle reaction (``schedulers.reactions``) is queued here by its transition, in the same
transaction, one row per node (``attempts`` 0: not tried yet); the transition's follow-up carries
out all that is queued for the cluster at once (one batch, a few scheduler calls) and deletes the
rows. One that could not reach the scheduler stays until a later attempt succeeds: the drain
follower retries it with back-off, so an operator's cordon reaches Slurm even when slurmctld was
down at the time.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PendingReaction(models.Model):
    """A node's scheduler reaction queued or failed, to be carried out (deleted once it succeeds)."""

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
