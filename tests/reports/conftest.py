"""A small fleet with a known week, built row by row (the services are tested elsewhere): every
figure the reports show can be worked out by hand from the table in ``week``.

The period is the 7 days before ``NOW``. Tenant Acme (cluster c-east) and Globex (c-west):

- acme-a: remediated at -6 d (system cordon, 4 h out: provider), drained on an operator's
  request at -3 d (out 5 h from the system's start of the drain: customer), cordoned at -1 d and
  sent to repair (still out at NOW: 24 h, provider). Serving 168 - 33 = 135 h.
- acme-b: out since -8 d (system cordon), back at -7 d + 10 h: 10 h in the period, provider.
- acme-d: new at -3 d, Day 0 and Day 1, production at -2 d: 48 h serving, no downtime.
- acme-e: in production, no history at all: 168 h serving.
- globex-c: drained by an operator at -2 d, back 3 h later: customer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from health.models import Finding
from nodes import followups
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationStep
from tests.factories import ClusterFactory, NodeFactory, TenantFactory, UserFactory

S = NodeState
NOW = datetime(2025, 6, 30, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
D = timedelta(days=1)
SYSTEM, USER = "system", "user"


@pytest.fixture(autouse=True)
def settled_cache(settings):
    """The report's cache of settled days on, as with Redis (one process here: its memory is shared)."""
    settings.NODEWARDEN_SETTLED_CACHE = True


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield NOW


def change(
    node: Node,
    at: datetime,
    source: str,
    target: str,
    *,
    actor: str = "system:remediation",
    details: dict | None = None,
    reason: str = "test",
) -> NodeEvent:
    kind = USER if not actor.startswith("system:") else SYSTEM
    event = NodeEvent.objects.create(
        node=node,
        hostname=node.hostname,
        created=at,
        kind="transition",
        transition="t",
        source_state=source,
        target_state=target,
        reason=reason,
        actor_kind=kind,
        actor_name=actor,
        details=details or {},
    )
    # Back-dated history, recorded as nodes.services records a change: the derived rows follow it.
    followups.state_changed(event)
    return event


def node(hostname: str, cluster, tenant, state: str, created: datetime) -> Node:
    n = NodeFactory(hostname=hostname, cluster=cluster, tenant=tenant, state=state)
    Node.objects.filter(pk=n.pk).update(created=created)
    n.refresh_from_db()
    return n


def remediation(
    n: Node,
    found: datetime,
    finished: datetime | None,
    *,
    status=Status.SUCCEEDED,
    rung=Rung.REBOOT,
    summary="XID 79: GPU has fallen off the bus",
    rule="xid",
    xid=79,
) -> Remediation:
    finding = Finding.objects.create(
        node=n,
        hostname=n.hostname,
        rule=rule,
        xid=xid,
        severity="catastrophic",
        summary=summary,
        subject="xid:79",
        observed_at=found,
        created=found,
    )
    rem = Remediation.objects.create(
        node=n,
        finding=finding,
        status=status,
        rung=rung,
        urgency=Urgency.NOW,
        created=found + timedelta(minutes=1),
        updated=found,
        finished=finished,
    )
    RemediationStep.objects.create(
        remediation=rem, rung=rung, status=StepStatus.PASSED, started=found, deadline=found + H
    )
    return rem


@dataclass
class Week:
    acme: object
    globex: object
    east: object
    west: object
    a: Node
    b: Node
    c: Node
    d: Node
    e: Node
    rem_a: Remediation


@pytest.fixture
def week(db) -> Week:
    acme, globex = TenantFactory(name="Acme AI", slug="acme"), TenantFactory(name="Globex", slug="globex")
    east, west = ClusterFactory(name="c-east"), ClusterFactory(name="c-west")
    a = node("acme-a", east, acme, S.REPAIR, NOW - 60 * D)
    b = node("acme-b", east, acme, S.PRODUCTION, NOW - 60 * D)
    c = node("globex-c", west, globex, S.PRODUCTION, NOW - 60 * D)
    d = node("acme-d", east, acme, S.PRODUCTION, NOW - 3 * D)
    e = node("acme-e", east, acme, S.PRODUCTION, NOW - 100 * D)

    change(a, NOW - 30 * D, S.RELIABILITY_ASSESSMENT, S.PRODUCTION, actor="system:validation")
    rem_a = remediation(a, NOW - 6 * D - timedelta(minutes=10), NOW - 6 * D + 4 * H)
    change(a, NOW - 6 * D, S.PRODUCTION, S.TRIAGE, details={"remediation": rem_a.pk}, reason="Remediation: XID 79")
    change(a, NOW - 6 * D + H, S.TRIAGE, S.REMEDIATING)
    change(a, NOW - 6 * D + 2 * H, S.REMEDIATING, S.FIRMWARE_UPDATE)
    change(a, NOW - 6 * D + 4 * H, S.FIRMWARE_UPDATE, S.PRODUCTION, actor="system:validation")
    change(a, NOW - 3 * D, S.PRODUCTION, S.DRAIN_PENDING, actor="operator", reason="customer asked for a reimage")
    change(a, NOW - 3 * D + H, S.DRAIN_PENDING, S.DRAINING, actor="system:followup")
    change(a, NOW - 3 * D + 2 * H, S.DRAINING, S.TRIAGE, actor="system:followup")
    change(a, NOW - 3 * D + 5 * H, S.TRIAGE, S.FIRMWARE_UPDATE, actor="operator")
    change(a, NOW - 3 * D + 6 * H, S.FIRMWARE_UPDATE, S.PRODUCTION, actor="system:validation")
    change(a, NOW - D, S.PRODUCTION, S.TRIAGE, actor="system:health", reason="ECC storm")
    change(a, NOW - D + 2 * H, S.TRIAGE, S.REPAIR, actor="operator")

    change(b, NOW - 20 * D, S.RELIABILITY_ASSESSMENT, S.PRODUCTION, actor="system:validation")
    change(b, NOW - 8 * D, S.PRODUCTION, S.TRIAGE)
    change(b, NOW - 8 * D + 2 * H, S.TRIAGE, S.REMEDIATING)
    change(b, NOW - 7 * D + 10 * H, S.REMEDIATING, S.PRODUCTION)
    remediation(
        b,
        NOW - 8 * D,
        NOW - 7 * D + 10 * H,
        rung=Rung.POWER_CYCLE,
        summary="GPU 3 too hot",
        rule="gpu_temperature",
        xid=None,
    )

    change(c, NOW - 30 * D, S.RELIABILITY_ASSESSMENT, S.PRODUCTION, actor="system:validation")
    change(c, NOW - 2 * D, S.PRODUCTION, S.DRAINING, actor="operator", reason="maintenance on request")
    change(c, NOW - 2 * D + H, S.DRAINING, S.TRIAGE, actor="system:followup")
    change(c, NOW - 2 * D + 3 * H, S.TRIAGE, S.FIRMWARE_UPDATE, actor="operator")
    change(c, NOW - 2 * D + 3 * H + timedelta(minutes=30), S.FIRMWARE_UPDATE, S.PRODUCTION, actor="system:validation")

    day1 = [
        S.ENROLLED,
        S.INITIALIZING,
        S.ONBOARD,
        S.FIRMWARE_UPDATE,
        S.INVENTORY_CHECK,
        S.BURN_IN,
        S.FABRIC_CHECK,
        S.RELIABILITY_ASSESSMENT,
        S.PRODUCTION,
    ]
    for i, (source, target) in enumerate(itertools.pairwise(day1)):
        change(d, NOW - 3 * D + i * 3 * H, source, target, actor="system:validation")
    assert day1[-1] == S.PRODUCTION and NOW - 3 * D + 7 * 3 * H == NOW - 2 * D - 3 * H
    return Week(acme, globex, east, west, a, b, c, d, e, rem_a)


@pytest.fixture
def acme_user(week):
    return UserFactory(username="acme-user", tenant=week.acme)
