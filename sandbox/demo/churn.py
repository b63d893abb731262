"""Keeping the demo fleet alive: the people of the demo, doing what people do, through their own verbs.

Trouble is never made here: faults come from the fleet simulator (``simulator.live``) through the
agents' reports, the real health rules and the real remediation, which own every state a fault
leads to (drains, triage, remediation, the hand-off to repair or RMA). What is left for people is
what an operator, a technician or a vendor does in a real fleet, each through the same service an
operator's click or a technician's API call goes through:
- a technician starts and resolves an open repair ticket (``repairs.services``: resolving the
  node's last ticket sends it through Day 1 again);
- the vendor ships, answers and closes an RMA case (closing the last one re-validates the node);
- an operator approves a remediation awaiting approval (``remediation.services.approve``), and
  opens a repair ticket for a node left in triage with nothing automated to do (a failed Day 1
  stage: validation leaves those to people).
New servers arriving in the bring-up bay are ``bringup``'s: enrolled through the real pipeline.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from nodes.models import Node
from nodes.services import Actor
from remediation import services as remediation
from remediation.choices import OPEN as OPEN_REMEDIATION
from remediation.choices import Status
from remediation.models import Remediation
from repairs import services as repairs
from repairs.choices import OPEN_TICKET_STATES, RmaOutcome, RmaState, TicketState
from repairs.models import RepairTicket, RmaCase

from .catalog import DEMO_SITE_SLUGS, S
from .seed import demo_fleet_exists

# The only verbs the demo's people use: an operator's, a technician's and a vendor's, never a
# node verb for a state the engine owns (tests/sandbox/demo/test_demo_churn.py holds it to this list).
PEOPLE_VERBS: dict[str, Callable[..., Any]] = {
    "start_repair": repairs.start_repair,
    "resolve_repair": repairs.resolve_repair,
    "ship_rma": repairs.ship_rma,
    "receive_rma": repairs.receive_rma,
    "close_rma": repairs.close_rma,
    "approve": remediation.approve,
    "open_repair_ticket": repairs.open_repair_ticket,
}
# Demo time runs fast: minutes before a person gets to it.
WAIT = {
    "start_repair": 3,
    "resolve_repair": 8,
    "ship_rma": 5,
    "receive_rma": 20,
    "close_rma": 3,
    "approve": 2,
    "open_repair_ticket": 10,
}
PER_MOVE = 3
Move = Callable[[random.Random, datetime, Actor], list[str]]
REFUSED = (
    TransitionNotAllowed,
    ConcurrentTransition,
    ValidationError,
    Node.DoesNotExist,
    RepairTicket.DoesNotExist,
    RmaCase.DoesNotExist,
    Remediation.DoesNotExist,
    remediation.RemediationConflict,
)


def _person() -> Actor:
    """The demo's operator (who also plays the technician and the vendor's contact)."""
    user = get_user_model().objects.filter(username="operator").first()
    return Actor(user=user) if user is not None else Actor.system("demo-operator")


def _do(verb: str, target: int, hostname: str, actor: Actor, **kwargs: Any) -> list[str]:
    """One person's action through its service; one that someone else (or the engine) beat is skipped."""
    try:
        PEOPLE_VERBS[verb](target, actor=actor, **kwargs)
    except REFUSED:
        return []
    return [f"{hostname}: {verb}"]


def _due(rng: random.Random, rows: list[Any]) -> list[Any]:
    return rng.sample(rows, min(PER_MOVE, len(rows)))


def _on_demo(prefix: str = "node__") -> Q:
    return Q(**{f"{prefix}site__slug__in": DEMO_SITE_SLUGS})


def _technicians(rng: random.Random, now: datetime, actor: Actor) -> list[str]:
    """Tickets are worked: started, then resolved (the node goes through Day 1 again)."""
    changes: list[str] = []
    tickets = list(
        RepairTicket.objects.filter(_on_demo(), state__in=OPEN_TICKET_STATES)
        .filter(
            Q(state=TicketState.OPEN, created__lte=now - timedelta(minutes=WAIT["start_repair"]))
            | Q(state=TicketState.IN_PROGRESS, updated__lte=now - timedelta(minutes=WAIT["resolve_repair"]))
        )
        .order_by("pk")[:200]
    )
    for ticket in _due(rng, tickets):
        if ticket.state == TicketState.OPEN:
            changes += _do("start_repair", ticket.pk, ticket.hostname, actor, reason="On site", assignee="demo tech")
        else:
            changes += _do(
                "resolve_repair",
                ticket.pk,
                ticket.hostname,
                actor,
                reason=f"{ticket.component}: checked and fixed on site",
            )
    return changes


def _vendor(rng: random.Random, now: datetime, actor: Actor) -> list[str]:
    """RMA cases move at the vendor's pace: shipped, answered with a replacement, closed."""
    changes: list[str] = []
    cases = list(
        RmaCase.objects.filter(
            _on_demo(),
            state__in=(RmaState.OPENED, RmaState.SHIPPED, RmaState.RETURNED),
            updated__lte=now - timedelta(minutes=WAIT["ship_rma"]),
        ).order_by("pk")[:200]
    )
    for case in _due(rng, cases):
        if case.state == RmaState.OPENED:
            changes += _do("ship_rma", case.pk, case.hostname, actor, reason="Shipped to the vendor")
        elif case.state == RmaState.SHIPPED:
            if case.updated <= now - timedelta(minutes=WAIT["receive_rma"]):
                changes += _do(
                    "receive_rma",
                    case.pk,
                    case.hostname,
                    actor,
                    outcome=RmaOutcome.REPLACED,
                    replacement_serial=f"R{case.failed_serial}"[:100],
                    reason="Replacement received",
                )
        else:
            changes += _do("close_rma", case.pk, case.hostname, actor, reason="Replacement part fitted")
    return changes


def _operators(rng: random.Random, now: datetime, actor: Actor) -> list[str]:
    """Remediations awaiting approval are approved; a node in triage that nothing automated will
    take on (no open remediation, no open ticket) gets a technician's ticket."""
    changes: list[str] = []
    waiting = list(
        Remediation.objects.filter(
            _on_demo(), status=Status.AWAITING_APPROVAL, updated__lte=now - timedelta(minutes=WAIT["approve"])
        )
        .select_related("node")
        .order_by("pk")[:200]
    )
    for rem in _due(rng, waiting):
        changes += _do("approve", rem.pk, rem.node.hostname, actor, reason="Looked at the finding: go ahead")
    stuck = list(
        Node.objects.filter(
            _on_demo(""), state=S.TRIAGE, state_changed_at__lte=now - timedelta(minutes=WAIT["open_repair_ticket"])
        )
        .exclude(remediations__status__in=OPEN_REMEDIATION)
        .exclude(repair_tickets__state__in=OPEN_TICKET_STATES)
        .order_by("pk")[:200]
    )
    for node in _due(rng, stuck):
        finding = node.findings.order_by("-created").first()
        component = (finding.subject or finding.rule) if finding is not None else "node"
        what = finding.summary if finding is not None else "Left in triage: look at its history"
        changes += _do(
            "open_repair_ticket",
            node.pk,
            node.hostname,
            actor,
            component=component,
            what=what,
            reason="Nothing automated for this one: a technician looks at it",
        )
    return changes


MOVES: tuple[Move, ...] = (_technicians, _vendor, _operators)


@shared_task(name="sandbox.demo.churn_demo_fleet")
def churn_demo_fleet(seed: int | None = None) -> str:
    """What the demo's people get done this minute (at most ``PER_MOVE`` of each kind of work).

    Runs every minute from Celery beat when NODEWARDEN_DEMO_CHURN is set; a no-op
    otherwise, and a no-op on a database without the demo fleet.
    """
    if not settings.NODEWARDEN_DEMO_CHURN:
        return "disabled"
    if not demo_fleet_exists():
        return "no demo fleet"
    rng, now, actor = random.Random(seed), timezone.now(), _person()
    changes = [change for move in rng.sample(MOVES, len(MOVES)) for change in move(rng, now, actor)]
    return f"{len(changes)} changes" + (": " + "; ".join(changes) if changes else "")
