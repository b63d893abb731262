"""The node page header's remediation line: the open remediation, its rung, its next step and when."""

from __future__ import annotations

from datetime import datetime

from django.urls import reverse
from django.utils import timezone

from health.handled import Handler
from nodes.models import Node, NodeEvent
from nodes.whyhere import Fact

from .choices import OPEN, Rung, Status, StepStatus, next_rung
from .models import Remediation
from .safety import OUTSIDE_WINDOW, active_hold, next_window_opening, wait_kind
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
    eta = running.deadline if running else None
    if rem.status == Status.QUEUED and rem.queued_reason:
        text, eta = _queued(rem, node, rung, operator)
    else:
        text = f"{Status(rem.status).label}; rung: {rung}. {outlook(rem, steps)}"
    if rem.status == Status.RUNNING and rem.rung != next_rung(rem.rung):
        text += f" If it fails: {Rung(next_rung(rem.rung)).label}."
    if rem.finding is not None:
        text += f" Finding: {rem.finding.rule}: {rem.finding.summary}"
    return [Fact("remediation", f"Remediation {rem.pk}", text, tone="warning", eta=eta)]


def _queued(rem: Remediation, node: Node, rung: str, operator: bool) -> tuple[str, datetime | None]:
    """What a queued remediation waits for, as its last admission recorded it (``queued_reason``,
    the reason of its "queued: ..." decision), and for a maintenance window when it opens (one query).
    A customer reads the kind of wait, not a hold's reason or its author."""
    reason = rem.queued_reason
    if operator:
        text = f"Queued; rung: {rung}. Waiting for: {reason}."
    else:
        text = f"Queued; rung: {rung}. Waiting for a safe moment to act: {wait_kind(reason)}."
    if not reason.startswith(OUTSIDE_WINDOW):
        return text, None
    opens = next_window_opening(node, timezone.now())
    if opens is None:
        return text + " No maintenance window is configured: it waits until an operator acts.", None
    return text + f" The window opens {opens:%Y-%m-%d %H:%M} UTC.", opens


def node_hold(node: Node, latest: NodeEvent | None, operator: bool) -> list[Fact]:
    """One query: the hold (the node's own, its domain's or the fleet's) that pauses automated
    remediation on this node, who placed it and why; customers see that there is one, not why."""
    hold = active_hold(node, timezone.now())
    if hold is None:
        return []
    if hold.node_id == node.pk:
        scope = "this node"
    elif hold.cluster_id or hold.rack_id or hold.tenant_id:
        scope = "its " + ("cluster" if hold.cluster_id else "rack" if hold.rack_id else "tenant")
    else:
        scope = "the whole fleet"
    text = f"No automated remediation on {scope} until released"
    if hold.until:
        text += f" (or until {hold.until:%Y-%m-%d %H:%M} UTC)"
    if operator:
        text += f": {hold.reason} ({hold.actor_name}, since {hold.created:%Y-%m-%d %H:%M})"
    return [Fact("hold", "On hold", text + ".", tone="warning")]


def open_remediations(node_ids: set[int]) -> dict[int, Handler]:
    """The alert list's "handled by" column: each node's newest open remediation, in one query."""
    found: dict[int, Handler] = {}
    rows = (
        Remediation.objects.filter(node_id__in=node_ids, status__in=OPEN)
        .select_related("finding")
        .only("id", "node_id", "status", "rung", "created", "finding__rule", "finding__gpu_index")
        .order_by("node_id", "-created", "-id")
    )
    for rem in rows:
        if rem.node_id in found:
            continue
        finding = rem.finding
        found[rem.node_id] = Handler(
            f"Remediation {rem.pk}: {Status(rem.status).label}, {Rung(rem.rung).label.lower()}",
            reverse("node-detail", args=[rem.node_id]) + "#node-remediation",
            rule=finding.rule if finding else "",
            gpu_index=finding.gpu_index if finding else None,
        )
    return found
