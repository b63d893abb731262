"""Fabric services: the only road from what the fabric looks like to runs, discrepancies,
tickets and the nodes' histories.

``record_run`` takes what one look at the fabric saw (cables, down ports, devices, port
counters) and, in one transaction: records the run and what it found, computes counter
increases since each port's previous look (a reset counter counts from zero), records
link flaps, compares everything with the plan in force (``fabric.validation``), stores
the discrepancies, opens a ticket per new problem (one per problem and cable: a problem
seen again updates its ticket), closes tickets whose problem is gone, and puts each
ticket's opening and closing on the affected nodes' histories as a finding (health rule
``ib_fabric``) and its resolution.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from health.services import clear_condition, raise_finding
from nodes.models import Node
from nodes.services import Actor, clean_reason

from .choices import KIND_SEVERITY, DiscrepancyKind, RunSource, RunStatus, TicketStatus
from .models import (
    DiscoveredLink,
    DiscoveryOutput,
    DiscoveryRun,
    Discrepancy,
    FabricDevice,
    LinkFlap,
    ManualValidation,
    PortCounterSnapshot,
    Ticket,
)
from .plan import current_plan, ensure_devices
from .validation import (
    FLAP_COUNTER,
    FLAP_WINDOW_HOURS,
    Port,
    Problem,
    Seen,
    compare,
    counter_deltas,
    counter_problems,
    flap_problem,
)

ACTOR = Actor.system("fabric")
FINDING_RULE = "ib_fabric"


def record_run(
    seen: Seen | None,
    counters: Mapping[Port, Mapping[str, int]],
    *,
    source: str = RunSource.COLLECTOR,
    actor: Actor = ACTOR,
    outputs: Mapping[str, str] | None = None,
    guids: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> DiscoveryRun:
    """Record one look at the fabric (see the module docstring). ``seen`` None: counters only
    (e.g. from node agents), no topology check and no ticket closed for a topology problem."""
    now = now or timezone.now()
    started = timezone.now()
    names = set(seen.devices if seen else ()) | {p.device for p in counters}
    with transaction.atomic():
        devices = ensure_devices(names)
        _note_seen(devices, guids or {}, now)
        plan, plan_links = current_plan()
        run = DiscoveryRun.objects.create(
            source=source,
            plan=plan,
            actor_name=actor.name,
            started=now,
            devices=len(seen.devices) if seen else 0,
            links=len(seen.links) if seen else 0,
        )
        DiscoveryOutput.objects.bulk_create(
            [DiscoveryOutput(run=run, tool=t, text=x) for t, x in (outputs or {}).items()]
        )
        problems = compare(plan_links, seen) if seen is not None and plan is not None else []
        if seen is not None:
            _store_links(run, seen, devices)
        problems += _counters(run, counters, devices, now)
        peers = {end: other for link in plan_links for end, other in ((link.a, link.b), (link.b, link.a))}
        opened, closed = _tickets(run, problems, devices, peers, topology=seen is not None, now=now)
        run.status, run.finished = RunStatus.DONE, timezone.now()
        run.summary = {
            "by_kind": dict(Counter(p.kind for p in problems)),
            "discrepancies": len(problems),
            "tickets_opened": opened,
            "tickets_closed": closed,
            "seconds": round((run.finished - started).total_seconds(), 3),
            "planned_links": len(plan_links),
        }
        run.save(update_fields=["status", "finished", "summary"])
    return run


def _note_seen(devices: Mapping[str, FabricDevice], guids: Mapping[str, str], now: datetime) -> None:
    FabricDevice.objects.filter(name__in=list(devices)).update(last_seen=now)
    changed = [d for name, d in devices.items() if guids.get(name) and d.guid != guids[name]]
    for device in changed:
        device.guid = guids[device.name]
    FabricDevice.objects.bulk_update(changed, ["guid"], batch_size=2000)


def _store_links(run: DiscoveryRun, seen: Seen, devices: Mapping[str, FabricDevice]) -> None:
    rows = [
        DiscoveredLink(
            run=run,
            a_device=devices[link.a.device],
            a_port=link.a.port,
            b_device=devices[link.b.device],
            b_port=link.b.port,
            width=link.width or "",
            rate_gbps=link.rate_gbps,
            state=link.state,
            phys_state=link.phys_state,
        )
        for link in seen.links
    ]
    rows += [
        DiscoveredLink(
            run=run,
            a_device=devices[port.device],
            a_port=port.port,
            state=state.split("/")[0],
            phys_state=state.split("/")[-1].strip(),
        )
        for port, state in seen.down_ports.items()
    ]
    DiscoveredLink.objects.bulk_create(rows, batch_size=5000)


def _previous_counters(device_ids: Iterable[int]) -> dict[tuple[int, int], PortCounterSnapshot]:
    """Each port's latest snapshot before this run, from the last run that took counters."""
    last = (
        PortCounterSnapshot.objects.filter(device_id__in=list(device_ids))
        .order_by("-taken_at")
        .values_list("run_id", flat=True)
        .first()
    )
    if last is None:
        return {}
    return {(s.device_id, s.port): s for s in PortCounterSnapshot.objects.filter(run_id=last)}


def _counters(
    run: DiscoveryRun, counters: Mapping[Port, Mapping[str, int]], devices: Mapping[str, FabricDevice], now: datetime
) -> list[Problem]:
    if not counters:
        return []
    previous = _previous_counters(d.pk for d in devices.values())
    snapshots, flaps, problems = [], [], []
    for port, values in counters.items():
        device = devices[port.device]
        before = previous.get((device.pk, port.port))
        deltas = counter_deltas(before.counters, values) if before else None
        hours = (now - before.taken_at).total_seconds() / 3600 if before else None
        snapshots.append(
            PortCounterSnapshot(
                run=run,
                device=device,
                port=port.port,
                taken_at=now,
                counters=dict(values),
                deltas=deltas or {},
                seconds_since_previous=hours * 3600 if hours else None,
            )
        )
        if deltas and deltas.get(FLAP_COUNTER, 0) > 0:
            flaps.append(LinkFlap(device=device, port=port.port, run=run, observed_at=now, count=deltas[FLAP_COUNTER]))
        problem = counter_problems(port, values, deltas, hours)
        if problem:
            problems.append(problem)
    PortCounterSnapshot.objects.bulk_create(snapshots, batch_size=5000)
    LinkFlap.objects.bulk_create(flaps)
    recent = (
        LinkFlap.objects.filter(
            observed_at__gt=now - timedelta(hours=FLAP_WINDOW_HOURS), device__in=list(devices.values())
        )
        .values("device__name", "port")
        .annotate(n=Sum("count"))
    )
    for row in recent:
        problem = flap_problem(Port(row["device__name"], row["port"]), row["n"])
        if problem:
            problems.append(problem)
    return problems


def _port_of(endpoint: str) -> Port | None:
    device, _, number = endpoint.rpartition("/")
    return Port(device, int(number)) if number.isdigit() else None


def _devices_touched(problem: Problem, peers: Mapping[Port, Port]) -> set[str]:
    """The devices a problem names, and those planned at the far end of its ports (errors
    counted on a leaf port hurt the host cabled to it)."""
    far = {peers[port].device for port in map(_port_of, problem.endpoints) if port is not None and port in peers}
    return set(problem.devices) | far


def _nodes_of(problem: Problem, devices: Mapping[str, FabricDevice], peers: Mapping[Port, Port]) -> set[int]:
    names = _devices_touched(problem, peers)
    node_ids = (devices[name].node_id for name in names if name in devices)
    return {node_id for node_id in node_ids if node_id}


TOPOLOGY_KINDS = {
    k for k in DiscrepancyKind.values if k not in (DiscrepancyKind.COUNTER_ERRORS, DiscrepancyKind.FLAPPING)
}


def _tickets(
    run: DiscoveryRun,
    problems: list[Problem],
    devices: dict[str, FabricDevice],
    peers: Mapping[Port, Port],
    *,
    topology: bool,
    now: datetime,
) -> tuple[int, int]:
    """Open, update and close tickets; returns (opened, closed)."""
    devices = dict(devices)
    wanted = {name for problem in problems for name in _devices_touched(problem, peers)}
    devices.update({d.name: d for d in FabricDevice.objects.filter(name__in=wanted - set(devices))})
    open_tickets = {t.key: t for t in Ticket.objects.filter(status=TicketStatus.OPEN)}
    discrepancies, opened = [], 0
    for problem in problems:
        ticket = open_tickets.pop(problem.key, None)
        if ticket is None:
            ticket = _open_ticket(run, problem, _nodes_of(problem, devices, peers), now)
            opened += 1
        else:
            ticket.last_run, ticket.times_seen = run, ticket.times_seen + 1
            ticket.detail = f"Expected {problem.expected}; found {problem.found}."
            ticket.save(update_fields=["last_run", "times_seen", "detail"])
        discrepancies.append(
            Discrepancy(
                run=run,
                kind=problem.kind,
                key=problem.key,
                a_endpoint=problem.a,
                b_endpoint=problem.b,
                expected=problem.expected[:300],
                found=problem.found[:300],
                evidence=problem.evidence,
                ticket=ticket,
            )
        )
    Discrepancy.objects.bulk_create(discrepancies, batch_size=5000)
    closed = 0
    for ticket in open_tickets.values():  # not seen by this run: fixed, if this run could have seen it
        if ticket.kind in TOPOLOGY_KINDS and not topology:
            continue
        _close_ticket(ticket, run, now)
        closed += 1
    return opened, closed


def _title(problem: Problem) -> str:
    label = DiscrepancyKind(problem.kind).label
    ends = " <-> ".join(e for e in (problem.a, problem.b) if e)
    return f"{label}: {ends}"[:300]


def _open_ticket(run: DiscoveryRun, problem: Problem, node_ids: set[int], now: datetime) -> Ticket:
    ticket = Ticket.objects.create(
        key=problem.key,
        kind=problem.kind,
        title=_title(problem),
        opened_at=now,
        detail=f"Expected {problem.expected}; found {problem.found}.",
        endpoints=problem.endpoints,
        first_run=run,
        last_run=run,
    )
    ticket.nodes.set(node_ids)
    for node_id in sorted(node_ids):
        raise_finding(
            node_id,
            rule=FINDING_RULE,
            severity=KIND_SEVERITY[problem.kind],
            subject=f"ticket:{ticket.pk}",
            summary=f"Fabric ticket #{ticket.pk}: {ticket.title} (found {problem.found})",
            evidence={
                "ticket": ticket.pk,
                "kind": problem.kind,
                "endpoints": problem.endpoints,
                "expected": problem.expected,
                "found": problem.found,
                "run": run.pk,
            },
            source="fabric",
            observed_at=now,
            actor=ACTOR,
        )
    return ticket


def _close_ticket(ticket: Ticket, run: DiscoveryRun | None, now: datetime, reason: str = "") -> None:
    ticket.status, ticket.closed_at, ticket.last_run = TicketStatus.CLOSED, now, run
    # A run closes with no reason, a person (whose ticket may have lost its last run) with one.
    ticket.closed_reason = (reason or f"Fixed: not found by run {run.pk if run else '?'}")[:300]
    ticket.save(update_fields=["status", "closed_at", "last_run", "closed_reason"])
    for node_id in ticket.nodes.values_list("pk", flat=True):
        clear_condition(
            node_id,
            rule=FINDING_RULE,
            subject=f"ticket:{ticket.pk}",
            reason=f"fabric ticket #{ticket.pk} closed: {ticket.closed_reason}",
        )


def close_ticket(ticket_id: int, *, actor: Actor, reason: str) -> Ticket:
    """An operator closes a ticket by hand (e.g. a planned change); the next run reopens it if it persists."""
    reason = clean_reason(reason)
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().get(pk=ticket_id)
        if ticket.status == TicketStatus.OPEN:
            _close_ticket(ticket, ticket.last_run, timezone.now(), reason=f"Closed by {actor.name}: {reason}")
    return ticket


def record_manual_validation(*, actor: Actor, scope: str, result: str, notes: str = "") -> ManualValidation:
    """The fabric team's hands-on check, on the record with who and when."""
    scope = clean_reason(scope)
    return ManualValidation.objects.create(
        actor=actor.user,
        actor_name=actor.name,
        scope=scope[:300],
        result=result,
        notes=notes,
        run=DiscoveryRun.objects.filter(status=RunStatus.DONE).first(),
    )


def node_fabric_problems(node_id: int) -> list[Ticket]:
    """Open tickets that touch the node's HCAs: what fails its Day 1 fabric and cable check.
    A ticket opened before the node was enrolled names its ports, not the node: found by
    its key, which lists the ports ("...|<host> mlx5_3/1|...")."""
    from django.db.models import Q

    from .choices import BLOCKING_KINDS

    hostname = Node.objects.filter(pk=node_id).values_list("hostname", flat=True).first() or ""
    mine = Q(nodes=node_id) | Q(key__contains=f"|{hostname} ")
    return list(
        Ticket.objects.filter(mine, status=TicketStatus.OPEN, kind__in=BLOCKING_KINDS).distinct().order_by("opened_at")
    )


def last_run() -> DiscoveryRun | None:
    return DiscoveryRun.objects.filter(status=RunStatus.DONE).exclude(source=RunSource.AGENTS).first()


def plan_covers_node(node_id: int) -> bool:
    """Whether the plan lists the node's HCAs (tying HCAs planned before it enrolled to it now)."""
    hostname = Node.objects.filter(pk=node_id).values_list("hostname", flat=True).first()
    if hostname:
        FabricDevice.objects.filter(in_plan=True, node__isnull=True, name__startswith=f"{hostname} ").update(
            node_id=node_id
        )
    return FabricDevice.objects.filter(node_id=node_id, in_plan=True).exists()
