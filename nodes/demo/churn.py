"""Keeping the demo fleet alive: a Celery task that moves a few nodes a minute through the real services."""
from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from nodes import services
from nodes.models import Node
from nodewarden.env import env_bool

from .catalog import S
from .seed import demo_fleet_exists, demo_nodes

SIMULATOR = services.Actor.system("demo-simulator")
# Demo time runs fast: minutes in a state before the simulator moves a node on.
MIN_AGE = {
    S.ENROLLED: 3, S.INITIALIZING: 2, S.ONBOARD: 1, S.FIRMWARE_UPDATE: 2, S.INVENTORY_CHECK: 1, S.BURN_IN: 6,
    S.FABRIC_CHECK: 2, S.RELIABILITY_ASSESSMENT: 4, S.DRAIN_PENDING: 3, S.DRAINING: 1, S.TRIAGE: 2,
    S.REMEDIATING: 2, S.REPAIR: 10, S.RMA: 30,
}
Move = Callable[[random.Random, datetime], list[str]]


def _ready(rng: random.Random, now: datetime, states: tuple[str, ...], limit: int) -> list[Node]:
    """Up to ``limit`` demo nodes in ``states`` that have sat there long enough, in a seeded random order."""
    found: list[Node] = []
    for state in states:
        cutoff = now - timedelta(minutes=MIN_AGE[state])
        found += demo_nodes().filter(state=state, state_changed_at__lte=cutoff).select_related("cluster").order_by("pk")
    return rng.sample(found, min(limit, len(found)))


def _run(verb: str, node: Node, reason: str, **details: Any) -> list[str]:
    """One change through the real service; a node another worker moved first is skipped."""
    try:
        services.VERBS[verb](node.pk, actor=SIMULATOR, reason=reason, details=details or None)
    except (TransitionNotAllowed, ConcurrentTransition, Node.DoesNotExist):
        return []
    return [f"{node.hostname}: {verb}"]


def _progress_drain(rng: random.Random, now: datetime) -> list[str]:
    """Now and then a fault clears before the job ends and the drain is cancelled; draining
    itself moves on when the workload scheduler reports the node drained (remediation's
    reconciler asks it), never by the simulator's say-so."""
    changes: list[str] = []
    for node in _ready(rng, now, (S.DRAIN_PENDING,), 2):
        if rng.random() < 0.15:
            changes += _run("cancel_drain", node, "Fault cleared before the job ended: no errors for 2 h")
    return changes


def _work_the_queue(rng: random.Random, now: datetime) -> list[str]:
    """Triage, remediation, repair and RMA: each node a step further towards production."""
    changes: list[str] = []
    for node in _ready(rng, now, (S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA), 2):
        roll = rng.random()
        if node.state == S.TRIAGE:
            verb, reason = (("start_remediation", "Automated remediation: GPU reset") if roll < 0.7
                            else ("send_to_repair", "Technician ticket: reseat the failing part"))
        elif node.state == S.REMEDIATING:
            verb, reason = (("revalidate", "GPU reset cleared the fault; re-validating") if roll < 0.8
                            else ("fail_remediation", "Fault persists after GPU reset"))
        elif node.state == S.REPAIR:
            verb, reason = (("revalidate", "Repaired on site; every Day 1 check again") if roll < 0.85
                            else ("send_to_rma", "Part fails again after reseat: vendor case opened"))
        else:
            verb, reason = "revalidate", "Back from the vendor with the part replaced"
        changes += _run(verb, node, reason)
    return changes


# Day 0 and Day 1 are not moved by fiat any more: the real pipeline drives them (bringup.py), and
# faults come from the fleet simulator (simulator.live) through the agents' reports and the real rules.
MOVES: tuple[Move, ...] = (_progress_drain, _work_the_queue)


@shared_task(name="nodes.demo.churn_demo_fleet")
def churn_demo_fleet(seed: int | None = None) -> str:
    """Move a handful of demo nodes (at most 10) a step along their lives, through the real services.

    Runs every minute from Celery beat when NODEWARDEN_DEMO_CHURN is set; a no-op
    otherwise, and a no-op on a database without the demo fleet.
    """
    if not env_bool("NODEWARDEN_DEMO_CHURN", False):
        return "disabled"
    if not demo_fleet_exists():
        return "no demo fleet"
    rng, now = random.Random(seed), timezone.now()
    changes = [change for move in rng.sample(MOVES, len(MOVES)) for change in move(rng, now)]
    return f"{len(changes)} changes" + (": " + "; ".join(changes) if changes else "")
