"""What goes wrong in a GPU fleet, and how often: the fault classes the simulator injects.

Rates are the Llama 3 paper's Table 5 (419 unexpected interruptions in 54 days on 16,384
H100s = 2,048 nodes; ../shared/reference/failure-rates.md §1 and §4): a class's rate per
node-day is its count / (2,048 x 54). Each class has the signature a node agent would see
(an XID in the kernel log, row-remap flags, an InfiniBand port going down, a host that stops
reporting, or nothing at all for a software bug) and what actually cures it, drawn per fault:
e.g. a faulty GPU comes back after a power cycle 40% of the time and needs the GPU replaced
otherwise (Crusoe's 19.5% recoverable vs 41.5% replaced; NVIDIA's catalog: XID 79 wants a
node power cycle). The simulated hardware stays broken until a rung at least that far up the
ladder has run on it (or a technician has repaired it), whatever the policy thought.

A GPU reset is the least that cures what a reboot cured before for HBM and SRAM errors (XID 48,
95: NVIDIA's catalog says RESET_GPU, and a pending row remap takes effect at the GPU's next
reset) and for 40% of GSP errors (XID 119/120: RESET_GPU; the rest need a power cycle or the
part). These shares are ours, not published; a reboot or more still cures them (it resets every
GPU), so with the reset rung off the same faults take the longer road.

Noise classes are signals without a defect behind them (a link that flaps once, a thermal
slowdown under a heat wave, an application's XID 13): acting on them is a false action.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LLAMA3_DAYS = 54
LLAMA3_NODES = 2_048  # 16,384 H100 GPUs, 8 per server
LLAMA3_INTERRUPTIONS = 419

# Signatures: how the fault shows to a node agent.
XID = "xid"  # an XID line in the kernel log (plus the GPU's own flags)
ROW_REMAP = "row_remap"  # an uncorrectable ECC error with a row remap pending (XID 48/94/95 alongside)
IB_DOWN = "ib_down"  # one HCA port down (cable, transceiver or NIC)
THERMAL = "thermal"  # a GPU over its operating temperature, clocks slowed by HW_THERMAL
SILENT = "silent"  # the host stops reporting (PSU, chassis, CPU, hang)
EDAC = "edac"  # host memory uncorrectable errors
DISK = "disk"  # a disk's SMART verdict turns bad
NONE = "none"  # nothing a node agent can see: the job crashes, the node is fine (software, NCCL)

# Cures: the least that fixes it. "" = nothing to fix on the node (restarting the job is enough).
RESTART_JOB, RESET, REBOOT, POWER_CYCLE, REIMAGE, REPAIR, RMA = (
    "",
    "gpu_reset",
    "reboot",
    "power_cycle",
    "reimage",
    "repair",
    "rma",
)
CURE_ORDER = (RESET, REBOOT, POWER_CYCLE, REIMAGE, REPAIR, RMA)


@dataclass(frozen=True)
class FaultClass:
    key: str
    component: str  # the paper's row
    category: str  # GPU, Network, Host, Dependency, Unplanned Maintenance, Unknown
    count: float  # interruptions in the paper's 54 days on 2,048 nodes (noise: our own estimate)
    signature: str
    xids: tuple[int, ...] = ()
    cures: tuple[tuple[str, float], ...] = ((RESTART_JOB, 1.0),)  # (cure, probability)
    interrupts_job: bool = True  # a synchronous job on the node crashes
    noise: bool = False  # no defect behind the signal

    @property
    def per_node_day(self) -> float:
        return self.count / (LLAMA3_NODES * LLAMA3_DAYS)

    def draw_cure(self, rng: random.Random) -> str:
        roll, total = rng.random(), 0.0
        for cure, share in self.cures:
            total += share
            if roll < total:
                return cure
        return self.cures[-1][0]

    def draw_xid(self, rng: random.Random) -> int | None:
        return rng.choice(self.xids) if self.xids else None


FAULTS: tuple[FaultClass, ...] = (
    FaultClass("faulty_gpu", "Faulty GPU", "GPU", 148, XID, (79,), ((POWER_CYCLE, 0.4), (RMA, 0.6))),
    FaultClass("hbm", "GPU HBM3 Memory", "GPU", 72, ROW_REMAP, (48, 95), ((RESET, 0.6), (RMA, 0.4))),
    FaultClass("software", "Software Bug", "Dependency", 54, NONE),
    FaultClass("network", "Network Switch/Cable", "Network", 35, IB_DOWN, (), ((REPAIR, 1.0),)),
    FaultClass(
        "host_maintenance", "Host Maintenance", "Unplanned Maintenance", 32, SILENT, (), ((REBOOT, 0.7), (REIMAGE, 0.3))
    ),
    FaultClass("sram", "GPU SRAM Memory", "GPU", 19, XID, (48,), ((RESET, 0.7), (RMA, 0.3))),
    FaultClass(
        "gsp", "GPU System Processor", "GPU", 17, XID, (119, 120), ((RESET, 0.4), (POWER_CYCLE, 0.4), (RMA, 0.2))
    ),
    FaultClass("nic", "NIC", "Host", 7, IB_DOWN, (), ((REBOOT, 0.5), (REPAIR, 0.5))),
    FaultClass("nccl_timeout", "NCCL Watchdog Timeouts", "Unknown", 7, NONE),
    FaultClass("sdc", "Silent Data Corruption", "GPU", 6, NONE),
    FaultClass("thermal", "GPU Thermal Interface + Sensor", "GPU", 6, THERMAL, (), ((REPAIR, 1.0),)),
    FaultClass("ssd", "SSD", "Host", 3, DISK, (), ((REPAIR, 1.0),)),
    FaultClass("psu", "Power Supply", "Host", 3, SILENT, (), ((REPAIR, 1.0),)),
    FaultClass("chassis", "Server Chassis", "Host", 2, SILENT, (), ((REPAIR, 1.0),)),
    FaultClass("io_board", "IO Expansion Board", "Host", 2, XID, (79,), ((REPAIR, 1.0),)),
    FaultClass("dependency", "Dependency", "Dependency", 2, NONE),
    FaultClass("cpu", "CPU", "Host", 2, SILENT, (), ((RMA, 1.0),)),
    FaultClass("dimm", "System Memory", "Host", 2, EDAC, (), ((REPAIR, 1.0),)),
)
# Signals without a defect. Rates are ours (not published): a few a day on 2,048 nodes.
NOISE: tuple[FaultClass, ...] = (
    FaultClass("link_flap", "IB link flap (recovers)", "Noise", 60, IB_DOWN, interrupts_job=False, noise=True),
    FaultClass("heat_wave", "Thermal slowdown (hot aisle)", "Noise", 40, THERMAL, interrupts_job=False, noise=True),
    FaultClass("app_xid", "Application XID 13/31", "Noise", 80, XID, (13, 31), interrupts_job=False, noise=True),
)
BY_KEY = {f.key: f for f in FAULTS + NOISE}
# All-cause failure rates per 1000 node-days published for other fleets (failure-rates.md §2-§3):
# the simulator keeps the Llama 3 mix of causes and scales it to these totals.
PUBLISHED_RATES = {
    "llama3": 3.79,  # Meta, Llama 3 405B pre-training, 16,384 H100 (Table 5)
    "rsc1": 6.50,  # Meta RSC-1, 16k A100 (Kokolis et al., HPCA 2025)
    "rsc2": 2.34,  # Meta RSC-2, 8k A100 (same)
    "crusoe": 8.5,  # Crusoe H200 cluster, ~205 failures in 4 months (GTC 2025; our estimate for 200 nodes)
}
assert sum(f.count for f in FAULTS) == LLAMA3_INTERRUPTIONS  # the paper's Table 5 adds up


def cure_rank(cure: str) -> int:
    """Position on the ladder of the least that cures; -1 for nothing to cure."""
    return CURE_ORDER.index(cure) if cure else -1


def rung_cures(rung: str, cure: str) -> bool:
    """Does having run ``rung`` (remediation.choices.Rung values) cure a fault that needs ``cure``?
    A technician's repair or an RMA cures anything."""
    if not cure:
        return True
    if rung in (REPAIR, RMA):
        return True
    return rung in CURE_ORDER and CURE_ORDER.index(rung) >= CURE_ORDER.index(cure)
