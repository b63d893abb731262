"""Keep the rows derived from the state changes in step: a saved state change rewrites its node's
``Outage`` rows, one saved into a day already rolled up drops that day's transition counts, and a
node moved to another cluster moves its outages' copy of the cluster."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from nodes.models import Node, NodeEvent

from . import flows, outages
from .models import Outage


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


@receiver(post_save, sender=Node, dispatch_uid="reports.outages.follow_cluster")
def follow_node_cluster(sender: type[Node], instance: Node, created: bool, **kwargs: Any) -> None:
    # A node moved to another cluster takes its outages along (the reports go by the cluster now).
    # Saves that name their fields without the cluster (every transition) cost no query.
    fields = kwargs.get("update_fields")
    if created or kwargs.get("raw") or (fields is not None and "cluster" not in fields and "cluster_id" not in fields):
        return
    # cluster_id=None is Django's IS NULL: the stubs leave None out of the lookup's type.
    Outage.objects.filter(node_id=instance.pk).exclude(cluster_id=instance.cluster_id).update(  # type: ignore[misc]
        cluster_id=instance.cluster_id
    )
