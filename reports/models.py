"""Outages kept as rows: each node's time out of production, derived from its state changes.

The rows are a cache of ``reports.outages`` applied to a node's whole history: the reports read them
instead of sorting weeks of state changes per request. They are rewritten per node whenever a state
change of that node is saved (``signals.py``, in the same transaction), and for every node by
``outages.rebuild`` (after bulk loads: the bench's generator, ``manage.py rebuild_outages``).
"""
from __future__ import annotations

from django.db import models

from nodes.models import Node, NodeEvent


class Outage(models.Model):
    """One outage of one node: from leaving the serving states until back in them (or gone).

    Attribution depends on the period read (a visit to repair after the period's end does not
    count), so the row keeps what decides it: when the hardware states were first reached and who
    initiated the outage."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    started = models.DateTimeField()
    ended = models.DateTimeField(null=True, blank=True, help_text="Back in production, or gone; empty: still out.")
    hardware_at = models.DateTimeField(null=True, blank=True,
                                       help_text="First entry into remediation, repair or RMA during the outage.")
    initiating_event = models.ForeignKey(NodeEvent, on_delete=models.CASCADE, related_name="+")
    init_kind = models.CharField(max_length=10)
    init_name = models.CharField(max_length=150)

    class Meta:
        ordering = ["-started"]
        # started: the fleet's outages of a period; (node, started): a page of nodes, and the rewrite.
        indexes = [models.Index(fields=["started"]), models.Index(fields=["node", "started"])]

    def __str__(self) -> str:
        return f"node {self.node_id}: {self.started:%Y-%m-%d %H:%M} to {self.ended or 'now'}"
