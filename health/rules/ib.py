"""InfiniBand rules: port state, rate, error counters, link flaps (domain-facts.md §3.6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..choices import RecommendedAction as A
from ..choices import Severity as S
from .base import (
    CONFIRM_LINK,
    Condition,
    RuleConfig,
    Screen,
    clear,
    counter_delta,
    elapsed_seconds,
    fire,
    hold,
    node_rule,
    non_negative,
    rises,
    screen,
)
from .windows import record_events


def port_subject(port: Any) -> str:
    return f"{port.device}/{port.port}"


@node_rule(
    "ib_port_down",
    severity=S.DEGRADED,
    recommended_action=A.INSPECT,
    clear_after_seconds=300,
    params={"confirm_seconds": CONFIRM_LINK},
)
def ib_port_down(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """A port not ACTIVE or not LinkUp ("Polling" means the cable or switch is gone). The clear
    delay keeps a flapping port to one alert."""
    for port in ctx.report.ib_ports:
        subject = port_subject(port)
        if not port.state and not port.phys_state:
            yield hold(subject=subject)
        elif port.state.upper() != "ACTIVE" or port.phys_state.lower() != "linkup":
            yield fire(
                f"IB port {subject} is {port.state or '?'} / {port.phys_state or '?'}",
                subject=subject,
                evidence={"state": port.state, "phys_state": port.phys_state},
            )
        else:
            yield clear(subject=subject)


@node_rule("ib_rate_degraded", severity=S.DEGRADED, recommended_action=A.INSPECT, clear_after_seconds=300)
def ib_rate_degraded(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """An active port below the hardware profile's HCA rate (``threshold`` Gb/s overrides it)."""
    expected = cfg.threshold or cfg.param("profile_hca_rate_gbps")
    for port in ctx.report.ib_ports:
        subject = port_subject(port)
        if not expected or port.rate_gbps is None or port.state.upper() != "ACTIVE":
            yield hold(subject=subject)
        elif port.rate_gbps < expected:
            yield fire(
                f"IB port {subject} at {port.rate_gbps:g} Gb/s, expected {expected:g}",
                subject=subject,
                evidence={"rate_gbps": port.rate_gbps, "expected_gbps": expected},
            )
        else:
            yield clear(subject=subject)


# counter -> (limit, per seconds); "delta" limits fire on any increase above the limit.
IB_ERROR_LIMITS = {
    "symbol_error": [10, 1],
    "port_rcv_errors": [10, 1],
    "link_error_recovery": [5, 60],
    "excessive_buffer_overrun_errors": [0, 0],
    "local_link_integrity_errors": [0, 0],
}


def _breaches(
    limits: dict[str, list[float]], counters: dict[str, int], previous: dict[str, int], seconds: float
) -> tuple[dict[str, Any], bool]:
    """Counters over their limit, and whether every counter could be judged."""
    breaches, known = {}, True
    for name, (limit, per) in limits.items():
        delta = counter_delta(counters.get(name), previous.get(name))
        if delta is None:
            known = known and name not in counters
            continue
        value = delta / seconds * per if per else delta
        if value > limit:
            breaches[name] = {"increase": delta, "value": round(value, 3), "limit": limit, "per_seconds": per or None}
    return breaches, known


@node_rule(
    "ib_errors_rising",
    severity=S.WARNING,
    recommended_action=A.INSPECT,
    clear_after_seconds=900,
    params={"limits": IB_ERROR_LIMITS},
)
def ib_errors_rising(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """Port error counters rising faster than their limits (NVSentinel defaults: symbol errors and
    receive errors > 10/s, link error recovery > 5/min, buffer overrun or link integrity any)."""
    seconds = elapsed_seconds(ctx.report.collected_at, ctx.previous_report_at)
    for port in ctx.report.ib_ports:
        subject = port_subject(port)
        previous = ctx.previous_ib_ports.get((port.device, port.port))
        if seconds is None or previous is None:
            yield hold(subject=subject)
            continue
        breaches, known = _breaches(
            cfg.param("limits", IB_ERROR_LIMITS), port.counters, previous.get("counters") or {}, seconds
        )
        if breaches:
            yield fire(
                f"IB port {subject} errors rising: {', '.join(sorted(breaches))}",
                subject=subject,
                evidence={"counters": breaches, "seconds": seconds},
            )
        else:
            yield clear(subject=subject) if known else hold(subject=subject)


@node_rule(
    "ib_link_flaps",
    severity=S.DEGRADED,
    recommended_action=A.INSPECT,
    count=3,
    window_seconds=12 * 3600,
    clear_after_seconds=12 * 3600,
)
def ib_link_flaps(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """``count`` link-down events (link_downed increments) within ``window_seconds`` on one port
    (gpud: 3 in 12 h). Clears only after a full window without a flap (``clear_after_seconds``)."""
    window, needed = cfg.window_seconds or 43200, cfg.count or 3
    now = ctx.report.collected_at
    for port in ctx.report.ib_ports:
        subject = port_subject(port)
        previous = ctx.previous_ib_ports.get((port.device, port.port))
        delta = counter_delta(port.counters.get("link_downed"), (previous or {}).get("counters", {}).get("link_downed"))
        if delta is None:
            yield hold(subject=subject)
        elif delta == 0:
            yield clear(subject=subject)
        else:
            flaps = record_events(ctx.node_id, "ib_link_flaps", subject, [now] * min(delta, needed), window)
            if flaps >= needed:
                yield fire(
                    f"IB port {subject} flapped {flaps} times within {window // 3600} h",
                    subject=subject,
                    evidence={
                        "flaps_in_window": flaps,
                        "count": needed,
                        "window_seconds": window,
                        "link_downed": port.counters.get("link_downed"),
                    },
                )
            else:
                yield hold(subject=subject)


# --- Screens: whether each rule above may fire or write on a report (base.screen).


@screen("ib_port_down")
def _ib_port_down_screen(cfg: RuleConfig) -> Screen:
    def may_fire(ctx: Any, gpus: Any) -> bool:
        for port in ctx.report.ib_ports:
            state, phys = port.state, port.phys_state
            if state == "ACTIVE" and phys == "LinkUp":
                continue  # as the kernel spells a healthy port: skip the case folding
            if (state or phys) and (state.upper() != "ACTIVE" or phys.lower() != "linkup"):
                return True
        return False

    return may_fire


@screen("ib_rate_degraded")
def _ib_rate_degraded_screen(cfg: RuleConfig) -> Screen | None:
    expected = cfg.threshold or cfg.param("profile_hca_rate_gbps")
    if not expected:
        return lambda ctx, gpus: False  # nothing to compare with: the rule holds every port
    if not isinstance(expected, int | float):
        return None

    def may_fire(ctx: Any, gpus: Any) -> bool:
        for port in ctx.report.ib_ports:
            rate = port.rate_gbps
            if rate is not None and rate < expected and port.state.upper() == "ACTIVE":
                return True
        return False

    return may_fire


@screen("ib_errors_rising")
def _ib_errors_rising_screen(cfg: RuleConfig) -> Screen | None:
    limits = cfg.param("limits", IB_ERROR_LIMITS)
    try:
        names = tuple(name for name, (limit, per) in limits.items() if non_negative(limit) and non_negative(per))
    except (AttributeError, TypeError, ValueError):
        return None
    if len(names) != len(limits):
        return None  # a limit below zero is breached by an unchanged counter

    def may_fire(ctx: Any, gpus: Any) -> bool:
        if ctx.previous_report_at is None:
            return False
        for port in ctx.report.ib_ports:
            previous = ctx.previous_ib_ports.get((port.device, port.port))
            if previous is None:
                continue
            counters, before = port.counters, previous.get("counters") or {}
            if counters == before:
                continue  # the steady state: nothing moved
            if any(rises(counters.get(name), before.get(name)) for name in names):
                return True
        return False

    return may_fire


@screen("ib_link_flaps")
def _ib_link_flaps_screen(cfg: RuleConfig) -> Screen:
    def may_write(ctx: Any, gpus: Any) -> bool:
        for port in ctx.report.ib_ports:
            previous = ctx.previous_ib_ports.get((port.device, port.port))
            # The rule's own lookup, so that a malformed previous row raises here as it does there.
            before = (previous or {}).get("counters", {})
            if port.counters != before and rises(port.counters.get("link_downed"), before.get("link_downed")):
                return True
        return False

    return may_write
