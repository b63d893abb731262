"""The node page header's alert line: how many alerts fire on the node, and the worst of them."""

from __future__ import annotations

from nodes.models import Node, NodeEvent
from nodes.whyhere import Fact

from .choices import SEVERITY_RANK, AlertState, Severity
from .models import Alert

WARNING_RANK = SEVERITY_RANK[Severity.WARNING]


def firing_alerts(node: Node, latest: NodeEvent | None, operator: bool) -> list[Fact]:
    """Two queries whatever the number of alerts: the worst one, and the count."""
    firing = Alert.objects.filter(node=node, state=AlertState.FIRING)
    worst = (
        firing.order_by("-severity_rank", "-last_seen")
        .only("severity", "severity_rank", "summary", "gpu_index")
        .first()
    )
    if worst is None:
        return [Fact("alerts", "Alerts", "None firing.")]
    count = firing.count()
    gpu = f"GPU {worst.gpu_index}: " if worst.gpu_index is not None else ""
    tone = "danger" if worst.severity_rank > WARNING_RANK else "warning"
    text = f"{count} firing; worst: {Severity(worst.severity).label}: {gpu}{worst.summary}"
    return [Fact("alerts", "Alerts", text, tone=tone)]
