"""What the simulator keeps in the database: the faults it plants in a live fleet (the demo).

A batch simulation (``simulate_fleet``) keeps its ground truth in memory and its report in
JSON; a live one runs in Celery tasks that forget everything between runs, so each fault
it plants is a row: which node, what broke, what would cure it, and when it was cured.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class LiveFault(models.Model):
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="+")
    fault = models.CharField(max_length=30, help_text="simulator.faults key, e.g. faulty_gpu, link_flap.")
    cure = models.CharField(max_length=20, blank=True, help_text="The least that cures it (a rung, repair, rma).")
    gpu = models.PositiveSmallIntegerField(default=0)
    hca = models.PositiveSmallIntegerField(default=0)
    xid = models.PositiveIntegerField(null=True, blank=True)
    started = models.DateTimeField(default=timezone.now)
    ends = models.DateTimeField(null=True, blank=True, help_text="Noise only: when the signal goes away.")
    announced = models.BooleanField(default=False, help_text="Its XID line has been reported.")
    cured_at = models.DateTimeField(null=True, blank=True)
    cured_by = models.CharField(max_length=60, blank=True)

    class Meta:
        ordering = ["-started"]
        indexes = [models.Index(fields=["cured_at", "node"])]

    def __str__(self) -> str:
        return f"{self.fault} on node {self.node_id} since {self.started:%Y-%m-%d %H:%M}"
