"""Stage 2, inventory check: what the node holds against its hardware profile.

Reads the agent's first report made after the stage started (so it describes the node as
it booted now, not before a repair), and the GPUs of that report only (not GPU rows kept
from earlier reports) and, where a BMC is configured, its inventory. Any
mismatch fails the stage with the exact difference: GPU model and count, InfiniBand HCA
count and link rate, host memory, and every GPU's PCIe link (width and generation) at
its maximum.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from telemetry.models import GpuState, NodeHealth

from .base import StageContext, Verdict

CLOCK_SKEW = timedelta(minutes=2)  # how far behind the portal an agent's clock may be


def _fresh_health(ctx: StageContext) -> NodeHealth | None:
    """The node's newest report, if it was received since the stage started and taken since the
    stage started (less a clock-skew allowance): a report the agent buffered before a reboot and
    flushed afterwards describes the node as it was, not as it is."""
    started = ctx.run.started or ctx.run.created
    return NodeHealth.objects.filter(
        node_id=ctx.node.pk, last_received_at__gte=started, last_report_at__gte=started - CLOCK_SKEW
    ).first()


def _reported_gpus(ctx: StageContext, health: NodeHealth) -> list[GpuState]:
    """The GPUs of that newest report only. ``GpuState`` keeps a row per GPU ever reported: a GPU
    that fell off the bus keeps its old row, so counting rows would count it still there."""
    return list(GpuState.objects.filter(node_id=ctx.node.pk, updated_at__gte=health.last_report_at).order_by("index"))


def _ib_devices(ports: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    devices: dict[str, list[dict[str, Any]]] = {}
    for port in ports:
        if (port.get("link_layer") or "InfiniBand") == "InfiniBand":
            devices.setdefault(port["device"], []).append(port)
    return devices


def compare(
    ctx: StageContext, health: NodeHealth, gpus: list[GpuState], bmc_memory_gib: float | None
) -> tuple[list[str], dict[str, Any]]:
    """The differences (operator-readable, one per problem) and the observed facts."""
    profile, spec = ctx.node.hardware_profile, ctx.spec
    problems: list[str] = []
    if len(gpus) != profile.gpu_count:
        problems.append(f"GPU count {len(gpus)}, profile {profile.name} expects {profile.gpu_count}")
    wrong_model = [
        f"GPU {g.index} is {g.name!r}" for g in gpus if g.name and profile.gpu_model.lower() not in g.name.lower()
    ]
    if wrong_model:
        problems.append(f"{'; '.join(wrong_model)}, expected {profile.gpu_model!r}")
    for g in gpus:
        if g.pcie_max_link_width and (g.pcie_link_width or 0) < g.pcie_max_link_width:
            problems.append(f"GPU {g.index} PCIe link x{g.pcie_link_width} of x{g.pcie_max_link_width}")
        if g.pcie_max_link_gen and (g.pcie_link_gen or 0) < g.pcie_max_link_gen:
            problems.append(f"GPU {g.index} PCIe Gen{g.pcie_link_gen} of Gen{g.pcie_max_link_gen}")
    devices = _ib_devices(health.ib_ports or [])
    if profile.hca_count and len(devices) != profile.hca_count:
        problems.append(f"InfiniBand HCA count {len(devices)}, expected {profile.hca_count}")
    if profile.hca_rate_gbps:
        slow = [
            f"{d}/{p['port']} {p.get('rate_gbps') or 0:g} Gb/s"
            for d, ports in sorted(devices.items())
            for p in ports
            if (p.get("rate_gbps") or 0) < profile.hca_rate_gbps
        ]
        if slow:
            problems.append(f"HCA link rate below {profile.hca_rate_gbps} Gb/s: {', '.join(slow)}")
    memory_mib = (health.host or {}).get("memory_total_mib")
    memory_gib = memory_mib / 1024 if memory_mib else bmc_memory_gib
    if memory_gib is None:
        problems.append("Host memory not reported by the agent or the BMC")
    elif memory_gib < profile.memory_gb * (1 - spec.memory_tolerance):
        problems.append(f"Host memory {memory_gib:.0f} GiB, profile expects {profile.memory_gb} GiB")
    facts = {
        "gpu_count": len(gpus),
        "gpu_models": sorted({g.name for g in gpus}),
        "hca_count": len(devices),
        "memory_gib": round(memory_gib, 1) if memory_gib else None,
        "bmc_memory_gib": bmc_memory_gib,
    }
    return problems, facts


def _bmc_memory(ctx: StageContext) -> tuple[float | None, dict[str, Any]]:
    if not hasattr(ctx.node, "bmc"):
        return None, {}
    from bmc import client
    from bmc.drivers.base import BmcError

    try:
        inventory = client.read_inventory(ctx.node.bmc)
    except BmcError as exc:  # the agent's view still decides; the BMC's failure is on record
        return None, {"bmc_error": str(exc)}
    return inventory.memory_gib, {
        "bmc": {
            "model": inventory.model,
            "serial": inventory.serial,
            "processors": inventory.processor_count,
            "memory_gib": inventory.memory_gib,
        }
    }


def start(ctx: StageContext) -> Verdict | None:
    return poll(ctx)


def poll(ctx: StageContext) -> Verdict | None:
    health = _fresh_health(ctx)
    if health is None:
        return None  # waiting for the agent's first report since the stage began
    gpus = _reported_gpus(ctx, health)
    bmc_memory, bmc_facts = _bmc_memory(ctx)
    problems, facts = compare(ctx, health, gpus, bmc_memory)
    evidence = {**facts, **bmc_facts, "report_at": health.last_report_at.isoformat()}
    figures = {"gpu_count": float(facts["gpu_count"]), "hca_count": float(facts["hca_count"])}
    if problems:
        return Verdict(
            False,
            "Inventory mismatch: " + "; ".join(problems),
            figures=figures,
            evidence={**evidence, "problems": problems},
        )
    return Verdict(
        True,
        f"{facts['gpu_count']} x {ctx.node.hardware_profile.gpu_model}, "
        f"{facts['hca_count']} HCA(s), {facts['memory_gib']} GiB as profiled.",
        figures=figures,
        evidence=evidence,
    )
