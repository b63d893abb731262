"""A node's findings and alerts, shown in its workload scheduler (Kubernetes: the
``NodewardenHealthy`` condition and a ``NodewardenFinding`` Event, ``schedulers.conditions``).

The schedulers app sits below health and never imports it: health tells it what the node's worst
open serious problem is (``worst_open_problem``, registered as its problem view) and queues the
scheduler's report after each new finding and each change of an alert (``health.followups``).
"""

from __future__ import annotations

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


def _shows_health(node_id: int) -> bool:
    """Only nodes whose scheduler shows health get a task (one query; no HTTP here)."""
    node = Node.objects.select_related("cluster").only("cluster").filter(pk=node_id).first()
    return bool(node and node.cluster and base.adapter_for(node.cluster).reports_health)


def report_new_finding(finding_id: int) -> None:
    """After a finding's commit (``on_new_finding``): an Event naming it, and the condition."""
    finding = Finding.objects.filter(pk=finding_id).values("node_id", "rule", "summary", "severity").first()
    if finding is None or finding["node_id"] is None or not _shows_health(finding["node_id"]):
        return
    message = f"{finding['rule']} ({finding['severity']}): {finding['summary']}"
    warning = finding["severity"] in SERIOUS
    report_node_health.delay(finding["node_id"], conditions.FINDING_EVENT, message, warning)


def report_alert_change(alert_id: int) -> None:
    """After an alert's change (``on_alert_changed``): the condition as it is now (no Event)."""
    node_id = Alert.objects.filter(pk=alert_id).values_list("node_id", flat=True).first()
    if node_id is not None and _shows_health(node_id):
        report_node_health.delay(node_id)
