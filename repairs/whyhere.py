"""The node page header's repair line: the open repair ticket or RMA case that holds the node, who
has it, how old it is, and what follows (re-validation once the last one is resolved or closed).

Registered into ``nodes.whyhere`` from ``RepairsConfig.ready``: nodes never imports repairs.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince

from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from nodes.whyhere import Fact

from .choices import OPEN_RMA_STATES, OPEN_TICKET_STATES, RmaState, TicketState

# What happens once nothing holds the node any more (repairs.services._maybe_revalidate).
NEXT = "Next: re-validation (Day 1, the back-from-{state} plan) when {what}."


def open_repair(node: Node, latest: NodeEvent | None, operator: bool) -> list[Fact]:
    """Two queries: the node's newest open ticket and newest open RMA case (each by its (node, state) index)."""
    ticket = (
        node.repair_tickets.filter(state__in=OPEN_TICKET_STATES)
        .only("id", "component", "what", "state", "assignee", "created")
        .order_by("-created", "-id")
        .first()
    )
    case = (
        node.rma_cases.filter(state__in=OPEN_RMA_STATES)
        .only("id", "vendor", "part", "vendor_case_number", "state", "created", "shipped_at")
        .order_by("-created", "-id")
        .first()
    )
    now = timezone.now()
    facts: list[Fact] = []
    if ticket is not None:
        who = f"assigned to {ticket.assignee}" if ticket.assignee else "not assigned yet"
        if not operator and ticket.assignee:
            who = "assigned to a technician"
        text = (
            f"{TicketState(ticket.state).label}, {who}; opened {ticket.created:%Y-%m-%d %H:%M} UTC "
            f"({timesince(ticket.created, now)} ago). {ticket.component}: {ticket.what[:200]}"
        )
        if node.state == NodeState.REPAIR:
            text += " " + NEXT.format(state="repair", what="the ticket is resolved")
        facts.append(
            Fact(
                "repair",
                f"Repair ticket #{ticket.pk}",
                text,
                tone="warning",
                link=reverse("repair-detail", args=[ticket.pk]),
            )
        )
    if case is not None:
        vendor = f"{case.vendor} case {case.vendor_case_number}" if case.vendor_case_number else case.vendor
        text = (
            f"{RmaState(case.state).label} ({vendor}), {case.part}; opened {case.created:%Y-%m-%d %H:%M} UTC "
            f"({timesince(case.created, now)} ago)."
        )
        if case.shipped_at:
            text += f" Shipped {case.shipped_at:%Y-%m-%d %H:%M} UTC."
        if node.state == NodeState.RMA:
            text += " " + NEXT.format(state="RMA", what="the part is back and the case is closed")
        facts.append(
            Fact(
                "rma",
                f"RMA #{case.pk}",
                text,
                tone="warning",
                link=reverse("rma-detail", args=[case.pk]),
            )
        )
    return facts
