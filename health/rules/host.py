"""Host rules: memory EDAC, disks, the workload scheduler's daemon; and the rules not run per report."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..choices import RecommendedAction as A
from ..choices import Severity as S
from .base import (
    EXTERNAL,
    TASK,
    Condition,
    RuleConfig,
    Screen,
    clear,
    counter_delta,
    declare,
    fire,
    hold,
    node_rule,
    non_negative,
    rises,
    screen,
)


@node_rule(
    "host_edac_uncorrected", severity=S.DEGRADED, recommended_action=A.INSPECT, threshold=0, clear_after_seconds=3600
)
def host_edac_uncorrected(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """Host memory uncorrectable errors (EDAC ue_count) rising."""
    host, previous = ctx.report.host, ctx.previous_host or {}
    delta = counter_delta(host.edac_uncorrected if host else None, previous.get("edac_uncorrected"))
    if delta is None:
        yield hold()
    elif delta > (cfg.threshold or 0):
        yield fire(
            f"{delta} new uncorrectable host memory errors (EDAC)",
            evidence={"edac_uncorrected": host.edac_uncorrected, "increase": delta},
        )
    else:
        yield clear()


@node_rule("disk_unhealthy", severity=S.WARNING, recommended_action=A.INSPECT)
def disk_unhealthy(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """A disk whose SMART verdict is failing."""
    for disk in ctx.report.host.disks if ctx.report.host else []:
        if disk.healthy is None:
            yield hold(subject=disk.device)
        elif not disk.healthy:
            yield fire(
                f"Disk {disk.device} failing SMART health: {disk.detail}".strip(": "),
                subject=disk.device,
                evidence={"device": disk.device, "detail": disk.detail},
            )
        else:
            yield clear(subject=disk.device)


@node_rule("scheduler_daemon_unresponsive", severity=S.WARNING, recommended_action=A.INSPECT, clear_after_seconds=60)
def scheduler_daemon_unresponsive(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """slurmd or kubelet not answering: the node cannot take work even if its GPUs are fine."""
    scheduler = ctx.report.host.scheduler if ctx.report.host else None
    if scheduler is None or scheduler.kind == "none" or scheduler.responsive is None:
        yield hold()
    elif not scheduler.responsive:
        yield fire(
            f"{scheduler.daemon or scheduler.kind} unresponsive: {scheduler.detail}".strip(": "),
            evidence={"kind": scheduler.kind, "daemon": scheduler.daemon, "detail": scheduler.detail},
        )
    else:
        yield clear()


# --- Screens: whether each rule above may fire on a report (base.screen).


@screen("host_edac_uncorrected")
def _host_edac_uncorrected_screen(cfg: RuleConfig) -> Screen | None:
    if not non_negative(cfg.threshold or 0):
        return None  # a limit below zero fires on an unchanged count

    def may_fire(ctx: Any, gpus: Any) -> bool:
        host = ctx.report.host
        return rises(host.edac_uncorrected if host else None, (ctx.previous_host or {}).get("edac_uncorrected"))

    return may_fire


@screen("disk_unhealthy")
def _disk_unhealthy_screen(cfg: RuleConfig) -> Screen:
    def may_fire(ctx: Any, gpus: Any) -> bool:
        host = ctx.report.host
        return any(disk.healthy is not None and not disk.healthy for disk in (host.disks if host else []))

    return may_fire


@screen("scheduler_daemon_unresponsive")
def _scheduler_daemon_unresponsive_screen(cfg: RuleConfig) -> Screen:
    def may_fire(ctx: Any, gpus: Any) -> bool:
        scheduler = ctx.report.host.scheduler if ctx.report.host else None
        if scheduler is None or scheduler.kind == "none" or scheduler.responsive is None:
            return False
        return not scheduler.responsive

    return may_fire


declare(
    "heartbeat_missing",
    TASK,
    "No report received for ``threshold`` seconds (6 x the 30 s agent interval) from a node that should "
    "report; checked every minute by health.tasks.check_heartbeats, cleared by the next report.",
    severity=S.CATASTROPHIC,
    recommended_action=A.REBOOT,
    threshold=180,
)
declare(
    "alertmanager",
    EXTERNAL,
    "Alerts received from Prometheus Alertmanager (POST /api/ingest/alertmanager/); severity from the alert's labels.",
    severity=S.WARNING,
    recommended_action=A.INSPECT,
)
