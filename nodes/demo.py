"""The demo fleet: a plausible GPU fleet with months of history, and a simulator that keeps it moving.

``build_demo_fleet`` is fixture generation. It creates each node directly in its
final state and writes its history with ``bulk_create``, bypassing
``nodes.services`` on purpose: replaying months of life through the services
would take minutes and queue thousands of follow-up tasks. The rows still obey
the lifecycle: transitions come from the table declared on ``Node``, each row's
source is the previous row's target, the last target is the node's state, and
the state-count snapshots are computed by replaying those same rows.

``churn_demo_fleet`` is the opposite: a Celery task that changes the demo fleet
only through the real service functions, a handful of nodes a minute. It does
nothing unless NODEWARDEN_DEMO_CHURN is true and never touches nodes outside
the demo sites.
"""
from __future__ import annotations

import math
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import shared_task
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.db import models, transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from fleet.choices import SchedulerKind
from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant, TenantMembership
from nodewarden.env import env_bool

from . import services
from .choices import DAY1_STAGES, TROUBLE_STATES, ActorKind, EventKind, NodeState
from .models import GPU, Node, NodeEvent, StateCountSnapshot
from .roles import FLEET_ADMINS, OPERATORS, ensure_roles

S = NodeState
DEMO_PASSWORD = "nodewarden-demo"  # printed to the user on purpose
MIN_NODES, MAX_NODES, MIN_DAYS = 8, 5000, 21
BATCH = 1000

# --- The fleet's shape ------------------------------------------------------


@dataclass(frozen=True)
class SiteSpec:
    slug: str
    name: str
    location: str
    octet: int  # second octet of the site's out-of-band (BMC) network


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    site: str
    scheduler: str
    endpoint: str
    profile: str
    persona: str
    share: float  # fraction of the fleet
    bring_up: float  # when its first rack arrived, as a fraction of the arrival period
    tenants: tuple[tuple[str | None, float], ...]  # (tenant slug or None = unassigned, share of racks)
    expanding: bool = False  # the new racks still in Day 0 / Day 1 are here


SITES = (
    SiteSpec("iad1", "Ashburn IAD1", "Ashburn, Virginia, US", 10),
    SiteSpec("fra1", "Frankfurt FRA1", "Frankfurt am Main, DE", 20),
)
DEMO_SITE_SLUGS = tuple(s.slug for s in SITES)
TENANTS = (("Helios Labs", "helios"), ("Northwind AI", "northwind"), ("Quanta Bio", "quanta"))
CLUSTERS = (
    ClusterSpec("iad1-train-a", "iad1", SchedulerKind.SLURM, "slurmctld.iad1.internal:6817", "HGX H100 8-GPU",
                "training", 0.35, 0.0, (("helios", 0.7), (None, 0.3))),
    ClusterSpec("iad1-infer", "iad1", SchedulerKind.KUBERNETES, "https://k8s-infer.iad1.internal:6443",
                "HGX H100 8-GPU", "inference", 0.20, 0.15, (("northwind", 0.6), ("quanta", 0.2), (None, 0.2))),
    ClusterSpec("fra1-train-b", "fra1", SchedulerKind.SLURM, "slurmctld.fra1.internal:6817", "HGX H200 8-GPU",
                "training", 0.30, 0.3, (("quanta", 0.5), ("helios", 0.3), (None, 0.2)), expanding=True),
    ClusterSpec("fra1-metal", "fra1", SchedulerKind.NONE, "", "HGX H200 8-GPU", "inference", 0.15, 0.45,
                (("northwind", 0.6), (None, 0.4))),
)
PROFILES = {
    "HGX H100 8-GPU": {
        "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "hca_count": 8, "hca_rate_gbps": 400,
        "memory_gb": 2048, "serial_prefix": "1652",
        "firmware_baseline": {"bios": "2.1.7", "bmc": "13.3.4", "gpu_vbios": "96.00.99.00.01",
                              "nvswitch": "96.10.6D.00.01", "cx7": "28.41.1000", "driver": "550.127.05"},
    },
    "HGX H200 8-GPU": {
        "gpu_model": "NVIDIA H200 141GB HBM3e", "gpu_count": 8, "hca_count": 8, "hca_rate_gbps": 400,
        "memory_gb": 2048, "serial_prefix": "1654",
        "firmware_baseline": {"bios": "2.4.1", "bmc": "13.5.2", "gpu_vbios": "96.00.A5.00.01",
                              "nvswitch": "96.10.73.00.01", "cx7": "28.42.1000", "driver": "560.35.03"},
    },
}
PERSONAS = {
    "training": "Large multi-node jobs: full burn-in, NCCL all-reduce and fabric checks.",
    "inference": "Serving: single-node burn-in, shorter soak.",
}
# Air-cooled HGX chassis draw about 10 kW, so a 40 kW rack holds four (8U each), switches on top.
NODES_PER_RACK, RACK_UNITS = 4, (3, 11, 19, 27)
GPU_PCI_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # HGX H100/H200 board layout

# Share of the fleet ending in each state other than production (at least one each from 60 nodes):
# a few per cent out of production, as a 5-8 per 1000 node-day failure rate with days of repair gives,
# plus a rack delivery being brought up.
FINAL_SHARE = {
    S.ENROLLED: 0.008, S.INITIALIZING: 0.006, S.ONBOARD: 0.006, S.FIRMWARE_UPDATE: 0.01,
    S.INVENTORY_CHECK: 0.006, S.BURN_IN: 0.016, S.FABRIC_CHECK: 0.008, S.RELIABILITY_ASSESSMENT: 0.01,
    S.DRAIN_PENDING: 0.012, S.DRAINING: 0.008, S.TRIAGE: 0.012, S.REMEDIATING: 0.008, S.REPAIR: 0.012,
    S.RMA: 0.01, S.DECOMMISSIONED: 0.008,
}
DAY0 = (S.ENROLLED, S.INITIALIZING, S.ONBOARD)
DRAIN_GOALS = (S.DRAIN_PENDING, S.DRAINING)
# How long a node has sat in its final state, in hours (below the stage's usual length).
SIT_HOURS = {
    S.ENROLLED: (0.2, 6), S.INITIALIZING: (0.05, 0.8), S.ONBOARD: (0.02, 1.5), S.FIRMWARE_UPDATE: (0.1, 1.5),
    S.INVENTORY_CHECK: (0.02, 0.3), S.BURN_IN: (1, 30), S.FABRIC_CHECK: (0.1, 2),
    S.RELIABILITY_ASSESSMENT: (1, 30), S.DRAIN_PENDING: (0.3, 20), S.DRAINING: (0.05, 0.3),
    S.TRIAGE: (0.2, 20), S.REMEDIATING: (0.05, 0.5), S.REPAIR: (3, 96), S.RMA: (24, 400),
    S.DECOMMISSIONED: (24, 1200),
}


@dataclass(frozen=True)
class DemoUser:
    username: str
    role: str
    staff: bool = False
    superuser: bool = False
    group: str = ""
    tenant: str = ""


DEMO_USERS = (
    DemoUser("admin", "superuser, group Fleet admins", staff=True, superuser=True, group=FLEET_ADMINS),
    DemoUser("operator", "staff, group Operators", staff=True, group=OPERATORS),
    DemoUser("viewer", "staff, no groups: read-only", staff=True),
    *(DemoUser(f"{slug}-user", f"customer of {name}: sees its nodes only", tenant=slug) for name, slug in TENANTS),
)

# --- What goes wrong --------------------------------------------------------


@dataclass(frozen=True)
class Cause:
    """A failure cause, its rate and the road a node takes back from it."""

    key: str
    rate: float  # per 1000 node-days (shared/reference/failure-rates.md §4, before RATE_SCALE)
    finding: str
    detector: str
    xid: int | None = None
    cordon: bool = False  # catastrophic: out of production at once rather than after the job
    rungs: tuple[str, ...] = ()  # automated remediation ladder
    fix: float = 0.0  # chance each rung clears the fault
    repair: str = ""  # what the technician does
    repair_fix: float = 0.9
    part: str = "system board"  # what goes back to the vendor
    to_rma: bool = False  # straight from triage to RMA
    cancel: float = 0.0  # chance the fault clears before the job ends (drain cancelled)
    planned: bool = False  # an operator's maintenance, not a fault


GPU_PART = "GPU {gpu} module"
CAUSES = (
    Cause("xid79", 0.90, "XID 79 on GPU {gpu} (PCI:0000:{bus}:00): GPU has fallen off the bus", "dcgm-health",
          xid=79, cordon=True, rungs=("power_cycle",), fix=0.5,
          repair="reseat GPU {gpu} and its baseboard cabling", repair_fix=0.6, part=GPU_PART),
    Cause("xid48", 0.35, "XID 48 on GPU {gpu} (PCI:0000:{bus}:00): uncorrectable double-bit ECC error (DBE)",
          "dcgm-health", xid=48, cordon=True, rungs=("gpu_reset",), fix=0.75,
          repair="run field diagnostics on GPU {gpu}", repair_fix=0.2, part=GPU_PART),
    Cause("xid94", 0.45, "XID 94 on GPU {gpu} (PCI:0000:{bus}:00): contained ECC error, row remap pending",
          "dcgm-health", xid=94, rungs=("gpu_reset",), fix=0.95, repair="run field diagnostics on GPU {gpu}",
          repair_fix=0.5, part=GPU_PART),
    Cause("xid95", 0.25, "XID 95 on GPU {gpu} (PCI:0000:{bus}:00): uncontained ECC error", "dcgm-health",
          xid=95, cordon=True, rungs=("gpu_reset", "node_reboot"), fix=0.7,
          repair="run field diagnostics on GPU {gpu}", repair_fix=0.3, part=GPU_PART),
    Cause("row_remap_failure", 0.12, "Row-remap failure on GPU {gpu}: HBM bank has no spare rows left",
          "dcgm-health", xid=64, to_rma=True, part=GPU_PART),
    Cause("xid74", 0.30, "XID 74 on GPU {gpu} (PCI:0000:{bus}:00): NVLink error on link {link}", "dcgm-health",
          xid=74, rungs=("gpu_reset", "node_reboot"), fix=0.6, repair="reseat the NVSwitch tray",
          repair_fix=0.5, part="HGX baseboard"),
    Cause("xid119", 0.15, "XID 119 on GPU {gpu} (PCI:0000:{bus}:00): GSP RPC timeout", "dcgm-health", xid=119,
          cordon=True, rungs=("gpu_reset", "power_cycle"), fix=0.8, repair="reseat GPU {gpu}",
          repair_fix=0.5, part=GPU_PART),
    Cause("ib_link_flap", 0.35, "InfiniBand link flapping on {hca} port 1: {n} down/up events in 10 min",
          "ib-monitor", rungs=("port_reset",), fix=0.3, repair="replace the OSFP transceiver on {hca}",
          part="ConnectX-7 adapter {hca}", cancel=0.25),
    Cause("ib_symbol_errors", 0.15, "InfiniBand symbol errors on {hca} port 1: {n} in 1 h, above threshold",
          "ib-monitor", repair="replace the cable on {hca}", part="ConnectX-7 adapter {hca}", cancel=0.1),
    Cause("psu_failure", 0.05, "PSU {psu} failed (BMC SEL: Power Supply Failure detected)", "bmc-sel",
          repair="hot-swap PSU {psu}", repair_fix=0.95, part="PSU {psu}"),
    Cause("gpu_thermal", 0.08, "GPU {gpu} HW slowdown: thermal margin below the slowdown offset", "dcgm-health",
          repair="replace the fan module and re-apply thermal paste on GPU {gpu}", repair_fix=0.8,
          part=GPU_PART),
    Cause("sdc_suspected", 0.05, "DCGM diag level 3 on GPU {gpu}: result mismatch, silent data corruption "
          "suspected", "dcgm-health", cordon=True, to_rma=True, part=GPU_PART),
    Cause("nic_down", 0.06, "Front-end NIC link down on bond0", "health-monitor", rungs=("node_reboot",),
          fix=0.4, repair="replace the front-end NIC", repair_fix=0.95, part="front-end NIC"),
    Cause("dimm_ue", 0.06, "Uncorrectable memory error on DIMM {dimm} (EDAC)", "bmc-sel", cordon=True,
          repair="replace DIMM {dimm}", repair_fix=0.95, part="DIMM {dimm}"),
    Cause("nvme_media", 0.04, "NVMe drive nvme{nvme}: media errors, SMART critical warning set", "health-monitor",
          repair="replace NVMe drive nvme{nvme}", repair_fix=0.97, part="NVMe drive nvme{nvme}"),
    Cause("nccl_timeout", 0.25, "NCCL watchdog timeout: collective hung for 1800 s, job {job} killed",
          "health-monitor", rungs=("node_reboot",), fix=0.85, repair="swap the node out for lemon checks",
          repair_fix=0.7),
    Cause("planned_firmware", 0.30, "Planned maintenance: BIOS and BMC update to the profile baseline",
          "operator", rungs=("firmware_flash",), fix=0.97, repair="recover the BMC with a cold reset",
          planned=True),
)
# Scales the Llama 3 mix (3.9 per 1000 node-days) to ~5.9, between Meta RSC-1 (6.5) and Llama 3 (3.79).
RATE_SCALE = 1.5
RUNGS = {  # label, duration in hours
    "gpu_reset": ("GPU reset", (0.1, 0.3)), "node_reboot": ("node reboot", (0.2, 0.5)),
    "power_cycle": ("BMC power cycle", (0.3, 0.8)), "port_reset": ("HCA port reset", (0.05, 0.2)),
    "firmware_flash": ("firmware flash to baseline", (0.5, 1.5)),
}
# Day 1 stages: (state, verb, hours first time, hours on re-validation, failure chance, failure reason).
STAGES = (
    (S.FIRMWARE_UPDATE, "pass_firmware", (0.7, 2.5), (0.5, 1.5), 0.01,
     "BMC firmware update failed verification; needs a BMC cold reset"),
    (S.INVENTORY_CHECK, "pass_inventory_check", (0.1, 0.5), (0.1, 0.3), 0.02,
     "only 7 of 8 GPUs visible on the PCIe bus"),
    (S.BURN_IN, "pass_burn_in", (24, 48), (6, 18), 0.04,
     "DCGM diag level 3 failed: HBM ECC errors under stress on GPU {gpu}"),
    (S.FABRIC_CHECK, "pass_fabric_check", (0.5, 3), (0.3, 1.5), 0.025,
     "{hca} cabled to the wrong leaf port (plan and LLDP disagree)"),
    (S.RELIABILITY_ASSESSMENT, "release_to_production", (12, 48), (2, 12), 0.01,
     "3 XID 94 events during the soak"),
)
SYS = "system:"
INVENTORY, PROVISIONER, VALIDATION = "system:inventory", "system:provisioner", "system:validation"
HEALTH, REMEDIATOR, FOLLOWUP = "system:health-monitor", "system:remediator", "system:followup"
SCHEDULER_ACTOR = {SchedulerKind.SLURM: "system:slurm-sync", SchedulerKind.KUBERNETES: "system:k8s-sync"}
SECOND = 1 / 3600


def _transition_table() -> dict[str, dict[str, str]]:
    """verb -> {source: target}, read from the state machine declared on Node."""
    table: dict[str, dict[str, str]] = {}
    for name in services.VERBS:
        meta = getattr(Node, name)._django_fsm
        table[name] = {str(source): str(t.target) for source, t in meta.transitions.items()}
    return table


TRANSITIONS = _transition_table()

# --- One node's life --------------------------------------------------------


@dataclass
class _Row:
    at: datetime
    kind: str
    reason: str
    actor: str
    transition: str = ""
    source: str = ""
    target: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Slot:
    """Where one node sits and how its story ends."""

    cluster: ClusterSpec
    rack: str
    unit: int
    tenant: str | None
    hostname: str
    serial: str
    bmc: str
    gpus: list[tuple[str, str]]  # (uuid, serial)
    goal: str = S.PRODUCTION
    fresh: bool = False  # arrived recently, still in Day 0 / Day 1
    arrival: datetime | None = None
    hazard: float = 1.0  # lemon nodes fail more often

    @property
    def uuids(self) -> list[str]:
        return [u for u, _ in self.gpus]


class _GoalReached(Exception):
    """The node's final walk reached its final state."""


class _Life:
    """One node's life being written: state, clock and history rows."""

    def __init__(self, slot: _Slot, rng: random.Random, start: datetime, state: str = S.ENROLLED) -> None:
        self.slot, self.rng, self.t, self.state = slot, rng, start, state
        self.rows: list[_Row] = []
        self.is_revalidation = False
        self.goal: str | None = None

    def go(self, name: str, reason: str, actor: str, hours: tuple[float, float], **details: Any) -> None:
        self.t += timedelta(hours=max(SECOND, self.rng.uniform(*hours)))
        target = TRANSITIONS[name].get(self.state)
        if target is None:
            raise AssertionError(f"{name} is not allowed from {self.state}")
        self.rows.append(_Row(self.t, EventKind.TRANSITION, reason, actor, name, self.state, target, details))
        self.state = target
        if name == "revalidate":
            self.is_revalidation = True
        elif name in ("start_validation", "release_to_production"):
            self.is_revalidation = False
        if target == self.goal:
            raise _GoalReached

    def note(self, kind: str, reason: str, actor: str, **details: Any) -> None:
        self.rows.append(_Row(self.t, kind, reason, actor, source=self.state, details=details))

    def mark(self) -> tuple[int, datetime, str, bool]:
        return len(self.rows), self.t, self.state, self.is_revalidation

    def restore(self, mark: tuple[int, datetime, str, bool]) -> None:
        del self.rows[mark[0]:]
        self.t, self.state, self.is_revalidation = mark[1:]

    def append_shifted(self, other: _Life, origin: datetime, start: datetime, scale: float) -> None:
        """Append another walk's rows, moved from ``origin`` to ``start`` and stretched by ``scale``."""
        for row in other.rows:
            row.at = start + (row.at - origin) * scale
            self.rows.append(row)
        self.t = self.rows[-1].at if other.rows else start
        self.state, self.is_revalidation = other.state, other.is_revalidation


def _parts(rng: random.Random, gpu_uuids: list[str]) -> dict[str, Any]:
    """The concrete parts one incident is about (the same GPU from finding to RMA)."""
    gpu = rng.randrange(len(gpu_uuids))
    return {"gpu": gpu, "gpu_uuid": gpu_uuids[gpu], "bus": GPU_PCI_BUSES[gpu % 8], "link": rng.randrange(18),
            "hca": f"mlx5_{rng.randrange(8)}", "n": rng.randrange(6, 40), "psu": rng.randrange(1, 7),
            "dimm": f"{'ABCDEFGH'[rng.randrange(8)]}{rng.randrange(1, 3)}", "nvme": rng.randrange(4),
            "job": rng.randrange(4_000_000, 9_000_000)}


def _fill(text: str, parts: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Fill a cause template; the details name the parts it mentions, for the node's history page."""
    details: dict[str, Any] = {}
    if "{gpu}" in text:
        details |= {"gpu_index": parts["gpu"], "gpu_uuid": parts["gpu_uuid"]}
    details |= {k: parts[k] for k in ("hca", "psu", "dimm") if "{" + k + "}" in text}
    return text.format(**parts), details


def _finding_details(cause: Cause, details: dict[str, Any], tag: dict[str, Any]) -> dict[str, Any]:
    return tag | details | {"detector": cause.detector} | ({"xid": cause.xid} if cause.xid else {})


def _human(rng: random.Random) -> str:
    return "admin" if rng.random() < 0.2 else "operator"


def _enroll(life: _Life) -> None:
    slot = life.slot
    po = f"PO-{life.rng.randrange(10_000, 99_999)}"
    life.note(EventKind.ACTION, f"Enrolled from delivery manifest {po}: {slot.cluster.profile}, "
              f"serial {slot.serial}, rack {slot.rack} U{slot.unit}", INVENTORY, manifest=po)


def _day0(life: _Life) -> None:
    life.go("start_initialization", "Provisioning slot free: PXE boot with the base image", PROVISIONER, (0.1, 6))
    life.go("mark_onboard", "Agent registered after first boot; BMC reachable over Redfish", PROVISIONER, (0.3, 1.5))
    life.go("start_validation", "Onboarded: starting Day 1 validation", PROVISIONER, (0.02, 2))


def _stage_details(state: str, life: _Life) -> dict[str, Any]:
    rng, profile = life.rng, PROFILES[life.slot.cluster.profile]
    if state == S.FIRMWARE_UPDATE:
        return {"firmware": profile["firmware_baseline"]}
    if state == S.INVENTORY_CHECK:
        return {"gpus": 8, "hcas": profile["hca_count"], "memory_gb": profile["memory_gb"]}
    if state == S.BURN_IN:
        return {"dcgm_diag_level": 3, "nccl_all_reduce_busbw_gbps": round(rng.uniform(452, 486), 1)}
    if state == S.FABRIC_CHECK:
        return {"hca_ports_up": profile["hca_count"], "rate_gbps": profile["hca_rate_gbps"]}
    return {"xid_events": 0, "soak_hours": 24 if not life.is_revalidation else 6}


def _day1(life: _Life, *, allow_failure: bool = True) -> None:
    """Walk the Day 1 stages from firmware update to production; a failure detours through repair."""
    for state, verb, first, again, fail_p, fail_reason in STAGES:
        hours = again if life.is_revalidation else first
        if allow_failure and life.rng.random() < (fail_p / 2 if life.is_revalidation else fail_p):
            reason, details = _fill(fail_reason, _parts(life.rng, life.slot.uuids))
            life.go("fail_validation", f"{S(state).label} failed: {reason}", VALIDATION, hours, **details)
            life.go("send_to_repair", f"Technician ticket: {reason}", _human(life.rng), (0.5, 12))
            life.go("revalidate", "Repaired on site; every Day 1 check again", _human(life.rng), (3, 48))
            return _day1(life, allow_failure=False)
        life.go(verb, f"{S(state).label} passed", VALIDATION, hours, **_stage_details(state, life))
    return None


def _drain(life: _Life, tag: dict[str, Any]) -> None:
    """From drain pending to triage, the way the node's workload scheduler does it."""
    scheduler = life.slot.cluster.scheduler
    if scheduler == SchedulerKind.NONE:  # the follow-up task does it at once (nodes/followups.py)
        life.go("start_draining", "No workload scheduler: no job to wait for.", FOLLOWUP, (3 * SECOND, 0.01), **tag)
        life.go("complete_drain", "No workload scheduler: nothing to drain.", FOLLOWUP, (2 * SECOND, 0.01), **tag)
        return
    actor, job = SCHEDULER_ACTOR[scheduler], life.rng.randrange(4_000_000, 9_000_000)
    if scheduler == SchedulerKind.SLURM:
        ended, empty = f"Slurm job {job} ended; node set to DRAIN", "Slurm reports the node DRAINED"
    else:
        ended, empty = "Node cordoned in Kubernetes; evicting pods", "No customer pods left on the node"
    life.go("start_draining", ended, actor, (0.3, 30), **tag)
    life.go("complete_drain", empty, actor, (0.02, 0.3), **tag)


def _pick_cause(rng: random.Random, goal: str | None, *, planned: bool = True) -> Cause:
    """A cause weighted by its rate, among those whose road passes through ``goal``."""
    allow_planned = planned and goal is None  # maintenance is never how a node ends up in trouble
    pool = [c for c in CAUSES if allow_planned or not c.planned]
    if goal in DRAIN_GOALS:
        pool = [c for c in pool if not c.cordon]
    if goal == S.REMEDIATING:
        pool = [c for c in pool if c.rungs and not c.to_rma]
    if goal == S.REPAIR:
        pool = [c for c in pool if not c.to_rma]
    return rng.choices(pool, weights=[c.rate for c in pool])[0]


def _incident(life: _Life, cause: Cause) -> None:
    """A fault found in production, walked until the node is back in production (or the goal is reached)."""
    rng, goal, slot = life.rng, life.goal, life.slot
    parts = _parts(rng, slot.uuids)
    finding, details = _fill(cause.finding, parts)
    tag = {"cause": cause.key, "incident": f"INC-{rng.randrange(16**6):06X}"}
    if cause.planned:
        life.note(EventKind.NOTE, finding, _human(rng), **tag)
    else:
        life.note(EventKind.FINDING, finding, SYS + cause.detector, **_finding_details(cause, details, tag))
    if cause.cordon:
        life.go("cordon", f"{finding}: cordoned at once", HEALTH, (SECOND, 0.005), **tag)
    else:
        actor = _human(rng) if cause.planned else HEALTH
        life.go("request_drain", f"{finding}: drain when the running job ends", actor, (SECOND, 0.02), **tag)
        if goal is None and rng.random() < cause.cancel:
            life.go("cancel_drain", "Fault cleared before the job ended: no errors for 2 h", HEALTH, (0.5, 4), **tag)
            return
        _drain(life, tag)
    _fix(life, cause, parts, tag)


def _fix(life: _Life, cause: Cause, parts: dict[str, Any], tag: dict[str, Any]) -> None:
    """From triage: the remediation ladder, then a technician, then the vendor."""
    rng, goal = life.rng, life.goal
    must_fail = goal in (S.REPAIR, S.RMA, S.DECOMMISSIONED)
    if not cause.to_rma:
        for rung in cause.rungs:
            label, hours = RUNGS[rung]
            life.go("start_remediation", f"Automated remediation: {label}", REMEDIATOR, (0.02, 2), action=rung, **tag)
            if not must_fail and rng.random() < cause.fix:
                life.go("revalidate", f"{label.capitalize()} cleared the fault; re-validating", REMEDIATOR, hours,
                        **tag)
                return _day1(life)
            life.go("fail_remediation", f"Fault persists after {label}", REMEDIATOR, hours, action=rung, **tag)
        repair, _ = _fill(cause.repair, parts)
        life.go("send_to_repair", f"Technician ticket: {repair}", _human(rng), (0.3, 18), **tag)
        if not must_fail and rng.random() < cause.repair_fix:
            life.go("revalidate", f"Repaired on site ({repair}); every Day 1 check again", _human(rng), (2, 96),
                    **tag)
            return _day1(life)
    part, _ = _fill(cause.part, parts)
    rma = f"RMA-{rng.randrange(100_000, 999_999)}"
    life.go("send_to_rma", f"Vendor case {rma}: replace {part}", _human(rng), (1, 48), rma=rma, **tag)
    if goal == S.DECOMMISSIONED:
        life.go("decommission", f"Vendor case {rma}: system beyond economical repair; retired", "admin",
                (72, 500), rma=rma, **tag)
    life.go("revalidate", f"Back from vendor case {rma}: {part} replaced", _human(rng), (120, 500), rma=rma, **tag)
    return _day1(life)


def _incidents(life: _Life, cutoff: datetime) -> None:
    """Faults as a Poisson process until ``cutoff``; one that would not end before it is dropped."""
    per_hour = sum(c.rate for c in CAUSES) * RATE_SCALE / 1000 / 24 * life.slot.hazard
    while True:
        mark = life.mark()
        life.t += timedelta(hours=life.rng.expovariate(per_hour))
        if life.t >= cutoff:
            life.restore(mark)
            return
        _incident(life, _pick_cause(life.rng, None))
        if life.t >= cutoff:
            life.restore(mark)
            return


EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # origin of scratch walks, shifted into place later


def _walk_to_goal(slot: _Slot, rng: random.Random, start_state: str) -> _Life:
    """A scratch walk from ``start_state`` to the slot's goal, with times relative to EPOCH."""
    scratch = _Life(slot, rng, EPOCH, start_state)
    scratch.goal = slot.goal
    try:
        if start_state == S.ENROLLED:
            _day0(scratch)
            _day1(scratch)
        else:
            _incident(scratch, _pick_cause(rng, slot.goal))
    except _GoalReached:
        return scratch
    raise AssertionError(f"{slot.hostname}: the walk never reached {slot.goal}")


def _live(slot: _Slot, rng: random.Random, now: datetime) -> _Life:
    """Write one node's whole life, ending in its slot's goal state."""
    sit = timedelta(hours=rng.uniform(*SIT_HOURS.get(slot.goal, (0.0, 0.0))))
    if slot.fresh:
        scratch = _walk_to_goal(slot, rng, S.ENROLLED) if slot.goal != S.ENROLLED else _Life(slot, rng, EPOCH)
        arrival = now - sit - (scratch.t - EPOCH)
        life = _Life(slot, rng, arrival)
        _enroll(life)
        life.append_shifted(scratch, EPOCH, arrival, 1.0)
        return life
    assert slot.arrival is not None
    life = _Life(slot, rng, slot.arrival)
    _enroll(life)
    _day0(life)
    _day1(life)
    if slot.goal == S.PRODUCTION:
        _incidents(life, now - timedelta(minutes=10))
        return life
    final = _walk_to_goal(slot, rng, S.PRODUCTION)
    length = (final.t - EPOCH) + sit
    earliest = life.t + timedelta(hours=1)
    scale = 1.0
    if now - length < earliest:  # short window: squeeze the final walk in after Day 1
        scale = max(0.0, (now - earliest) / length)
    start = now - length * scale
    _incidents(life, start)
    life.append_shifted(final, EPOCH, start, scale)
    return life


# --- Planning the fleet -----------------------------------------------------


def _split(total: int, shares: list[float]) -> list[int]:
    """Largest-remainder split of ``total`` by ``shares``."""
    raw = [total * s / sum(shares) for s in shares]
    sizes = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: sizes[i] - raw[i])[: total - sum(sizes)]:
        sizes[i] += 1
    return sizes


def _goals(rng: random.Random, nodes: int) -> tuple[list[str], list[str]]:
    """Final states other than production: (fresh arrivals, established nodes)."""
    fresh: list[str] = []
    established: list[str] = []
    for state, share in FINAL_SHARE.items():
        count = max(1, round(share * nodes)) if nodes >= 60 else round(share * nodes)
        for _ in range(count):
            # Day 1 states hold new nodes and old ones re-validating after a repair.
            is_fresh = state in DAY0 or (state in DAY1_STAGES and rng.random() < 0.6)
            (fresh if is_fresh else established).append(state)
    return fresh, established


def _gpus(rng: random.Random, profile: str) -> list[tuple[str, str]]:
    prefix = PROFILES[profile]["serial_prefix"]
    return [(f"GPU-{uuid.UUID(int=rng.getrandbits(128))}", f"{prefix}{rng.randrange(10**9):09d}")
            for _ in range(8)]


def _rack_name(i: int) -> str:
    return f"{chr(ord('A') + i // 16)}{i % 16 + 1:02d}"  # rows of 16 racks


def _plan(rng: random.Random, nodes: int, days: int, now: datetime) -> list[_Slot]:
    """Place every node in a rack and give it a final state and, if established, an arrival time."""
    fresh_goals, established_goals = _goals(rng, nodes)
    sizes = _split(nodes, [c.share for c in CLUSTERS])
    site_octet = {s.slug: s.octet for s in SITES}
    racks_used: Counter[str] = Counter()
    # Established racks arrive over the first half of the window (at most days-16 so Day 1 ends in time).
    period = timedelta(days=max(0.1 * days, min(0.5 * days, days - 16)))
    start = now - timedelta(days=days)
    slots: list[_Slot] = []
    for spec, size in zip(CLUSTERS, sizes, strict=True):
        n_fresh = min(len(fresh_goals), size // 2) if spec.expanding else 0
        n_racks = math.ceil(size / NODES_PER_RACK)
        fresh_racks = math.ceil(n_fresh / NODES_PER_RACK)
        settled = max(1, n_racks - fresh_racks)
        tenants = [t for t, share in spec.tenants for _ in range(round(share * 100))]
        width = max(3, len(str(size)))
        for k in range(size):
            r = k // NODES_PER_RACK
            rack_no = racks_used[spec.site] + r
            fresh = k >= size - n_fresh
            tenant = None if r >= settled else tenants[min(len(tenants) - 1, r * len(tenants) // settled)]
            rack_arrival = start + period * (spec.bring_up + 0.55 * r / max(1, settled - 1))
            slots.append(_Slot(
                cluster=spec, rack=_rack_name(rack_no), unit=RACK_UNITS[k % NODES_PER_RACK], tenant=tenant,
                hostname=f"{spec.name}-{k + 1:0{width}d}", serial=f"SN{spec.site.upper()}{len(slots) + 1:06d}",
                bmc=f"10.{site_octet[spec.site] + rack_no // 250}.{rack_no % 250}.{11 + k % NODES_PER_RACK}",
                gpus=_gpus(rng, spec.profile), fresh=fresh,
                arrival=None if fresh else rack_arrival + timedelta(hours=rng.uniform(0, 8)),
                hazard=6.0 if rng.random() < 0.03 else rng.uniform(0.5, 1.5),
            ))
        racks_used[spec.site] += n_racks
    fresh_slots = [s for s in slots if s.fresh]
    established_goals += fresh_goals[len(fresh_slots):]  # no room in the new racks: re-validations instead
    for slot, goal in zip(fresh_slots, rng.sample(fresh_goals[: len(fresh_slots)], len(fresh_slots)), strict=True):
        slot.goal = goal
    pool = [s for s in slots if not s.fresh]
    rng.shuffle(pool)
    for goal in established_goals:
        # A node waits in drain pending only where a workload scheduler runs its job.
        slot = next(s for s in pool if goal not in DRAIN_GOALS or s.cluster.scheduler != SchedulerKind.NONE)
        pool.remove(slot)
        slot.goal = goal
    return slots


# --- Writing it -------------------------------------------------------------


def demo_fleet_exists() -> bool:
    return Site.objects.filter(slug__in=DEMO_SITE_SLUGS).exists()


def demo_nodes() -> models.QuerySet[Node]:
    return Node.objects.filter(site__slug__in=DEMO_SITE_SLUGS)


def reset_demo_fleet() -> None:
    """Delete the demo fleet and its history (demo data only: a fixture reset, not a history rewrite)."""
    with transaction.atomic():
        node_ids = list(demo_nodes().values_list("id", flat=True))
        # NodeEvent's own manager refuses deletes; the plain QuerySet is the deliberate way round it.
        models.QuerySet(model=NodeEvent).filter(node_id__in=node_ids).delete()
        Node.objects.filter(id__in=node_ids).delete()
        Rack.objects.filter(site__slug__in=DEMO_SITE_SLUGS).delete()
        Cluster.objects.filter(site__slug__in=DEMO_SITE_SLUGS).delete()  # cascades its snapshots
        Site.objects.filter(slug__in=DEMO_SITE_SLUGS).delete()
        Tenant.objects.filter(slug__in=[slug for _, slug in TENANTS]).delete()


def ensure_demo_users() -> dict[str, Any]:
    """Create or refresh the demo logins; all share DEMO_PASSWORD (hashed once: hashing is slow on purpose)."""
    User = get_user_model()
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
    personas = {name: Persona.objects.update_or_create(name=name, defaults={"description": text})[0]
                for name, text in PERSONAS.items()}
    clusters = {c.name: Cluster.objects.create(site=sites[c.site], name=c.name, scheduler_kind=c.scheduler,
                                               scheduler_endpoint=c.endpoint) for c in CLUSTERS}
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
    return [StateCountSnapshot(taken_at=t, state=s, cluster_id=c, tenant_id=tn, count=n)
            for (t, s, c, tn), n in counts.items()]


def build_demo_fleet(*, nodes: int = 500, days: int = 120, seed: int = 42,
                     now: datetime | None = None) -> dict[str, int]:
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
        gpus = [GPU(node=node, index=i, uuid=u, serial=serial, model=PROFILES[slot.cluster.profile]["gpu_model"])
                for node, slot in zip(node_rows, slots, strict=True) for i, (u, serial) in enumerate(slot.gpus)]
        GPU.objects.bulk_create(gpus, batch_size=BATCH)
        events = [_event(node, row, users) for node, life in zip(node_rows, lives, strict=True) for row in life.rows]
        NodeEvent.objects.bulk_create(events, batch_size=BATCH)
        snapshots = _snapshots(node_rows, lives, now, days)
        StateCountSnapshot.objects.bulk_create(snapshots, batch_size=BATCH)
    return {"sites": len(SITES), "clusters": len(CLUSTERS), "racks": len(racks), "tenants": len(TENANTS),
            "nodes": len(node_rows), "gpus": len(gpus), "events": len(events), "snapshots": len(snapshots)}


def _node(slot: _Slot, life: _Life, inv: dict[str, dict[str, Any]], racks: dict[tuple[str, str], Rack]) -> Node:
    spec = slot.cluster
    # The FSM field is protected: the final state is given at construction and never assigned afterwards.
    return Node(
        hostname=slot.hostname, serial=slot.serial, bmc_address=slot.bmc, site=inv["site"][spec.site],
        cluster=inv["cluster"][spec.name], rack=racks[(spec.site, slot.rack)], rack_unit=slot.unit,
        tenant=inv["tenant"][slot.tenant] if slot.tenant else None, hardware_profile=inv["profile"][spec.profile],
        persona=inv["persona"][spec.persona], state=life.state, is_revalidation=life.is_revalidation,
        state_changed_at=next((r.at for r in reversed(life.rows) if r.kind == EventKind.TRANSITION),
                              life.rows[0].at),
    )


def _event(node: Node, row: _Row, users: dict[str, Any]) -> NodeEvent:
    is_system = row.actor.startswith(SYS)
    return NodeEvent(
        node=node, hostname=node.hostname, created=row.at, kind=row.kind, transition=row.transition,
        source_state=row.source, target_state=row.target, reason=row.reason,
        actor=None if is_system else users[row.actor], actor_kind=ActorKind.SYSTEM if is_system else ActorKind.USER,
        actor_name=row.actor, details=row.details,
    )


# --- Keeping it alive -------------------------------------------------------

SIMULATOR = services.Actor.system("demo-simulator")
# Demo time runs fast: minutes in a state before the simulator moves a node on.
MIN_AGE = {
    S.ENROLLED: 3, S.INITIALIZING: 2, S.ONBOARD: 1, S.FIRMWARE_UPDATE: 2, S.INVENTORY_CHECK: 1, S.BURN_IN: 6,
    S.FABRIC_CHECK: 2, S.RELIABILITY_ASSESSMENT: 4, S.DRAIN_PENDING: 3, S.DRAINING: 1, S.TRIAGE: 2,
    S.REMEDIATING: 2, S.REPAIR: 10, S.RMA: 30,
}
TROUBLE_CAP = 0.08  # no new faults while this share of the demo fleet is out of production
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


def _advance_day0(rng: random.Random, now: datetime) -> list[str]:
    verbs = {S.ENROLLED: ("start_initialization", "Provisioning slot free: PXE boot with the base image"),
             S.INITIALIZING: ("mark_onboard", "Agent registered after first boot"),
             S.ONBOARD: ("start_validation", "Onboarded: starting Day 1 validation")}
    changes: list[str] = []
    if rng.random() > 0.35:  # a slow trickle, so the new racks' bring-up stays on screen for a while
        return changes
    for node in _ready(rng, now, DAY0, 1):
        verb, reason = verbs[node.state]
        changes += _run(verb, node, reason)
    return changes


def _advance_day1(rng: random.Random, now: datetime) -> list[str]:
    changes: list[str] = []
    stages = {state: (verb, reason) for state, verb, _, _, _, reason in STAGES}
    for node in _ready(rng, now, tuple(DAY1_STAGES), 3):
        verb, fail_reason = stages[node.state]
        if rng.random() < 0.04:
            reason, details = _fill(fail_reason, _parts(rng, _gpu_uuids(node)))
            changes += _run("fail_validation", node, f"{S(node.state).label} failed: {reason}", **details)
        else:
            changes += _run(verb, node, f"{S(node.state).label} passed")
    return changes


def _gpu_uuids(node: Node) -> list[str]:
    return list(node.gpus.order_by("index").values_list("uuid", flat=True)) or [""] * 8


def _new_fault(rng: random.Random, now: datetime) -> list[str]:
    fleet = demo_nodes()
    if rng.random() > 0.3 or fleet.filter(state__in=TROUBLE_STATES).count() >= TROUBLE_CAP * fleet.count():
        return []
    candidates = list(fleet.filter(state=S.PRODUCTION).order_by("pk").values_list("pk", flat=True))
    if not candidates:
        return []
    node = Node.objects.get(pk=rng.choice(candidates))
    cause = _pick_cause(rng, None, planned=False)
    finding, details = _fill(cause.finding, _parts(rng, _gpu_uuids(node)))
    tag = {"cause": cause.key, "incident": f"INC-{rng.randrange(16**6):06X}"}
    services.record_event(node.pk, EventKind.FINDING, actor=SIMULATOR, reason=finding,
                          details=_finding_details(cause, details, tag))
    if cause.cordon:
        return _run("cordon", node, f"{finding}: cordoned at once", **tag)
    return _run("request_drain", node, f"{finding}: drain when the running job ends", **tag)


def _progress_drain(rng: random.Random, now: datetime) -> list[str]:
    changes: list[str] = []
    for node in _ready(rng, now, (S.DRAIN_PENDING, S.DRAINING), 2):
        if node.state == S.DRAINING:
            changes += _run("complete_drain", node, "The workload scheduler reports the node empty")
        elif rng.random() < 0.15:
            changes += _run("cancel_drain", node, "Fault cleared before the job ended: no errors for 2 h")
        else:
            changes += _run("start_draining", node, "The customer's job ended; draining")
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


MOVES: tuple[Move, ...] = (_advance_day0, _advance_day1, _new_fault, _progress_drain, _work_the_queue)


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
