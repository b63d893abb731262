"""Demo telemetry: every demo node that should be reporting sends an agent report every 30 s.

Reports go through the real ingest service (``telemetry.ingest.ingest_reports``), so the
real health rules turn them into findings, alerts and history. The faults come from the
fleet simulator (``simulator.live``): planted at the published rates (sped up), they stay
in a node's reports until what cures them has happened (a rung of the ladder far enough
up, a repair, an RMA), and a dead host sends nothing at all.

Like the churn task, it does nothing unless NODEWARDEN_DEMO_CHURN is true.
"""

from __future__ import annotations

import json
import random
import zlib
from datetime import datetime
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from nodes.choices import NodeState

from .seed import demo_fleet_exists, demo_nodes

S = NodeState
# States in which a node runs its agent: booted into the production image and powered. A node out
# of production for a fault (triage, remediation, repair) is still on and its agent still reports,
# as a real one does; only a fault that kills the host (``simulator.live.show``) silences it. A node
# in RMA has a part at the vendor and is off (bringup.demo_bmc_systems powers it off too).
REPORTING_STATES = (
    S.ONBOARD,
    S.FIRMWARE_UPDATE,
    S.INVENTORY_CHECK,
    S.BURN_IN,
    S.FABRIC_CHECK,
    S.RELIABILITY_ASSESSMENT,
    S.PRODUCTION,
    S.DRAIN_PENDING,
    S.DRAINING,
    S.TRIAGE,
    S.REMEDIATING,
    S.REPAIR,
)
# What a node of each demo profile's GPUs say about themselves (name, VBIOS): the Day 1
# inventory and firmware stages compare them with the profile.
PROFILE_GPUS = {
    "HGX H100 8-GPU": ("NVIDIA H100 80GB HBM3", "96.00.99.00.01"),
    "HGX H200 8-GPU": ("NVIDIA H200 141GB HBM3e", "96.00.A5.00.01"),
}
IDLE_STATES = (
    S.ONBOARD,
    S.FIRMWARE_UPDATE,
    S.INVENTORY_CHECK,
    S.BURN_IN,
    S.FABRIC_CHECK,
    S.RELIABILITY_ASSESSMENT,
    S.TRIAGE,
    S.REMEDIATING,
    S.REPAIR,
)


# Customer jobs on production nodes are whole-node jobs, as on a real GPU fleet: a node runs one
# job on all its GPUs or is idle. Time is cut into JOB_SLOT_S slots, staggered per node (so the
# fleet does not change at once); in each slot a node is idle with IDLE_SHARE, else busy.
JOB_SLOT_S = 600
IDLE_SHARE = 0.2


def _slot(hostname: str, now: datetime) -> tuple[int, int]:
    """The node's job slot at ``now`` and the seconds left in it (a stable per-node offset)."""
    at = int(now.timestamp()) + zlib.crc32(hostname.encode()) % JOB_SLOT_S
    return at // JOB_SLOT_S, JOB_SLOT_S - at % JOB_SLOT_S


def node_has_job(hostname: str, now: datetime) -> bool:
    """Whether the demo's customer job model puts a job on this production node now."""
    slot, _ = _slot(hostname, now)
    return random.Random(f"{hostname}/job/{slot}").random() >= IDLE_SHARE


def job_seconds_left(hostname: str, now: datetime) -> int:
    """Seconds until the node's current job slot ends: a demo Slurm job submitted now ends by then,
    so Slurm never shows a job on a node whose reports say idle (``schedulers.submit_demo_jobs``)."""
    return _slot(hostname, now)[1]


def demo_report(
    node_id: int, hostname: str, now: datetime, *, profile: str = "", state: str = "", faults: list[Any] = ()
) -> dict[str, Any] | None:
    """The report this demo node's agent would send now: no customer job outside production
    (so active checks may run), in production a whole-node job or none (``node_has_job``), the profile's GPUs, the bay's planted defects, and the
    simulator's live faults (``faults``); None when one of them has silenced the host."""
    from telemetry.testing import make_report

    from .bringup import defect_of

    report = make_report(hostname, collected_at=now, seed=int(now.timestamp() // 30))
    name, vbios = PROFILE_GPUS.get(profile, PROFILE_GPUS["HGX H100 8-GPU"])
    for gpu in report["gpus"]:
        gpu.update(name=name, vbios_version=vbios)
        if state in IDLE_STATES:
            gpu.update(compute_processes=0, utilization_pct=0.0)
    if state == S.PRODUCTION:
        busy = node_has_job(hostname, now)
        for gpu in report["gpus"]:  # one whole-node job on every GPU, or none on any
            gpu.update(compute_processes=int(busy), utilization_pct=gpu["utilization_pct"] if busy else 0.0)
            if busy and gpu["utilization_pct"] < 50:
                gpu["utilization_pct"] = round(50 + gpu["utilization_pct"], 1)
    if defect_of(hostname) == "missing_gpu":
        report["gpus"].pop(5)  # a GPU that did not come up: NVML sees seven
    from sandbox.simulator.live import show

    return show(report, list(faults), now)


@shared_task(name="sandbox.demo.report_demo_telemetry")
def report_demo_telemetry() -> str:
    """Ingest one report per reporting demo node (every 30 s from beat in the demo)."""
    if not settings.NODEWARDEN_DEMO_CHURN:
        return "disabled"
    if not demo_fleet_exists():
        return "no demo fleet"
    from sandbox.simulator.live import signals_by_node
    from telemetry.ingest import ingest_reports
    from telemetry.schema import decode_batch

    now = timezone.now().replace(microsecond=0)
    nodes = list(
        demo_nodes()
        .filter(state__in=REPORTING_STATES)
        .values_list("id", "hostname", "hardware_profile__name", "state")
        .order_by("id")
    )
    live = signals_by_node([n[0] for n in nodes], now)
    accepted = 0
    for node_id, hostname, profile, state in nodes:
        report = demo_report(node_id, hostname, now, profile=profile, state=state, faults=live.get(node_id, []))
        if report is None:
            continue  # a dead host: the heartbeat rule notices
        body = json.dumps({"reports": [report]}).encode()
        accepted += ingest_reports(node_id, decode_batch(body), source="agent").accepted
    return f"{accepted} reports"
