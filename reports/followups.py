"""Reports' hooks on the lifecycle, registered in ``nodes.followups``: keep the rows derived from
the state changes in step. A recorded state change rewrites its node's ``Outage`` rows, one saved
into a day already rolled up drops that day's transition counts, and a node moved to another
cluster moves its outages' copy of the cluster. All run inside the transaction that makes the
change (``nodes.services``, the node admin), so the rows never lag it.

The cached figures of settled days (``settled``) are retired when a row is written into one of them
or a node is placed elsewhere. Those hooks are Django signals: they take no step of the domain (no
row, no task), they only start a new cache generation after commit, and they must see every save,
whichever app makes it."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from fleet.models import Cluster
from health.models import Finding
from nodes.followups import on_cluster_change, on_state_change
from nodes.models import Node, NodeEvent
from remediation.choices import Status
from remediation.models import Remediation

from . import flows, outages, settled
from .models import Outage

# A node's save that names its fields and none of these leaves its placement (the reports go by the
# node's cluster and tenant now) as it was: the services' state changes, the health roll-up.
PLACEMENT_FIELDS = frozenset({"cluster", "cluster_id", "tenant", "tenant_id"})


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
    """A node moved to another cluster takes its outages along (the reports go by the cluster now)."""
    # cluster_id=None is Django's IS NULL: the stubs leave None out of the lookup's type.
    Outage.objects.filter(node_id=node.pk).exclude(cluster_id=node.cluster_id).update(  # type: ignore[misc]
        cluster_id=node.cluster_id
    )
    settled.forget()


@receiver(post_save, sender=Node, dispatch_uid="reports.settled.node_saved")
def forget_settled_on_placement(sender: type[Node], instance: Node, created: bool, **kwargs: Any) -> None:
    """A node saved whole (the admin, the API) or with its cluster or tenant may have moved: the
    settled days' figures per cluster and tenant are retired. A new node has no past yet."""
    fields = kwargs.get("update_fields")
    if not created and (fields is None or PLACEMENT_FIELDS & set(fields)):
        settled.forget()


@receiver(post_delete, sender=Node, dispatch_uid="reports.settled.node_deleted")
def forget_settled_on_delete(sender: type[Node], instance: Node, **kwargs: Any) -> None:
    """A node deleted takes its findings and remediations along (cascade)."""
    settled.forget()


@receiver(post_save, sender=Cluster, dispatch_uid="reports.settled.cluster_saved")
@receiver(post_delete, sender=Cluster, dispatch_uid="reports.settled.cluster_deleted")
def forget_settled_on_cluster(sender: type[Cluster], instance: Cluster, **kwargs: Any) -> None:
    """A cluster renamed or deleted: time to recover's cached recoveries carry its name."""
    settled.forget()


@receiver(post_delete, sender=Finding, dispatch_uid="reports.settled.finding_deleted")
@receiver(post_delete, sender=Remediation, dispatch_uid="reports.settled.remediation_deleted")
def forget_settled_on_row_delete(sender: type[Any], instance: Any, **kwargs: Any) -> None:
    """A finding or remediation deleted (history is kept, but a node's deletion cascades)."""
    settled.forget()


@receiver(post_save, sender=Finding, dispatch_uid="reports.settled.finding_saved")
def forget_settled_on_finding(sender: type[Finding], instance: Finding, **kwargs: Any) -> None:
    """A finding saved into a past day (an import, the admin; the services write them now)."""
    settled.forget_if_before_today(instance.created)


@receiver(post_save, sender=Remediation, dispatch_uid="reports.settled.remediation_saved")
def forget_settled_on_recovery(sender: type[Remediation], instance: Remediation, **kwargs: Any) -> None:
    """A recovery saved into a past day (the services finish remediations now)."""
    if instance.status == Status.SUCCEEDED:
        settled.forget_if_before_today(instance.finished)
