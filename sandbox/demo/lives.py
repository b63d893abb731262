"""One demo node's life, simulated as rows: enrolment, Day 1, incidents, drains, repairs.

Pure generation (no database writes): ``plan`` decides each node's goal and
``live`` walks it there through the transitions declared on Node."""

from __future__ import annotations

import math
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.choices import SchedulerKind
from nodes.choices import DAY1_STAGES, EventKind
from validation.choices import STAGES as DAY1_STAGE_INFO
from validation.models import Day1Spec

from .catalog import (
    CAUSES,
    CLUSTERS,
    DAY0,
    DRAIN_GOALS,
    FINAL_SHARE,
    FOLLOWUP,
    GPU_PCI_BUSES,
    HEALTH,
    INVENTORY,
    NODES_PER_RACK,
    PROFILES,
    PROVISIONER,
    RACK_UNITS,
    RATE_SCALE,
    REMEDIATOR,
    RUNGS,
    SCHEDULER_ACTOR,
    SECOND,
    SIT_HOURS,
    SITES,
    STAGES,
    TRANSITIONS,
    VALIDATION,
    Cause,
    ClusterSpec,
    S,
)

STAGE_OF = {info.state: info.stage for info in DAY1_STAGE_INFO}  # Day 1 state -> its stage (validation)

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
        self.planned = False  # the road out of production is an operator's planned maintenance

    def go(self, name: str, reason: str, actor: str, hours: tuple[float, float], **details: Any) -> None:
        self.t += timedelta(hours=max(SECOND, self.rng.uniform(*hours)))
        target = TRANSITIONS[name].get(self.state)
        if name == "complete_drain" and self.planned:  # an operator's planned drain (nodes.services)
            target = S.MAINTENANCE
        if target is None:
            raise AssertionError(f"{name} is not allowed from {self.state}")
        self.rows.append(_Row(self.t, EventKind.TRANSITION, reason, actor, name, self.state, target, details))
        self.state = target
        if name in ("revalidate", "end_maintenance"):
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
        del self.rows[mark[0] :]
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
    return {
        "gpu": gpu,
        "gpu_uuid": gpu_uuids[gpu],
        "bus": GPU_PCI_BUSES[gpu % 8],
        "link": rng.randrange(18),
        "hca": f"mlx5_{rng.randrange(8)}",
        "n": rng.randrange(6, 40),
        "psu": rng.randrange(1, 7),
        "dimm": f"{'ABCDEFGH'[rng.randrange(8)]}{rng.randrange(1, 3)}",
        "nvme": rng.randrange(4),
        "job": rng.randrange(4_000_000, 9_000_000),
    }


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
    life.note(
        EventKind.ACTION,
        f"Enrolled from delivery manifest {po}: {slot.cluster.profile}, "
        f"serial {slot.serial}, rack {slot.rack} U{slot.unit}",
        INVENTORY,
        manifest=po,
    )


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
    allow_planned = planned and goal in (None, S.MAINTENANCE)  # maintenance never puts a node in trouble
    pool = [c for c in CAUSES if allow_planned or not c.planned]
    if goal == S.MAINTENANCE:
        pool = [c for c in pool if c.planned]
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
    life.planned = cause.planned
    if cause.planned:
        life.note(EventKind.NOTE, finding, _human(rng), **tag)
    else:
        life.note(EventKind.FINDING, finding, HEALTH, **_finding_details(cause, details, tag))
    # Out of production the way remediation.services takes a node out: its actor, cordon or drain.
    if cause.cordon:
        life.go("cordon", f"{finding}: cordoned at once", REMEDIATOR, (SECOND, 0.005), **tag)
    else:
        actor = _human(rng) if cause.planned else REMEDIATOR
        life.go("request_drain", f"{finding}: drain when the running job ends", actor, (SECOND, 0.02), **tag)
        if goal is None and rng.random() < cause.cancel:
            life.go("cancel_drain", "Fault cleared before the job ended: standing down", REMEDIATOR, (0.5, 4), **tag)
            return
        _drain(life, tag)
    _fix(life, cause, parts, tag)


def _fix(life: _Life, cause: Cause, parts: dict[str, Any], tag: dict[str, Any]) -> None:
    """From triage: the remediation ladder, then a technician, then the vendor."""
    rng, goal = life.rng, life.goal
    must_fail = goal in (S.REPAIR, S.RMA, S.DECOMMISSIONED)
    if cause.planned:  # an operator's maintenance: no finding, no remediation; the operator ends it
        life.planned = False
        life.go(
            "end_maintenance",
            "Firmware flashed to the profile baseline; re-validating firmware, inventory and burn-in",
            _human(rng),
            (0.5, 1.5),
            maintenance_work="firmware",
            **tag,
        )
        return _day1(life)
    if not cause.to_rma:
        for rung in cause.rungs:
            label, hours = RUNGS[rung]
            life.go("start_remediation", f"Automated remediation: {label}", REMEDIATOR, (0.02, 2), action=rung, **tag)
            if not must_fail and rng.random() < cause.fix:
                life.go(
                    "revalidate", f"{label.capitalize()} cleared the fault; re-validating", REMEDIATOR, hours, **tag
                )
                return _day1(life)
            life.go("fail_remediation", f"Fault persists after {label}", REMEDIATOR, hours, action=rung, **tag)
        repair, _ = _fill(cause.repair, parts)
        # The last rung failed: remediation hands off to a technician (remediation.services._hand_off).
        life.go("send_to_repair", f"Technician ticket: {repair}", REMEDIATOR, (0.3, 18), **tag)
        if not must_fail and rng.random() < cause.repair_fix:
            life.go("revalidate", f"Repaired on site ({repair}); every Day 1 check again", _human(rng), (2, 96), **tag)
            return _day1(life)
    part, _ = _fill(cause.part, parts)
    rma = f"RMA-{rng.randrange(100_000, 999_999)}"
    # Straight from triage it is remediation's RMA rung; from repair, the technician's call.
    who = REMEDIATOR if life.state == S.TRIAGE else _human(rng)
    life.go("send_to_rma", f"Vendor case {rma}: replace {part}", who, (1, 48), rma=rma, **tag)
    if goal == S.DECOMMISSIONED:
        life.go(
            "decommission",
            f"Vendor case {rma}: system beyond economical repair; retired",
            "admin",
            (72, 500),
            rma=rma,
            **tag,
        )
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


def _sit(goal: str, rng: random.Random) -> timedelta:
    """How long the node has been in its final state. In a Day 1 stage, within the stage's timeout
    of the product's default Day 1 specification: a node seeded past it is one the pipeline would
    have failed as stuck (the auditor's transient-timeout rule)."""
    low, high = SIT_HOURS.get(goal, (0.0, 0.0))
    if goal in DAY1_STAGES:
        limit = Day1Spec().timeout(STAGE_OF[goal]) * 0.9 / timedelta(hours=1)
        high = min(high, limit)
        low = min(low, high / 2)
    return timedelta(hours=rng.uniform(low, high))


def _live(slot: _Slot, rng: random.Random, now: datetime) -> _Life:
    """Write one node's whole life, ending in its slot's goal state."""
    sit = _sit(slot.goal, rng)
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
    return [(f"GPU-{uuid.UUID(int=rng.getrandbits(128))}", f"{prefix}{rng.randrange(10**9):09d}") for _ in range(8)]


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
            slots.append(
                _Slot(
                    cluster=spec,
                    rack=_rack_name(rack_no),
                    unit=RACK_UNITS[k % NODES_PER_RACK],
                    tenant=tenant,
                    hostname=f"{spec.name}-{k + 1:0{width}d}",
                    serial=f"SN{spec.site.upper()}{len(slots) + 1:06d}",
                    bmc=f"10.{site_octet[spec.site] + rack_no // 250}.{rack_no % 250}.{11 + k % NODES_PER_RACK}",
                    gpus=_gpus(rng, spec.profile),
                    fresh=fresh,
                    arrival=None if fresh else rack_arrival + timedelta(hours=rng.uniform(0, 8)),
                    hazard=6.0 if rng.random() < 0.03 else rng.uniform(0.5, 1.5),
                )
            )
        racks_used[spec.site] += n_racks
    fresh_slots = [s for s in slots if s.fresh]
    established_goals += fresh_goals[len(fresh_slots) :]  # no room in the new racks: re-validations instead
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
