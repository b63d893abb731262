"""XID rules: every XID line is a finding; repeated catastrophic XIDs on one GPU mean RMA.

XID alerts are never cleared by a report (an XID is an event, not a state); the periodic
task resolves them after ``clear_after_seconds`` of quiet.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from .. import xid as catalog
from ..choices import RecommendedAction as A
from ..choices import Severity as S
from .base import Condition, RuleConfig, Screen, fire, node_rule, screen
from .gpu import RECOVERY_ACTIONS
from .windows import record_events

XID_RECOVERY_ACTION_CHANGED = 154
# "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)": read here too
# for agents that predate XidEvent.recovery_action (the agent's kmsg collector reads it first).
_RECOVERY_IN_MESSAGE = re.compile(r"recovery action changed from .*? to 0x([0-9A-Fa-f]+)", re.IGNORECASE)


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address, however it is spelled: the kernel log says
    "0000:53:00", NVML and dcgm-exporter "00000000:53:00.0"."""
    if not bus_id:
        return None
    parts = bus_id.strip().split(".")[0].split(":")
    try:
        numbers = [int(p, 16) for p in parts]
    except ValueError:
        return None
    if len(numbers) == 2:
        numbers = [0, *numbers]
    return (numbers[-3], numbers[-2], numbers[-1]) if len(numbers) >= 3 else None


def gpu_index_by_pci(ctx: Any) -> dict[tuple[int, int, int], int]:
    """PCI address -> GPU index, from this report's GPUs, else the node's previous readings."""
    found = [(pci_key(g.get("pci_bus_id")), i) for i, g in ctx.previous_gpus.items()]
    found += [(pci_key(g.pci_bus_id), g.index) for g in ctx.report.gpus]  # this report's win
    return {key: index for key, index in found if key is not None}


def resolve_gpu(ctx: Any, bus_id: str | None, mapping: dict[tuple[int, int, int], int] | None = None) -> int | None:
    key = pci_key(bus_id)
    return (mapping if mapping is not None else gpu_index_by_pci(ctx)).get(key) if key is not None else None


def recovery_action(event: Any) -> int | None:
    """The nvmlGpuRecoveryAction_t an XID 154 line changes to, or None if it names none."""
    if event.recovery_action is not None:
        return int(event.recovery_action)
    match = _RECOVERY_IN_MESSAGE.search(event.message or event.raw)
    return int(match[1], 16) if match else None


def recovery_verdict(event: Any) -> tuple[str, str, int | None]:
    """XID 154's severity and action come from the line, not the catalog: "GPU Reset Required"
    is a reset, "Node Reboot Required" a reboot, "None" that the GPU recovered. A line we cannot
    read, or an action newer than this table, is a warning to inspect rather than silence."""
    value = recovery_action(event)
    if value == 0:
        return S.INFO, A.NONE, value
    if value in RECOVERY_ACTIONS:
        severity, action, _label = RECOVERY_ACTIONS[value]
        return severity, action, value
    return S.WARNING, A.INSPECT, value


@node_rule(
    "xid",
    severity=S.WARNING,
    recommended_action=A.INSPECT,
    clear_after_seconds=6 * 3600,
    params={"sxid_severity": S.WARNING, "sxid_action": A.INSPECT},
)
def xid_events(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """Every XID line from the kernel log: severity and action from the XID catalog, on the GPU
    whose PCI address the line names. NVSwitch SXids carry no catalog entry (params decide)."""
    mapping = gpu_index_by_pci(ctx) if ctx.report.xid_events else {}
    for event in ctx.report.xid_events:
        gpu = resolve_gpu(ctx, event.pci_bus_id, mapping)
        evidence = {
            "xid": event.xid,
            "kind": event.kind,
            "pci_bus_id": event.pci_bus_id,
            "pid": event.pid,
            "process": event.process,
            "raw": event.raw,
        }
        if event.kind == "sxid":
            yield fire(
                f"SXid {event.xid} (NVSwitch): {event.message or event.raw}"[:500],
                subject=f"sxid:{event.xid}",
                severity=cfg.param("sxid_severity", S.WARNING),
                recommended_action=cfg.param("sxid_action", A.INSPECT),
                evidence=evidence,
                observed_at=event.observed_at,
            )
            continue
        info = catalog.lookup(event.xid)
        evidence.update({"name": info.name, "meaning": info.meaning, "in_catalog": info.known})
        severity, action = info.severity, info.recommended_action
        if event.xid == XID_RECOVERY_ACTION_CHANGED:
            severity, action, evidence["recovery_action"] = recovery_verdict(event)
        yield fire(
            f"XID {event.xid} {info.name}: {event.message or info.meaning}"[:500],
            gpu=gpu,
            subject=f"xid:{event.xid}",
            severity=severity,
            recommended_action=action,
            xid=event.xid,
            evidence=evidence,
            observed_at=event.observed_at,
        )


@node_rule(
    "xid_repeated",
    severity=S.DEGRADED,
    recommended_action=A.RMA,
    count=5,
    window_seconds=24 * 3600,
    clear_after_seconds=7 * 24 * 3600,
    params={"xids": {"79": {"count": 2, "window_seconds": 7 * 24 * 3600}}},
)
def xid_repeated(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """A catastrophic XID ``count`` times within ``window_seconds`` on one GPU (default 5 in 24 h),
    or an XID listed in ``params.xids`` as often as listed there (XID 79 twice in 7 days): the
    GPU keeps failing after remediation, RMA it."""
    groups: dict[tuple[int | None, str], list[datetime]] = defaultdict(list)
    mapping = gpu_index_by_pci(ctx) if ctx.report.xid_events else {}
    special = cfg.param("xids", {})
    for event in ctx.report.xid_events:
        if event.kind != "xid":
            continue
        gpu = resolve_gpu(ctx, event.pci_bus_id, mapping)
        if str(event.xid) in special:
            groups[(gpu, f"xid:{event.xid}")].append(event.observed_at)
        if catalog.lookup(event.xid).severity == S.CATASTROPHIC:
            groups[(gpu, "catastrophic")].append(event.observed_at)
    for (gpu, subject), times in groups.items():
        limits = special.get(subject.removeprefix("xid:"), {}) if subject != "catastrophic" else {}
        needed = int(limits.get("count", cfg.count or 5))
        window = int(limits.get("window_seconds", cfg.window_seconds or 86400))
        seen = record_events(ctx.node_id, "xid_repeated", f"{gpu}|{subject}", times, window)
        if seen >= needed:
            what = "catastrophic XIDs" if subject == "catastrophic" else f"XID {subject[4:]}"
            yield fire(
                f"{seen} {what} within {window // 3600} h on this GPU",
                gpu=gpu,
                subject=subject,
                evidence={"events_in_window": seen, "count": needed, "window_seconds": window},
                observed_at=max(times),
            )


# Both XID rules act on the report's XID lines only: a report without any is nothing to them.


@screen("xid")
def _xid_screen(cfg: RuleConfig) -> Screen:
    return lambda ctx, gpus: bool(ctx.report.xid_events)


@screen("xid_repeated")
def _xid_repeated_screen(cfg: RuleConfig) -> Screen:
    return lambda ctx, gpus: bool(ctx.report.xid_events)
