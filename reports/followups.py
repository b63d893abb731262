"""Reports' hooks on the lifecycle, registered in ``nodes.followups``: keep the rows derived from
the state changes in step. A recorded state change rewrites its node's ``Outage`` rows, one saved
into a day already rolled up drops that day's transition counts, and a node moved to another
cluster moves its outages' copy of the cluster. All run inside the transaction that makes the
change (``nodes.services``, the node admin), so the rows never lag it.

The cached figures of settled days (``settled``) are retired, after commit, by a change recorded
into a past day and by a node placed elsewhere or deleted (the services write findings and
recoveries at the time they happen; a bulk load ends with ``outages.rebuild``, which retires them)."""

from __future__ import annotations

from nodes.followups import on_cluster_change, on_state_change
from nodes.models import Node, NodeEvent

from . import flows, outages, settled
from .models import Outage


@on_state_change
def rebuild_node_outages(event: NodeEvent) -> None:
    """The node's outage rows, rewritten from its history (two statements for one node)."""
    if event.node_id is not None:
        outages.rebuild([event.node_id])


@on_state_change
def forget_rolled_up_days(event: NodeEvent) -> None:
    # Changes are recorded as they happen, so this is a no-op (no query) but for back-dated rows.
    flows.forget_days_from(event.created)
    # A back-dated change may rewrite an outage of a settled day.
    settled.forget_if_before_today(event.created)


@on_cluster_change
def follow_node_cluster(node: Node) -> None:
    """A node moved to another cluster takes its outages along (the reports go by the cluster now);
    the cached figures per cluster and tenant are retired (a move or a deletion changes them)."""
    # cluster_id=None is Django's IS NULL: the stubs leave None out of the lookup's type.
    Outage.objects.filter(node_id=node.pk).exclude(cluster_id=node.cluster_id).update(  # type: ignore[misc]
        cluster_id=node.cluster_id
    )
    settled.forget()
