"""Writing the demo fleet: sites, nodes, users, history rows and state-count snapshots in bulk."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.db import models, transaction
from django.utils import timezone

from feeds.models import Subscription
from feeds.services import deactivate, subscribe
from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant, TenantMembership
from health.models import Alert, Finding
from nodes.choices import ActorKind, EventKind
from nodes.models import GPU, Node, NodeEvent, Run, StateCountSnapshot
from nodes.roles import ensure_roles
from remediation.models import Remediation, RemediationStep
from repairs.models import RepairEvent, RepairTicket, RmaCase

from .catalog import (
    BATCH,
    CLUSTERS,
    DEMO_PASSWORD,
    DEMO_SITE_SLUGS,
    DEMO_USERS,
    MAX_NODES,
    MIN_DAYS,
    MIN_NODES,
    PERSONAS,
    PROFILES,
    SITES,
    SYS,
    TENANTS,
    S,
)
from .lives import _Life, _live, _plan, _Row, _Slot
from .reach import RECEIVER_DESCRIPTION, RECEIVER_PLACEHOLDER
from .records import Records, engine_records


def demo_fleet_exists() -> bool:
    return Site.objects.filter(slug__in=DEMO_SITE_SLUGS).exists()


def demo_nodes() -> models.QuerySet[Node]:
    return Node.objects.filter(site__slug__in=DEMO_SITE_SLUGS)


def reset_demo_fleet() -> None:
    """Delete the demo fleet and its history (demo data only: a fixture reset, not a history rewrite)."""
    with transaction.atomic():
        node_ids = list(demo_nodes().values_list("id", flat=True))
        # The history models' own managers refuse deletes; the plain QuerySet is the deliberate way round
        # them. Repair history and its tickets and cases first: they protect their nodes.
        models.QuerySet(model=RepairEvent).filter(node_id__in=node_ids).delete()
        RepairTicket.objects.filter(node_id__in=node_ids).delete()
        RmaCase.objects.filter(node_id__in=node_ids).delete()
        models.QuerySet(model=Finding).filter(node_id__in=node_ids).delete()
        models.QuerySet(model=NodeEvent).filter(node_id__in=node_ids).delete()
        Node.objects.filter(id__in=node_ids).delete()
        Rack.objects.filter(site__slug__in=DEMO_SITE_SLUGS).delete()
        Cluster.objects.filter(site__slug__in=DEMO_SITE_SLUGS).delete()  # cascades its snapshots
        Site.objects.filter(slug__in=DEMO_SITE_SLUGS).delete()
        Tenant.objects.filter(slug__in=[slug for _, slug in TENANTS]).delete()
        Subscription.objects.filter(description=RECEIVER_DESCRIPTION).delete()


def ensure_demo_users() -> dict[str, Any]:
    """Create or refresh the demo logins; all share DEMO_PASSWORD (hashed once: hashing is slow on purpose)."""
    User = get_user_model()  # noqa: N806 - Django's name for the user model
    password = make_password(DEMO_PASSWORD)
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=[slug for _, slug in TENANTS])}
    users: dict[str, Any] = {}
    for spec in DEMO_USERS:
        user, _ = User.objects.get_or_create(username=spec.username)
        user.is_staff, user.is_superuser, user.is_active = spec.staff, spec.superuser, True
        user.password = password
        user.save()
        user.groups.set(Group.objects.filter(name=spec.group) if spec.group else [])
        if spec.tenant:
            TenantMembership.objects.update_or_create(user=user, defaults={"tenant": tenants[spec.tenant]})
        users[spec.username] = user
    return users


def login_lines() -> list[str]:
    return [f"  {u.username:<16} {u.role}" for u in DEMO_USERS]


def _inventory() -> dict[str, dict[str, Any]]:
    sites = {s.slug: Site.objects.create(name=s.name, slug=s.slug, location=s.location) for s in SITES}
    tenants = {slug: Tenant.objects.create(name=name, slug=slug) for name, slug in TENANTS}
    profiles: dict[str, HardwareProfile] = {}
    for name, spec in PROFILES.items():
        fields = {k: v for k, v in spec.items() if k != "serial_prefix"}
        profiles[name], _ = HardwareProfile.objects.update_or_create(name=name, defaults=fields)
    personas = {
        name: Persona.objects.update_or_create(name=name, defaults={"description": text})[0]
        for name, text in PERSONAS.items()
    }
    clusters = {
        c.name: Cluster.objects.create(
            site=sites[c.site], name=c.name, scheduler_kind=c.scheduler, scheduler_endpoint=c.endpoint
        )
        for c in CLUSTERS
    }
    return {"site": sites, "tenant": tenants, "profile": profiles, "persona": personas, "cluster": clusters}


def _snapshot_times(now: datetime, days: int) -> list[datetime]:
    """Daily at midnight UTC over the window, hourly over the last 48 hours."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    midnight = hour.replace(hour=0)
    times = {midnight - timedelta(days=d) for d in range(days + 1)} | {hour - timedelta(hours=h) for h in range(48)}
    return sorted(t for t in times if t <= now)


def _snapshots(nodes: list[Node], lives: list[_Life], now: datetime, days: int) -> list[StateCountSnapshot]:
    """Replay every node's transitions and count states per (time, state, cluster, tenant)."""
    counts: Counter[tuple[datetime, str, int | None, int | None]] = Counter()
    times = _snapshot_times(now, days)
    for node, life in zip(nodes, lives, strict=True):
        steps = [(r.at, r.target) for r in life.rows if r.kind == EventKind.TRANSITION]
        state, i = S.ENROLLED, 0
        for t in times:
            if t < node.created:
                continue
            while i < len(steps) and steps[i][0] <= t:
                state, i = steps[i][1], i + 1
            counts[(t, state, node.cluster_id, node.tenant_id)] += 1
    return [
        StateCountSnapshot(taken_at=t, state=s, cluster_id=c, tenant_id=tn, count=n)
        for (t, s, c, tn), n in counts.items()
    ]


def build_demo_fleet(
    *, nodes: int = 500, days: int = 120, seed: int = 42, now: datetime | None = None
) -> dict[str, int]:
    """Write the demo fleet with ``days`` of history ending ``now``; returns row counts by kind."""
    if not MIN_NODES <= nodes <= MAX_NODES or days < MIN_DAYS:
        raise ValueError(f"nodes must be {MIN_NODES}-{MAX_NODES} and days at least {MIN_DAYS}")
    rng = random.Random(seed)
    now = (now or timezone.now()).replace(microsecond=0)
    slots = _plan(rng, nodes, days, now)
    lives = [_live(slot, rng, now) for slot in slots]
    for slot, life in zip(slots, lives, strict=True):
        if life.state != slot.goal or life.t > now:
            raise AssertionError(f"{slot.hostname}: walk ended in {life.state} at {life.t}, wanted {slot.goal}")
    with transaction.atomic():
        ensure_roles()
        inv = _inventory()
        users = ensure_demo_users()
        racks: dict[tuple[str, str], Rack] = {}
        for slot in slots:
            racks.setdefault((slot.cluster.site, slot.rack), Rack(site=inv["site"][slot.cluster.site], name=slot.rack))
        Rack.objects.bulk_create(racks.values(), batch_size=BATCH)
        node_rows = [_node(slot, life, inv, racks) for slot, life in zip(slots, lives, strict=True)]
        Node.objects.bulk_create(node_rows, batch_size=BATCH)
        for node, life in zip(node_rows, lives, strict=True):
            node.created = life.rows[0].at  # auto_now_add stamped "now" on insert; the node arrived earlier
        Node.objects.bulk_update(node_rows, ["created"], batch_size=BATCH)
        gpus = [
            GPU(node=node, index=i, uuid=u, serial=serial, model=PROFILES[slot.cluster.profile]["gpu_model"])
            for node, slot in zip(node_rows, slots, strict=True)
            for i, (u, serial) in enumerate(slot.gpus)
        ]
        GPU.objects.bulk_create(gpus, batch_size=BATCH)
        records = _engine_records(node_rows, slots, lives, now)
        by_row = {
            id(row): _event(node, row, users) for node, life in zip(node_rows, lives, strict=True) for row in life.rows
        }
        events = list(by_row.values())
        NodeEvent.objects.bulk_create(events, batch_size=BATCH)
        _link_findings(records, by_row)
        # The webhook of bin/demo's feed receiver (sandbox.demo.reach points and activates it when it
        # runs); made by the admin, so the loopback address is allowed (staff subscriptions are trusted).
        deactivate(subscribe(users["admin"], url=RECEIVER_PLACEHOLDER, description=RECEIVER_DESCRIPTION))
        snapshots = _snapshots(node_rows, lives, now, days)
        StateCountSnapshot.objects.bulk_create(snapshots, batch_size=BATCH)
        # bulk_create sends no post_save: the stored outages and the daily roll-up are built here.
        from nodes.statecounts import roll_up
        from reports.flows import roll_up as roll_up_flows
        from reports.outages import rebuild

        rebuild([n.pk for n in node_rows])
        roll_up()
        roll_up_flows()
    return {
        "sites": len(SITES),
        "clusters": len(CLUSTERS),
        "racks": len(racks),
        "tenants": len(TENANTS),
        "nodes": len(node_rows),
        "gpus": len(gpus),
        "events": len(events),
        "snapshots": len(snapshots),
        "findings": len(records.findings),
        "remediations": len(records.remediations),
        "tickets": len(records.tickets),
        "cases": len(records.cases),
    }


def _engine_records(nodes: list[Node], slots: list[_Slot], lives: list[_Life], now: datetime) -> Records:
    """Write the findings, alerts, remediations, tickets and cases behind the seeded history
    (``records``), and put their ids in the history rows that name them, as the services do."""
    records = Records()
    for node, slot, life in zip(nodes, slots, lives, strict=True):
        records.extend(engine_records(node, life, [serial for _, serial in slot.gpus], now))
    Alert.objects.bulk_create(records.alerts, batch_size=BATCH)
    Finding.objects.bulk_create(records.findings, batch_size=BATCH)
    Remediation.objects.bulk_create(records.remediations, batch_size=BATCH)
    RemediationStep.objects.bulk_create(records.steps, batch_size=BATCH)
    Run.objects.bulk_create(records.runs, batch_size=BATCH)
    tickets = RepairTicket.objects.bulk_create([t.build() for t in records.tickets], batch_size=BATCH)
    cases = RmaCase.objects.bulk_create([c.build() for c in records.cases], batch_size=BATCH)
    RepairEvent.objects.bulk_create(
        [e for record in (*tickets, *cases) for e in _repair_events(record)], batch_size=BATCH
    )
    for row, key, record in records.names:
        row.details[key] = record.pk
    for row, finding in records.finding_rows:
        row.details |= {
            "finding_id": finding.pk,
            "alert_id": finding.alert.pk,
            "rule": finding.rule,
            "severity": finding.severity,
        }
    return records


def _link_findings(records: Records, by_row: dict[int, NodeEvent]) -> None:
    """Each finding names its history row and each alert its last finding (both written after them)."""
    findings = []
    for row, finding in records.finding_rows:
        finding.event = by_row[id(row)]
        finding.alert.last_finding = finding
        findings.append(finding)
    # The plain QuerySet: a finding's row link is filled once, here, as raise_finding fills it.
    models.QuerySet(model=Finding).bulk_update(findings, ["event"], batch_size=BATCH)
    Alert.objects.bulk_update([f.alert for f in findings], ["last_finding"], batch_size=BATCH)


def _repair_events(record: RepairTicket | RmaCase) -> list[RepairEvent]:
    """The ticket's or case's own history: opened, then how it ended (if it has)."""
    is_ticket = isinstance(record, RepairTicket)
    link = {"ticket": record} if is_ticket else {"rma_case": record}
    first = "open" if is_ticket else "opened"
    rows = [
        RepairEvent(
            node=record.node,
            hostname=record.hostname,
            verb="open",
            from_state="",
            to_state=first,
            actor_name=record.opened_by_name,
            reason="Opened",
            created=record.created,
            **link,
        )
    ]
    ended = record.resolved_at if is_ticket else record.closed_at
    if record.state not in ("open", "opened"):
        verb = {"resolved": "resolve", "cancelled": "cancel", "closed": "close"}[record.state]
        rows.append(
            RepairEvent(
                node=record.node,
                hostname=record.hostname,
                verb=verb,
                from_state=first,
                to_state=record.state,
                actor_name="operator",
                reason=verb.capitalize() + "d",
                created=ended or record.created,
                **link,
            )
        )
    return rows


def _node(slot: _Slot, life: _Life, inv: dict[str, dict[str, Any]], racks: dict[tuple[str, str], Rack]) -> Node:
    spec = slot.cluster
    # The FSM field is protected: the final state is given at construction and never assigned afterwards.
    return Node(
        hostname=slot.hostname,
        serial=slot.serial,
        bmc_address=slot.bmc,
        site=inv["site"][spec.site],
        cluster=inv["cluster"][spec.name],
        rack=racks[(spec.site, slot.rack)],
        rack_unit=slot.unit,
        tenant=inv["tenant"][slot.tenant] if slot.tenant else None,
        hardware_profile=inv["profile"][spec.profile],
        persona=inv["persona"][spec.persona],
        state=life.state,
        is_revalidation=life.is_revalidation,
        state_changed_at=next((r.at for r in reversed(life.rows) if r.kind == EventKind.TRANSITION), life.rows[0].at),
    )


def _event(node: Node, row: _Row, users: dict[str, Any]) -> NodeEvent:
    is_system = row.actor.startswith(SYS)
    return NodeEvent(
        node=node,
        hostname=node.hostname,
        created=row.at,
        kind=row.kind,
        transition=row.transition,
        source_state=row.source,
        target_state=row.target,
        reason=row.reason,
        actor=None if is_system else users[row.actor],
        actor_kind=ActorKind.SYSTEM if is_system else ActorKind.USER,
        actor_name=row.actor,
        details=row.details,
    )


# --- Keeping it alive -------------------------------------------------------
