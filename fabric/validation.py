"""Fabric validation: the discovered fabric against the cabling plan, and port counters
against their limits. Pure Python over plain data (no database), so a full run over a
2,000-node fabric stays a few dictionary passes (bench/fabric.py times it).

Discrepancies, each with the exact ports on both ends and the evidence:
- missing: a planned cable with nothing on either end;
- link_down: a planned cable whose port is there but down (e.g. Down/Polling: pulled);
- miswired: a planned port connected to another port than planned (wrong port or switch);
- swapped: two planned cables whose far ends are exchanged (reported once, as a pair);
- unexpected: a discovered cable between two ports the plan does not use;
- unknown_device: a device on the fabric that the plan does not know;
- degraded: the planned cable, trained narrower or slower than planned;
- counter_errors: error counters rising faster than their limits;
- flapping: a port whose link went down too often within the flap window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .choices import DiscrepancyKind as K


@dataclass(frozen=True, order=True)
class Port:
    device: str
    port: int

    def __str__(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(frozen=True)
class PlanLink:
    a: Port
    b: Port
    width: str = ""
    rate_gbps: float | None = None


@dataclass(frozen=True)
class SeenLink:
    a: Port
    b: Port
    width: str | None = None
    rate_gbps: float | None = None
    state: str = "Active"
    phys_state: str = "LinkUp"


@dataclass
class Seen:
    """What a run saw: cables, ports that are down with no peer, and every device name."""

    links: list[SeenLink] = field(default_factory=list)
    down_ports: dict[Port, str] = field(default_factory=dict)  # port -> "Down/Polling"
    devices: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Problem:
    kind: str
    key: str
    a: str
    b: str = ""
    expected: str = ""
    found: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def endpoints(self) -> list[str]:
        return sorted({e for e in (self.a, self.b, *self.evidence.get("also", ())) if e})

    @property
    def devices(self) -> set[str]:
        return {e.rsplit("/", 1)[0] for e in self.endpoints}


def _key(kind: str, *ports: Port | str) -> str:
    return "|".join([kind, *sorted(str(p) for p in ports)])


WIDTH_LANES = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}


def _degraded(plan: PlanLink, seen: SeenLink) -> Problem | None:
    short = []
    if plan.width and seen.width and WIDTH_LANES.get(seen.width.upper(), 0) < WIDTH_LANES.get(plan.width.upper(), 0):
        short.append(f"width {seen.width} of {plan.width}")
    if plan.rate_gbps and seen.rate_gbps is not None and seen.rate_gbps < plan.rate_gbps * 0.99:
        short.append(f"{seen.rate_gbps:g} Gb/s of {plan.rate_gbps:g}")
    if not short:
        return None
    return Problem(
        K.DEGRADED,
        _key(K.DEGRADED, plan.a, plan.b),
        str(plan.a),
        str(plan.b),
        expected=f"{plan.width or 'any'} at {plan.rate_gbps or 'any'} Gb/s",
        found=", ".join(short),
        evidence={"width": seen.width, "rate_gbps": seen.rate_gbps},
    )


def compare(plan: Iterable[PlanLink], seen: Seen) -> list[Problem]:
    """Every difference between the plan and what was seen (see the module docstring)."""
    plan = list(plan)
    peer: dict[Port, tuple[Port, SeenLink]] = {}
    for link in seen.links:
        peer[link.a] = (link.b, link)
        peer[link.b] = (link.a, link)
    planned_peer: dict[Port, Port] = {}
    for p in plan:
        planned_peer[p.a], planned_peer[p.b] = p.b, p.a
    problems: list[Problem] = []
    wrong: list[PlanLink] = []
    for p in plan:
        got = peer.get(p.a)
        if got is not None and got[0] == p.b:
            degraded = _degraded(p, got[1])
            if degraded:
                problems.append(degraded)
        elif got is not None or p.b in peer:
            wrong.append(p)
        elif p.a in seen.down_ports or p.b in seen.down_ports:
            end = p.a if p.a in seen.down_ports else p.b
            problems.append(
                Problem(
                    K.LINK_DOWN,
                    _key(K.LINK_DOWN, p.a, p.b),
                    str(p.a),
                    str(p.b),
                    expected="Active/LinkUp",
                    found=f"{end} {seen.down_ports[end]}",
                    evidence={"down_port": str(end)},
                )
            )
        else:
            problems.append(
                Problem(
                    K.MISSING,
                    _key(K.MISSING, p.a, p.b),
                    str(p.a),
                    str(p.b),
                    expected=f"{p.a} <-> {p.b}",
                    found="no link on either port",
                )
            )
    problems += _miswires(wrong, peer)
    problems += _unplanned(seen, planned_peer, {p.a.device for p in plan} | {p.b.device for p in plan})
    return problems


def _miswires(wrong: list[PlanLink], peer: Mapping[Port, tuple[Port, SeenLink]]) -> list[Problem]:
    """Planned cables whose ends are connected elsewhere; two whose far ends are exchanged are one swap."""
    problems, paired = [], set()
    by_end = {p.a: p for p in wrong} | {p.b: p for p in wrong}
    for p in wrong:
        if p in paired:
            continue
        got = peer.get(p.a)
        far = got[0] if got else None  # where p's A end is cabled
        other = by_end.get(far) if far is not None else None
        # Swap: A planned to B, C planned to D; seen A-D and C-B (or A-C and B-D).
        if far is not None and other is not None and other is not p and other not in paired:
            crossed = {peer.get(other.a, (None,))[0], peer.get(other.b, (None,))[0]}
            if {p.a, p.b} & crossed:
                paired |= {p, other}
                found = f"{p.a} <-> {far}, " + ", ".join(
                    f"{end} <-> {peer[end][0]}" for end in (p.b, other.a, other.b) if end in peer and end != far
                )
                problems.append(
                    Problem(
                        K.SWAPPED,
                        _key(K.SWAPPED, p.a, p.b, other.a, other.b),
                        str(p.a),
                        str(p.b),
                        expected=f"{p.a} <-> {p.b}, {other.a} <-> {other.b}",
                        found=found,
                        evidence={"also": [str(other.a), str(other.b)]},
                    )
                )
                continue
        found = "; ".join(f"{end} <-> {peer[end][0]}" for end in (p.a, p.b) if end in peer)
        problems.append(
            Problem(
                K.MISWIRED,
                _key(K.MISWIRED, p.a, p.b),
                str(p.a),
                str(p.b),
                expected=f"{p.a} <-> {p.b}",
                found=found,
                evidence={"also": sorted({str(peer[end][0]) for end in (p.a, p.b) if end in peer})},
            )
        )
    return problems


def _unplanned(seen: Seen, planned_peer: Mapping[Port, Port], plan_devices: set[str]) -> list[Problem]:
    problems = []
    unknown = sorted(seen.devices - plan_devices)
    for name in unknown:
        problems.append(
            Problem(
                K.UNKNOWN_DEVICE,
                _key(K.UNKNOWN_DEVICE, name),
                name,
                expected="a device of the cabling plan",
                found=f"{name!r} on the fabric",
            )
        )
    unknown_set = set(unknown)
    for link in seen.links:
        if link.a in planned_peer or link.b in planned_peer:
            continue  # explained by a planned cable (correct, miswired or swapped)
        if link.a.device in unknown_set or link.b.device in unknown_set:
            continue  # reported with its unknown device
        problems.append(
            Problem(
                K.UNEXPECTED,
                _key(K.UNEXPECTED, link.a, link.b),
                str(link.a),
                str(link.b),
                expected="no cable on these ports",
                found=f"{link.a} <-> {link.b}",
            )
        )
    return problems


# --- Counters and flaps ----------------------------------------------------------------------

# Limits on a port's counter increase between two looks, per hour (defaults after the
# practice in shared/reference/domain-facts.md 3.6: NVSentinel's NIC monitor and IBTA's BER
# rule of thumb): a counter rising faster than this is a discrepancy; 0 means any increase.
COUNTER_LIMITS_PER_HOUR: dict[str, float] = {
    "symbol_error": 120.0,
    "link_error_recovery": 5.0 * 60,
    "port_rcv_errors": 10.0 * 3600,
    "port_rcv_remote_physical_errors": 10.0 * 3600,
    "port_xmit_discards": 100.0 * 3600,
    "excessive_buffer_overrun_errors": 0.0,
    "local_link_integrity_errors": 0.0,
}
FLAP_COUNTER = "link_downed"
FLAP_LIMIT = 3  # flaps of one port within the window (gpud: 3 in 12 h)
FLAP_WINDOW_HOURS = 12


def counter_deltas(previous: Mapping[str, int] | None, current: Mapping[str, int]) -> dict[str, int]:
    """Increase of each counter since ``previous``; a counter lower than before was reset
    (port reset, perfquery -R, reboot), so its increase is its new value."""
    if previous is None:
        return {}
    return {
        name: value - previous[name] if name in previous and value >= previous[name] else value
        for name, value in current.items()
    }


def counter_problems(
    port: Port,
    counters: Mapping[str, int],
    deltas: Mapping[str, int] | None,
    hours: float | None,
    limits: Mapping[str, float] = COUNTER_LIMITS_PER_HOUR,
) -> Problem | None:
    """A port whose error counters rise faster than their limits. Without an earlier look, the
    counters' own values count as an hour's worth (they have risen at least that much)."""
    rising = deltas if deltas is not None else counters
    span = hours if deltas is not None and hours else 1.0
    over = {}
    for name, limit in limits.items():
        increase = rising.get(name, 0)
        if increase > 0 and increase / span > limit:
            over[name] = increase
    if not over:
        return None
    found = ", ".join(
        f"{name} +{n}" + (f" in {span:.1f} h" if deltas is not None else "") for name, n in sorted(over.items())
    )
    return Problem(
        K.COUNTER_ERRORS,
        _key(K.COUNTER_ERRORS, port),
        str(port),
        expected="error counters within limits",
        found=found,
        evidence={"increase": over, "counters": dict(counters), "hours": span},
    )


def flap_problem(
    port: Port, flaps: int, window_hours: int = FLAP_WINDOW_HOURS, limit: int = FLAP_LIMIT
) -> Problem | None:
    if flaps < limit:
        return None
    return Problem(
        K.FLAPPING,
        _key(K.FLAPPING, port),
        str(port),
        expected=f"fewer than {limit} flaps in {window_hours} h",
        found=f"{flaps} link-down events in {window_hours} h",
        evidence={"flaps": flaps},
    )
