"""A planted fleet, built in bulk: 50 nodes of one hardware profile with weekly NCCL runs
(noise +-1.5 %), of which one's bus bandwidth falls 3 %/week over 6 weeks, one runs 15 % below
the median, and one is a lemon (6 incidents, 9 XIDs, 2 repair tickets, twice out of
production). The rest are healthy, with the noise a real fleet has: an odd incident or XID,
application XIDs, a failed check, flat telemetry."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from nodes.choices import ActorKind, EventKind, NodeState, RunKind, RunStatus
from nodes.models import Node, NodeEvent, Run
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation
from repairs.choices import TicketState
from repairs.models import RepairTicket
from telemetry.models import GpuSample, GpuSampleHourly, XidRecord
from tests.factories import ClusterFactory, HardwareProfileFactory

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
BASE_BUSBW = 360.0
RUN_DAYS_AGO = (41.5, 35, 28, 21, 14, 7, 0.5)  # weekly NCCL runs over the 6-week window


@dataclass
class Fleet:
    nodes: list[Node]
    degrader: Node | None = None
    underperformer: Node | None = None
    lemon: Node | None = None
    healthy: list[Node] = field(default_factory=list)

    def by_pk(self, pk: int) -> Node:
        return next(n for n in self.nodes if n.pk == pk)


def make_nodes(count: int, *, prefix: str, profile_name: str = "trend-h100") -> list[Node]:
    profile = HardwareProfileFactory(name=profile_name)
    cluster = ClusterFactory(name=f"{prefix}-cluster")
    Node.objects.bulk_create(
        [
            Node(
                hostname=f"{prefix}-{i:03d}",
                serial=f"{prefix.upper()}{i:06d}",
                bmc_address=f"10.9.{i // 250}.{i % 250}",
                site=cluster.site,
                cluster=cluster,
                hardware_profile=profile,
                state=NodeState.PRODUCTION,
            )
            for i in range(count)
        ]
    )
    return list(Node.objects.filter(hostname__startswith=f"{prefix}-").order_by("pk"))


def nccl_runs(
    node: Node, values: list[float], *, now: datetime = NOW, days_ago: tuple[float, ...] = RUN_DAYS_AGO
) -> list[Run]:
    runs = []
    for ago, value in zip(days_ago, values, strict=True):
        at = now - timedelta(days=ago)
        runs.append(
            Run(
                node=node,
                kind=RunKind.NCCL_TEST,
                status=RunStatus.PASSED,
                created=at,
                started=at,
                finished=at + timedelta(minutes=20),
                figures={"busbw_gbps": round(value, 2)},
            )
        )
    return runs


def healthy_busbw(rng: random.Random, n: int = len(RUN_DAYS_AGO), scale: float = 1.0) -> list[float]:
    return [BASE_BUSBW * scale * (1 + rng.uniform(-0.015, 0.015)) for _ in range(n)]


def incidents(node: Node, days_ago: list[float], *, now: datetime = NOW) -> list[Remediation]:
    return [
        Remediation(
            node=node,
            status=Status.SUCCEEDED,
            urgency=Urgency.WHEN_IDLE,
            rung=Rung.REBOOT,
            created=now - timedelta(days=d),
            updated=now - timedelta(days=d),
            finished=now - timedelta(days=d - 0.5),
        )
        for d in days_ago
    ]


def xids(node: Node, numbers: list[int], *, now: datetime = NOW, tag: str = "a") -> list[XidRecord]:
    return [
        XidRecord(
            node=node,
            observed_at=now - timedelta(days=1 + 2.5 * i, minutes=i),
            fingerprint=f"{tag}{node.pk}-{i}",
            gpu_index=i % 8,
            xid=xid,
            raw=f"NVRM: Xid (PCI:0000:1b:00): {xid}",
            report_id=f"r{node.pk}-{i}",
        )
        for i, xid in enumerate(numbers)
    ]


def ticket(node: Node, days_ago: float, *, now: datetime = NOW) -> RepairTicket:
    return RepairTicket(
        node=node,
        hostname=node.hostname,
        component="GPU 3",
        what="reseat",
        opened_by_name="operator",
        state=TicketState.RESOLVED,
        created=now - timedelta(days=days_ago),
    )


def outage(node: Node, days_ago: float, hours: float, *, now: datetime = NOW) -> list[NodeEvent]:
    """Production -> triage -> (re-validation) -> production, ``hours`` long."""
    start = now - timedelta(days=days_ago)
    steps = [
        (start, NodeState.PRODUCTION, NodeState.TRIAGE),
        (start + timedelta(hours=hours / 2), NodeState.TRIAGE, NodeState.FIRMWARE_UPDATE),
        (start + timedelta(hours=hours), NodeState.RELIABILITY_ASSESSMENT, NodeState.PRODUCTION),
    ]
    return [
        NodeEvent(
            node=node,
            hostname=node.hostname,
            created=at,
            kind=EventKind.TRANSITION,
            source_state=src,
            target_state=dst,
            reason="planted",
            actor_kind=ActorKind.SYSTEM,
            actor_name="system:test",
        )
        for at, src, dst in steps
    ]


def flat_telemetry(
    node: Node,
    *,
    now: datetime = NOW,
    days: int = 42,
    ecc=lambda day: 12.0,
    temp=lambda day: 64.0,
    rng: random.Random | None = None,
) -> tuple[list, list]:
    """Two GPUs, busy: hourly roll-ups for days older than 14, raw samples (4 a day) after."""
    rng = rng or random.Random(node.pk)
    hourly, raw = [], []
    for ago in range(days, 0, -1):
        day = days - ago
        for gpu in (0, 1):
            t = temp(day) + rng.uniform(-0.5, 0.5)
            counter = int(ecc(day)) if gpu == 0 else 3
            if ago > 14:
                hour = (now - timedelta(days=ago)).replace(minute=0)
                hourly.append(
                    GpuSampleHourly(
                        node=node,
                        hour=hour,
                        gpu_index=gpu,
                        n=120,
                        temperature_avg=t,
                        temperature_max=t + 2,
                        utilization_avg=95.0,
                        ecc_aggregate_corrected_max=counter,
                        remapped_rows_correctable_max=1,
                        remapped_rows_uncorrectable_max=0,
                    )
                )
            else:
                for k in range(4):
                    raw.append(
                        GpuSample(
                            node=node,
                            collected_at=now - timedelta(days=ago, hours=k * 3),
                            gpu_index=gpu,
                            temperature_c=t,
                            utilization_pct=95.0,
                            power_w=650,
                            ecc_aggregate_corrected=counter,
                            remapped_rows_correctable=1,
                            remapped_rows_uncorrectable=0,
                        )
                    )
    return hourly, raw


def plant(count: int = 50, *, prefix: str = "tr", seed: int = 7, telemetry_nodes: int = 5) -> Fleet:
    """The planted fleet: node 3 degrades, node 11 underperforms, node 17 is a lemon (when count allows)."""
    rng = random.Random(seed)
    nodes = make_nodes(count, prefix=prefix)
    fleet = Fleet(
        nodes=nodes, degrader=nodes[3], underperformer=nodes[min(11, count - 1)], lemon=nodes[min(17, count - 2)]
    )
    special = {fleet.degrader.pk, fleet.underperformer.pk, fleet.lemon.pk}
    fleet.healthy = [n for n in nodes if n.pk not in special]
    runs, rems, xid_rows, tickets, events, hourly, raw, failed = [], [], [], [], [], [], [], []
    for node in nodes:
        if node == fleet.degrader:
            values = [BASE_BUSBW * (1 - 0.03 * (RUN_DAYS_AGO[0] - ago) / 7) for ago in RUN_DAYS_AGO]
        elif node == fleet.underperformer:
            values = healthy_busbw(rng, scale=0.85)
        else:
            values = healthy_busbw(rng)
        runs += nccl_runs(node, values)
    lemon = fleet.lemon
    rems += incidents(lemon, [28, 23, 18, 13, 8, 3])
    xid_rows += xids(lemon, [79, 48, 74, 79, 63, 48, 119, 79, 64])
    tickets += [ticket(lemon, 20), ticket(lemon, 6)]
    events += outage(lemon, 25, 24) + outage(lemon, 10, 24)
    # The healthy nodes' noise.
    for i, node in enumerate(fleet.healthy):
        if i % 7 == 1:
            rems += incidents(node, [rng.uniform(1, 29)])
            xid_rows += xids(node, [79])
        if i % 5 == 2:
            xid_rows += xids(node, [13, 31, 43], tag="app")  # application errors: not the node's fault
        if i % 9 == 4:
            tickets.append(ticket(node, 12))
            failed.append(
                Run(node=node, kind=RunKind.DCGM_DIAG, status=RunStatus.FAILED, created=NOW - timedelta(days=9))
            )
    for node in fleet.healthy[:telemetry_nodes]:
        h, r = flat_telemetry(node, rng=rng)
        hourly += h
        raw += r
    Run.objects.bulk_create(runs + failed)
    Remediation.objects.bulk_create(rems)
    XidRecord.objects.bulk_create(xid_rows)
    RepairTicket.objects.bulk_create(tickets)
    NodeEvent.objects.bulk_create(events)
    GpuSampleHourly.objects.bulk_create(hourly)
    GpuSample.objects.bulk_create(raw)
    return fleet


@pytest.fixture
def fleet(db) -> Fleet:
    return plant()
