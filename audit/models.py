"""The fleet auditor's record: one row per run, with its counts and its breaches."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditRun(models.Model):
    """One comparison of what Nodewarden believes with the world (``audit.services.run_audit``).

    ``counts`` holds, per invariant, how many nodes or remediations were ``checked``, how many
    ``breaches``, how many answers were ``unknown`` (a scheduler or BMC that did not answer),
    ``excused`` (e.g. a production node held for an active check) and ``not_reached`` (left
    for the next run by the per-run bound). ``breaches`` keeps each breach with its evidence
    (at most ``services.KEEP_BREACHES``; ``breach_total`` counts them all). ``cursors`` is where
    the bounded checks (scheduler, BMC) go on next time, so every node is reached in turn.
    """

    started = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=40, blank=True, help_text="beat, command, simulator, ...")
    counts = models.JSONField(default=dict, blank=True)
    breaches = models.JSONField(default=list, blank=True)
    breach_total = models.PositiveIntegerField(default=0)
    raised = models.PositiveIntegerField(default=0, help_text="Audit findings raised (new alerts).")
    cleared = models.PositiveIntegerField(default=0, help_text="Audit alerts resolved: the breach is gone.")
    cursors = models.JSONField(default=dict, blank=True)
    params = models.JSONField(default=dict, blank=True, help_text="Thresholds and bounds used.")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started", "-id"]

    def __str__(self) -> str:
        return f"audit run {self.pk} at {self.started:%Y-%m-%d %H:%M}: {self.breach_total} breaches"

    def breaches_by_invariant(self) -> dict[str, int]:
        return {str(name): int(c.get("breaches", 0)) for name, c in (self.counts or {}).items()}
