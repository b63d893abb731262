"""Keep the rows derived from the state changes in step: a saved state change rewrites its node's
``Outage`` rows, and one saved into a day already rolled up drops that day's transition counts."""
from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from nodes.models import NodeEvent

from . import flows, outages


@receiver(post_save, sender=NodeEvent, dispatch_uid="reports.outages.rebuild_node")
def rebuild_node_outages(sender: type[NodeEvent], instance: NodeEvent, created: bool, **kwargs: Any) -> None:
    # Runs inside the transaction that records the change (nodes.services), so the rows never lag.
    if created and instance.is_state_change and instance.node_id is not None and not kwargs.get("raw"):
        outages.rebuild([instance.node_id])


@receiver(post_save, sender=NodeEvent, dispatch_uid="reports.flows.forget_days_from")
def forget_rolled_up_days(sender: type[NodeEvent], instance: NodeEvent, created: bool, **kwargs: Any) -> None:
    # Changes are recorded as they happen, so this is a no-op (no query) but for back-dated rows.
    if created and instance.is_state_change and not kwargs.get("raw"):
        flows.forget_days_from(instance.created)
