"""Keep ``Outage`` rows in step with the state changes: a saved state change rewrites its node's."""
from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from nodes.models import NodeEvent

from . import outages


@receiver(post_save, sender=NodeEvent, dispatch_uid="reports.outages.rebuild_node")
def rebuild_node_outages(sender: type[NodeEvent], instance: NodeEvent, created: bool, **kwargs: Any) -> None:
    # Runs inside the transaction that records the change (nodes.services), so the rows never lag.
    if created and instance.is_state_change and instance.node_id is not None and not kwargs.get("raw"):
        outages.rebuild([instance.node_id])
