"""Demo telemetry: every demo node that should be reporting sends an agent report every 30 s.

Reports go through the real ingest service (``telemetry.ingest.ingest_reports``), so the
real health rules turn them into findings, alerts and history. A few nodes at a time
carry a fault for a 20-minute window, picked deterministically from the node and the
window, so a fault starts, is seen, and clears (its alert resolves) while you watch:
a hot GPU, an application XID 13, an uncorrectable ECC error with a pending row remap,
an InfiniBand port down, or a GPU fallen off the bus (XID 79, catastrophic).

Like the churn task, it does nothing unless NODEWARDEN_DEMO_CHURN is true.
"""
from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.utils import timezone

from nodes.choices import NodeState
from nodewarden.env import env_bool

from .seed import demo_fleet_exists, demo_nodes

S = NodeState
# States in which a node runs its agent (it is booted into the production image).
REPORTING_STATES = (
    S.ONBOARD, S.FIRMWARE_UPDATE, S.INVENTORY_CHECK, S.BURN_IN, S.FABRIC_CHECK, S.RELIABILITY_ASSESSMENT,
    S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING, S.TRIAGE,
)
WINDOW_SECONDS = 20 * 60
FAULT_SHARE = 0.012  # of reporting nodes with a fault in any window: a handful in a 500-node fleet
FAULTS = ("hot_gpu", "xid_13", "ecc_remap", "ib_port_down", "xid_79")


def fault_for(node_id: int, now: datetime) -> tuple[str, int, datetime] | None:
    """The fault this node shows in the current window, if any: (kind, GPU index, window start)."""
    window = int(now.timestamp() // WINDOW_SECONDS)
    rng = random.Random(f"demo-fault/{node_id}/{window}")
    if rng.random() >= FAULT_SHARE:
        return None
    start = datetime.fromtimestamp(window * WINDOW_SECONDS, tz=now.tzinfo)
    return rng.choice(FAULTS), rng.randrange(8), start


def _apply_fault(report: dict[str, Any], fault: tuple[str, int, datetime], now: datetime) -> None:
    from telemetry.testing import make_xid

    kind, gpu_index, start = fault
    gpu = report["gpus"][gpu_index]
    first_report = now - start < timedelta(seconds=30)  # an XID is printed once, not every 30 s
    if kind == "hot_gpu":
        gpu.update(temperature_c=91.0, clock_event_reasons=0x40 | 0x8, utilization_pct=100.0)
    elif kind == "ecc_remap":
        gpu.update(ecc_volatile_uncorrected=1, ecc_aggregate_uncorrected=1, remapped_rows_uncorrectable=1,
                   remapped_rows_pending=True)
    elif kind == "ib_port_down":
        report["ib_ports"][gpu_index].update(state="DOWN", phys_state="Polling", rate_gbps=None)
    elif kind == "xid_79":
        report["gpus"].pop(gpu_index)  # fallen off the bus: NVML no longer sees it
        if first_report:
            report["xid_events"] = [make_xid(79, gpu=gpu_index, observed_at=start,
                                             message="pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")]
    elif kind == "xid_13" and first_report:
        report["xid_events"] = [make_xid(13, gpu=gpu_index, observed_at=start,
                                         message="pid=48213, name=python3, Graphics Exception: ESR 0x514648=0x1")]


# What a node of each demo profile's GPUs say about themselves (name, VBIOS): the Day 1
# inventory and firmware stages compare them with the profile.
PROFILE_GPUS = {
    "HGX H100 8-GPU": ("NVIDIA H100 80GB HBM3", "96.00.99.00.01"),
    "HGX H200 8-GPU": ("NVIDIA H200 141GB HBM3e", "96.00.A5.00.01"),
}
IDLE_STATES = (S.ONBOARD, S.FIRMWARE_UPDATE, S.INVENTORY_CHECK, S.BURN_IN, S.FABRIC_CHECK, S.RELIABILITY_ASSESSMENT,
               S.TRIAGE)


def demo_report(node_id: int, hostname: str, now: datetime, *, profile: str = "", state: str = "") -> dict[str, Any]:
    """The report this demo node's agent would send now: no customer job outside production
    (so active checks may run), the profile's GPUs, and the bay's planted defects."""
    from telemetry.testing import make_report

    from .bringup import defect_of

    report = make_report(hostname, collected_at=now, seed=int(now.timestamp() // 30))
    name, vbios = PROFILE_GPUS.get(profile, PROFILE_GPUS["HGX H100 8-GPU"])
    for gpu in report["gpus"]:
        gpu.update(name=name, vbios_version=vbios)
        if state in IDLE_STATES:
            gpu.update(compute_processes=0, utilization_pct=0.0)
    if defect_of(hostname) == "missing_gpu":
        report["gpus"].pop(5)  # a GPU that did not come up: NVML sees seven
    fault = fault_for(node_id, now)
    if fault is not None and state not in IDLE_STATES:  # faults strike nodes at work; Day 1 has its own failures
        _apply_fault(report, fault, now)
    return report


@shared_task(name="nodes.demo.report_demo_telemetry")
def report_demo_telemetry() -> str:
    """Ingest one report per reporting demo node (every 30 s from beat in the demo)."""
    if not env_bool("NODEWARDEN_DEMO_CHURN", False):
        return "disabled"
    if not demo_fleet_exists():
        return "no demo fleet"
    from telemetry.ingest import ingest_reports
    from telemetry.schema import decode_batch

    now = timezone.now().replace(microsecond=0)
    nodes = (demo_nodes().filter(state__in=REPORTING_STATES)
             .values_list("id", "hostname", "hardware_profile__name", "state").order_by("id"))
    accepted = 0
    for node_id, hostname, profile, state in nodes:
        body = json.dumps({"reports": [demo_report(node_id, hostname, now, profile=profile, state=state)]}).encode()
        accepted += ingest_reports(node_id, decode_batch(body), source="agent").accepted
    return f"{accepted} reports"
