"""A node's findings and alerts, shown in its workload scheduler (Kubernetes: the
``NodewardenHealthy`` condition and a ``NodewardenFinding`` Event, ``schedulers.conditions``).

The schedulers app sits below health and never imports it: health tells it what the node's worst
open serious problem is (``worst_open_problem``, registered as its problem view) and queues the
scheduler's report after each new finding and each change of an alert (``health.followups``).
"""

from __future__ import annotations

from collections.abc import Sequence

from nodes.models import Node
from schedulers import base, conditions
from schedulers.tasks import report_node_health

from .choices import AlertState, Severity
from .models import Alert, Finding

# What keeps a node's condition False while it is in production: what the default policy acts on.
SERIOUS = (Severity.CATASTROPHIC, Severity.DEGRADED)


def worst_open_problem(node_id: int) -> conditions.Problem | None:
    """The node's worst firing catastrophic or degraded alert (index alert_node_state), or None."""
    row = (
        Alert.objects.filter(node_id=node_id, state=AlertState.FIRING, severity__in=SERIOUS)
        .order_by("-severity_rank", "-last_seen")
        .values_list("rule", "summary")
        .first()
    )
    return conditions.Problem(*row) if row else None


def _showing_health(node_ids: set[int]) -> set[int]:
    """Of these nodes, those whose scheduler shows health (one query; no HTTP here; Slurm: none)."""
    if not node_ids:
        return set()
    shows: dict[int, bool] = {}  # per cluster: one adapter built per cluster of the batch
    showing = set()
    nodes = Node.objects.filter(pk__in=node_ids, cluster__isnull=False).select_related("cluster")
    # The state too: the state machine reads it when a node loads (a deferred state is one query more).
    for node in nodes.only("id", "state", "cluster"):
        assert node.cluster is not None  # noqa: S101 - filtered above, for mypy
        if node.cluster.pk not in shows:
            shows[node.cluster.pk] = bool(base.adapter_for(node.cluster).reports_health)
        if shows[node.cluster.pk]:
            showing.add(node.pk)
    return showing


def report_new_finding(finding_ids: Sequence[int]) -> None:
    """After findings' commit (``on_new_finding``): an Event naming each, and the condition.
    Two queries for the whole batch, whatever its size."""
    rows = list(
        Finding.objects.filter(pk__in=list(finding_ids), node__isnull=False)
        .order_by("pk")
        .values_list("node_id", "rule", "summary", "severity")
    )
    showing = _showing_health({row[0] for row in rows})
    for node_id, rule, summary, severity in rows:
        if node_id in showing:
            message = f"{rule} ({severity}): {summary}"
            report_node_health.delay(node_id, conditions.FINDING_EVENT, message, severity in SERIOUS)


def report_alert_change(alert_ids: Sequence[int]) -> None:
    """After alerts' change (``on_alert_changed``): each node's condition as it is now (no Event);
    two queries for the whole batch, one report per node."""
    node_ids = Alert.objects.filter(pk__in=list(alert_ids), node__isnull=False).values_list("node_id", flat=True)
    showing = _showing_health(set(node_ids))
    for node_id in sorted(showing):
        report_node_health.delay(node_id)
