"""The node page header's remediation line: the open remediation, its rung, its next step and when."""

from __future__ import annotations

from nodes.models import Node, NodeEvent
from nodes.whyhere import Fact

from .choices import OPEN, Rung, Status, StepStatus, next_rung
from .models import Remediation
from .summary import outlook


def open_remediation(node: Node, latest: NodeEvent | None, operator: bool) -> list[Fact]:
    """Two queries: the open remediation with its finding, and its steps (a handful per remediation)."""
    rem = (
        Remediation.objects.filter(node=node, status__in=OPEN)
        .select_related("finding")
        .order_by("-created", "-id")
        .first()
    )
    if rem is None:
        return []
    steps = list(rem.steps.order_by("started", "id"))
    running = next((s for s in steps if s.status == StepStatus.RUNNING), None)
    rung = Rung(rem.rung).label
    text = f"{Status(rem.status).label}; rung: {rung}. {outlook(rem, steps)}"
    if rem.status == Status.RUNNING and rem.rung != next_rung(rem.rung):
        text += f" If it fails: {Rung(next_rung(rem.rung)).label}."
    if rem.finding is not None:
        text += f" Finding: {rem.finding.rule}: {rem.finding.summary}"
    return [
        Fact("remediation", f"Remediation {rem.pk}", text, tone="warning", eta=running.deadline if running else None)
    ]
