"""The demo fleet's cast: sites, clusters, hardware, tenants, users, failure causes and repair rungs."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.choices import SchedulerKind
from nodes import services
from nodes.choices import NodeState
from nodes.models import Node
from nodes.roles import FLEET_ADMINS, OPERATORS

S = NodeState
DEMO_PASSWORD = "nodewarden-demo"  # noqa: S105 - printed to the user on purpose
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
    ClusterSpec(
        "iad1-train-a",
        "iad1",
        SchedulerKind.SLURM,
        "slurmctld.iad1.internal:6817",
        "HGX H100 8-GPU",
        "training",
        0.35,
        0.0,
        (("helios", 0.7), (None, 0.3)),
    ),
    ClusterSpec(
        "iad1-infer",
        "iad1",
        SchedulerKind.KUBERNETES,
        "https://k8s-infer.iad1.internal:6443",
        "HGX H100 8-GPU",
        "inference",
        0.20,
        0.15,
        (("northwind", 0.6), ("quanta", 0.2), (None, 0.2)),
    ),
    ClusterSpec(
        "fra1-train-b",
        "fra1",
        SchedulerKind.SLURM,
        "slurmctld.fra1.internal:6817",
        "HGX H200 8-GPU",
        "training",
        0.30,
        0.3,
        (("quanta", 0.5), ("helios", 0.3), (None, 0.2)),
        expanding=True,
    ),
    ClusterSpec(
        "fra1-metal",
        "fra1",
        SchedulerKind.NONE,
        "",
        "HGX H200 8-GPU",
        "inference",
        0.15,
        0.45,
        (("northwind", 0.6), (None, 0.4)),
    ),
)
PROFILES = {
    "HGX H100 8-GPU": {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "hca_count": 8,
        "hca_rate_gbps": 400,
        "memory_gb": 2048,
        "serial_prefix": "1652",
        "firmware_baseline": {
            "bios": "2.1.7",
            "bmc": "13.3.4",
            "gpu_vbios": "96.00.99.00.01",
            "nvswitch": "96.10.6D.00.01",
            "cx7": "28.41.1000",
            "driver": "550.127.05",
        },
    },
    "HGX H200 8-GPU": {
        "gpu_model": "NVIDIA H200 141GB HBM3e",
        "gpu_count": 8,
        "hca_count": 8,
        "hca_rate_gbps": 400,
        "memory_gb": 2048,
        "serial_prefix": "1654",
        "firmware_baseline": {
            "bios": "2.4.1",
            "bmc": "13.5.2",
            "gpu_vbios": "96.00.A5.00.01",
            "nvswitch": "96.10.73.00.01",
            "cx7": "28.42.1000",
            "driver": "560.35.03",
        },
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
    S.ENROLLED: 0.008,
    S.INITIALIZING: 0.006,
    S.ONBOARD: 0.006,
    S.FIRMWARE_UPDATE: 0.01,
    S.INVENTORY_CHECK: 0.006,
    S.BURN_IN: 0.016,
    S.FABRIC_CHECK: 0.008,
    S.RELIABILITY_ASSESSMENT: 0.01,
    S.DRAIN_PENDING: 0.012,
    S.DRAINING: 0.008,
    S.MAINTENANCE: 0.008,
    S.TRIAGE: 0.012,
    S.REMEDIATING: 0.008,
    S.REPAIR: 0.012,
    S.RMA: 0.01,
    S.DECOMMISSIONED: 0.008,
}
DAY0 = (S.ENROLLED, S.INITIALIZING, S.ONBOARD)
DRAIN_GOALS = (S.DRAIN_PENDING, S.DRAINING)
# How long a node has sat in its final state, in hours (below the stage's usual length).
SIT_HOURS = {
    S.ENROLLED: (0.2, 6),
    S.INITIALIZING: (0.05, 0.8),
    S.ONBOARD: (0.02, 1.5),
    S.FIRMWARE_UPDATE: (0.1, 1.5),
    S.INVENTORY_CHECK: (0.02, 0.3),
    S.BURN_IN: (1, 30),
    S.FABRIC_CHECK: (0.1, 2),
    S.RELIABILITY_ASSESSMENT: (1, 30),
    S.DRAIN_PENDING: (0.3, 20),
    S.DRAINING: (0.05, 0.3),
    S.MAINTENANCE: (0.5, 30),
    S.TRIAGE: (0.2, 20),
    S.REMEDIATING: (0.05, 0.5),
    S.REPAIR: (3, 96),
    S.RMA: (24, 400),
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
    Cause(
        "xid79",
        0.90,
        "XID 79 on GPU {gpu} (PCI:0000:{bus}:00): GPU has fallen off the bus",
        "dcgm-health",
        xid=79,
        cordon=True,
        rungs=("power_cycle",),
        fix=0.5,
        repair="reseat GPU {gpu} and its baseboard cabling",
        repair_fix=0.6,
        part=GPU_PART,
    ),
    Cause(
        "xid48",
        0.35,
        "XID 48 on GPU {gpu} (PCI:0000:{bus}:00): uncorrectable double-bit ECC error (DBE)",
        "dcgm-health",
        xid=48,
        cordon=True,
        rungs=("gpu_reset",),
        fix=0.75,
        repair="run field diagnostics on GPU {gpu}",
        repair_fix=0.2,
        part=GPU_PART,
    ),
    Cause(
        "xid94",
        0.45,
        "XID 94 on GPU {gpu} (PCI:0000:{bus}:00): contained ECC error, row remap pending",
        "dcgm-health",
        xid=94,
        rungs=("gpu_reset",),
        fix=0.95,
        repair="run field diagnostics on GPU {gpu}",
        repair_fix=0.5,
        part=GPU_PART,
    ),
    Cause(
        "xid95",
        0.25,
        "XID 95 on GPU {gpu} (PCI:0000:{bus}:00): uncontained ECC error",
        "dcgm-health",
        xid=95,
        cordon=True,
        rungs=("gpu_reset", "reboot"),
        fix=0.7,
        repair="run field diagnostics on GPU {gpu}",
        repair_fix=0.3,
        part=GPU_PART,
    ),
    Cause(
        "row_remap_failure",
        0.12,
        "Row-remap failure on GPU {gpu}: HBM bank has no spare rows left",
        "dcgm-health",
        xid=64,
        to_rma=True,
        part=GPU_PART,
    ),
    Cause(
        "xid74",
        0.30,
        "XID 74 on GPU {gpu} (PCI:0000:{bus}:00): NVLink error on link {link}",
        "dcgm-health",
        xid=74,
        rungs=("gpu_reset", "reboot"),
        fix=0.6,
        repair="reseat the NVSwitch tray",
        repair_fix=0.5,
        part="HGX baseboard",
    ),
    Cause(
        "xid119",
        0.15,
        "XID 119 on GPU {gpu} (PCI:0000:{bus}:00): GSP RPC timeout",
        "dcgm-health",
        xid=119,
        cordon=True,
        rungs=("gpu_reset", "power_cycle"),
        fix=0.8,
        repair="reseat GPU {gpu}",
        repair_fix=0.5,
        part=GPU_PART,
    ),
    Cause(
        "ib_link_flap",
        0.35,
        "InfiniBand link flapping on {hca} port 1: {n} down/up events in 10 min",
        "ib-monitor",
        rungs=("reboot",),
        fix=0.3,
        repair="replace the OSFP transceiver on {hca}",
        part="ConnectX-7 adapter {hca}",
        cancel=0.25,
    ),
    Cause(
        "ib_symbol_errors",
        0.15,
        "InfiniBand symbol errors on {hca} port 1: {n} in 1 h, above threshold",
        "ib-monitor",
        repair="replace the cable on {hca}",
        part="ConnectX-7 adapter {hca}",
        cancel=0.1,
    ),
    Cause(
        "psu_failure",
        0.05,
        "PSU {psu} failed (BMC SEL: Power Supply Failure detected)",
        "bmc-sel",
        repair="hot-swap PSU {psu}",
        repair_fix=0.95,
        part="PSU {psu}",
    ),
    Cause(
        "gpu_thermal",
        0.08,
        "GPU {gpu} HW slowdown: thermal margin below the slowdown offset",
        "dcgm-health",
        repair="replace the fan module and re-apply thermal paste on GPU {gpu}",
        repair_fix=0.8,
        part=GPU_PART,
    ),
    Cause(
        "sdc_suspected",
        0.05,
        "DCGM diag level 3 on GPU {gpu}: result mismatch, silent data corruption suspected",
        "dcgm-health",
        cordon=True,
        to_rma=True,
        part=GPU_PART,
    ),
    Cause(
        "nic_down",
        0.06,
        "Front-end NIC link down on bond0",
        "health-monitor",
        rungs=("reboot",),
        fix=0.4,
        repair="replace the front-end NIC",
        repair_fix=0.95,
        part="front-end NIC",
    ),
    Cause(
        "dimm_ue",
        0.06,
        "Uncorrectable memory error on DIMM {dimm} (EDAC)",
        "bmc-sel",
        cordon=True,
        repair="replace DIMM {dimm}",
        repair_fix=0.95,
        part="DIMM {dimm}",
    ),
    Cause(
        "nvme_media",
        0.04,
        "NVMe drive nvme{nvme}: media errors, SMART critical warning set",
        "health-monitor",
        repair="replace NVMe drive nvme{nvme}",
        repair_fix=0.97,
        part="NVMe drive nvme{nvme}",
    ),
    Cause(
        "nccl_timeout",
        0.25,
        "NCCL watchdog timeout: collective hung for 1800 s, job {job} killed",
        "health-monitor",
        rungs=("reboot",),
        fix=0.85,
        repair="swap the node out for lemon checks",
        repair_fix=0.7,
    ),
    Cause(
        "planned_firmware",
        0.30,
        "Planned maintenance: BIOS and BMC update to the profile baseline",
        "operator",
        fix=0.97,
        repair="recover the BMC with a cold reset",
        planned=True,
    ),
)
# Scales the Llama 3 mix (3.9 per 1000 node-days) to ~5.9, between Meta RSC-1 (6.5) and Llama 3 (3.79).
RATE_SCALE = 1.5
# The engine's own rungs (remediation.choices.Rung): label, duration in hours.
RUNGS = {
    "gpu_reset": ("GPU reset", (0.1, 0.3)),
    "reboot": ("node reboot", (0.2, 0.5)),
    "power_cycle": ("BMC power cycle", (0.3, 0.8)),
}
# What the health rules call each cause's finding: (rule, subject template). The seed writes the
# finding, alert and remediation the engine would have made for it (sandbox/demo/records.py).
CAUSE_RULES = {
    "xid79": ("xid", ""),
    "xid48": ("xid", ""),
    "xid94": ("xid", ""),
    "xid95": ("xid", ""),
    "row_remap_failure": ("row_remap_failure", ""),
    "xid74": ("xid", ""),
    "xid119": ("xid", ""),
    "ib_link_flap": ("ib_link_flaps", "{hca}/1"),
    "ib_symbol_errors": ("ib_errors_rising", "{hca}/1"),
    "psu_failure": ("alertmanager", "PSU {psu}"),
    "gpu_thermal": ("gpu_temperature", ""),
    "sdc_suspected": ("active_check", "dcgm diag level 3"),
    "nic_down": ("alertmanager", "bond0"),
    "dimm_ue": ("host_edac_uncorrected", "DIMM {dimm}"),
    "nvme_media": ("disk_unhealthy", "nvme{nvme}"),
    "nccl_timeout": ("alertmanager", "NCCL watchdog"),
}
# Day 1 stages: (state, verb, hours first time, hours on re-validation, failure chance, failure reason).
STAGES = (
    (
        S.FIRMWARE_UPDATE,
        "pass_firmware",
        (0.7, 2.5),
        (0.5, 1.5),
        0.01,
        "BMC firmware update failed verification; needs a BMC cold reset",
    ),
    (
        S.INVENTORY_CHECK,
        "pass_inventory_check",
        (0.1, 0.5),
        (0.1, 0.3),
        0.02,
        "only 7 of 8 GPUs visible on the PCIe bus",
    ),
    (
        S.BURN_IN,
        "pass_burn_in",
        (24, 48),
        (6, 18),
        0.04,
        "DCGM diag level 3 failed: HBM ECC errors under stress on GPU {gpu}",
    ),
    (
        S.FABRIC_CHECK,
        "pass_fabric_check",
        (0.5, 3),
        (0.3, 1.5),
        0.025,
        "{hca} cabled to the wrong leaf port (plan and LLDP disagree)",
    ),
    (S.RELIABILITY_ASSESSMENT, "release_to_production", (12, 48), (2, 12), 0.01, "3 XID 94 events during the soak"),
)
SYS = "system:"
INVENTORY, PROVISIONER, VALIDATION = "system:inventory", "system:provisioner", "system:validation"
# The engine's actors (health.services.HEALTH, remediation.services.ACTOR): the seed speaks as they do.
HEALTH, REMEDIATOR, FOLLOWUP = "system:health", "system:remediation", "system:followup"
SCHEDULER_ACTOR = {SchedulerKind.SLURM: "system:slurm-sync", SchedulerKind.KUBERNETES: "system:k8s-sync"}
SECOND = 1 / 3600


def _transition_table() -> dict[str, dict[str, str]]:
    """verb -> {source: target}, read from the state machine declared on Node."""
    table: dict[str, dict[str, str]] = {}
    for name in services.VERBS:
        meta = getattr(Node, name)._django_fsm
        # A target that depends on why (complete_drain: triage, or maintenance after an operator's
        # planned drain): the seeded lives walk the first, the road of findings they are written for.
        table[name] = {
            str(source): str(t.target.allowed_states[0] if hasattr(t.target, "allowed_states") else t.target)
            for source, t in meta.transitions.items()
        }
    return table


TRANSITIONS = _transition_table()
