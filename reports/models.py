"""Rows derived from the state changes for the reports: outages (each node's time out of
production) and the fleet's daily transition counts (the lifecycle flow).

The rows are a cache of ``reports.outages`` applied to a node's whole history: the reports read them
instead of sorting weeks of state changes per request. They are rewritten per node whenever a state
change of that node is saved (``followups.py``, in the same transaction), and for every node by
``outages.rebuild`` (after bulk loads: the bench's generator, ``manage.py rebuild_outages``).
"""

from __future__ import annotations

from django.db import models

from fleet.models import Cluster
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent


class Outage(models.Model):
    """One outage of one node: from leaving the serving states until back in them (or gone).

    Attribution depends on the period read (a visit to repair after the period's end does not
    count), so the row keeps what decides it: when the hardware states were first reached and who
    initiated the outage."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    started = models.DateTimeField()
    ended = models.DateTimeField(null=True, blank=True, help_text="Back in production, or gone; empty: still out.")
    hardware_at = models.DateTimeField(
        null=True, blank=True, help_text="First entry into remediation, repair or RMA during the outage."
    )
    initiating_event = models.ForeignKey(NodeEvent, on_delete=models.CASCADE, related_name="+")
    init_kind = models.CharField(max_length=10)
    init_name = models.CharField(max_length=150)
    # A copy of the node's cluster (now, not when the outage began, like every report), kept by
    # ``rebuild`` and by ``followups.py`` when a node moves: downtime per cluster reads no node row.
    cluster = models.ForeignKey(Cluster, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-started"]
        # started: the fleet's outages of a period; (node, started): a page of nodes, and the rewrite;
        # ended: the outages still open or over since the report's settled days (reports.settled).
        indexes = [
            models.Index(fields=["started"]),
            models.Index(fields=["node", "started"]),
            models.Index(fields=["ended"], name="reports_outage_ended"),
        ]

    def __str__(self) -> str:
        return f"node {self.node_id}: {self.started:%Y-%m-%d %H:%M} to {self.ended or 'now'}"


class DailyTransitionCount(models.Model):
    """The fleet's state changes on one finished day from one state to another.

    Written by ``flows.roll_up`` (hourly, ``tasks.roll_up_flows``): the lifecycle flow of a month or a
    quarter reads these instead of counting every change of the period per request. A state change
    saved into a day already rolled up (a back-dated import) drops that day and the later ones
    (``followups.py``), and the reads count them from the changes until the next roll-up."""

    day = models.DateField()
    source_state = models.CharField(max_length=30, choices=NodeState.choices, blank=True)
    target_state = models.CharField(max_length=30, choices=NodeState.choices, blank=True)
    count = models.PositiveIntegerField()

    class Meta:
        ordering = ["day", "source_state", "target_state"]
        constraints = [
            models.UniqueConstraint(fields=["day", "source_state", "target_state"], name="one_transition_count_per_day")
        ]

    def __str__(self) -> str:
        return f"{self.day}: {self.source_state} -> {self.target_state} x{self.count}"
