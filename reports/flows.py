"""The lifecycle flow: how many state changes went from each state to each other state in a
period (one aggregate query), and which nodes made one of them (paged)."""
from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, QuerySet

from nodes.choices import NodeState
from nodes.models import NodeEvent

from .choices import STATE_CHANGE_KINDS
from .filters import Period


def state_changes(events: QuerySet[NodeEvent], period: Period, *, cluster_id: int | None = None,
                  tenant_id: int | None = None) -> QuerySet[NodeEvent]:
    """State changes (transitions and forced ones) of the period, of one cluster and/or tenant.

    The cluster and tenant are the node's now: a node moved between clusters counts in its new one."""
    events = events.filter(kind__in=STATE_CHANGE_KINDS, created__gte=period.since, created__lt=period.until)
    if cluster_id is not None:
        events = events.filter(node__cluster_id=cluster_id)
    if tenant_id is not None:
        events = events.filter(node__tenant_id=tenant_id)
    return events


def transition_counts(events: QuerySet[NodeEvent]) -> list[dict[str, Any]]:
    """(source, target, count) of the given state changes, commonest first: one query."""
    rows = (events.values("source_state", "target_state").annotate(n=Count("id"))
            .order_by("-n", "source_state", "target_state"))
    labels = dict(NodeState.choices)
    return [{"source": r["source_state"], "target": r["target_state"], "count": r["n"],
             "source_label": labels.get(r["source_state"], r["source_state"]),
             "target_label": labels.get(r["target_state"], r["target_state"])} for r in rows]


def flow_nodes(events: QuerySet[NodeEvent], source: str, target: str) -> QuerySet[NodeEvent]:
    """The nodes that went from ``source`` to ``target`` among the given changes: one row per node
    with how often and when last, most recent first (a queryset: the caller pages it)."""
    return (events.filter(source_state=source, target_state=target)
            .values("node_id", "hostname").annotate(times=Count("id"), last=Max("created"))
            .order_by("-last", "node_id"))
