"""The fleet auditor's one verb: ``run_audit`` compares what Nodewarden believes with the world.

It runs every invariant of ``audit.invariants`` (each bounded: scheduler and BMC reads per run and
in time, rows read per check), records an ``AuditRun`` with the counts per invariant and the
breaches, and keeps one warning alert per (node, invariant) on the node: a breach raises a
finding with rule ``audit.<invariant>`` and its evidence (``health.services.raise_finding``);
a breach gone (the node checked and found right, or out of the invariant's scope) clears it.

Warning, not degraded: an audit finding says the books and the world disagree, not that the
hardware is bad. At warning the default policies only watch, so the auditor never makes the
remediation act on a node on its own account: it reports the loop, it does not become part of it.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from health.choices import AlertState, Severity
from health.models import Alert
from health.services import clear_condition, raise_finding
from nodes.models import Node
from nodes.services import Actor

from . import invariants as C
from .choices import Invariant, rule_for
from .models import AuditRun

log = logging.getLogger(__name__)
ACTOR = Actor.system("audit")
KEEP_BREACHES = 500  # breaches kept in full on the run (all are counted)


def context(now: datetime | None = None, cursors: dict[str, int] | None = None) -> C.AuditContext:
    """The checks' context from the settings (docs/auditor.md lists them)."""
    severity = Severity(settings.NODEWARDEN_AUDIT_SEVERITY)
    return C.AuditContext(
        now=now or timezone.now(),
        grace=timedelta(seconds=settings.NODEWARDEN_AUDIT_GRACE_SECONDS),
        severity=severity,
        draining_timeout=timedelta(hours=settings.NODEWARDEN_AUDIT_DRAINING_HOURS),
        scheduler_nodes=settings.NODEWARDEN_AUDIT_SCHEDULER_NODES,
        scheduler_seconds=settings.NODEWARDEN_AUDIT_SCHEDULER_SECONDS,
        bmc_reads=settings.NODEWARDEN_AUDIT_BMC_READS,
        bmc_seconds=settings.NODEWARDEN_AUDIT_BMC_SECONDS,
        bmc_timeout=settings.NODEWARDEN_AUDIT_BMC_TIMEOUT,
        cursors=dict(cursors or {}),
        # time_machine moves time.monotonic in the simulator; the bounds are in real seconds.
        clock=time.perf_counter,
    )


def run_audit(*, source: str = "", now: datetime | None = None, findings: bool = True) -> AuditRun:
    """Run every invariant, record the run, raise and clear the audit findings (module docstring).

    ``findings=False`` only records (``manage.py audit_fleet --dry-run``). A check that raises is
    recorded as the run's error and counts as incomplete (none of its alerts is cleared)."""
    previous = AuditRun.objects.filter(finished__isnull=False).values_list("cursors", flat=True).first()
    ctx = context(now, previous)
    run = AuditRun.objects.create(started=ctx.now, source=source[:40], params=_params(ctx))
    outcomes: list[C.Outcome] = []
    errors: list[str] = []
    for check in C.CHECKS:
        try:
            outcomes.extend(check(ctx))
        except Exception as exc:  # one broken check must not hide the others' breaches
            log.exception("audit: %s failed", check.__name__)
            errors.append(f"{check.__name__}: {exc!r}")
    breaches = [b for o in outcomes for b in o.breaches]
    if findings:
        run.raised, run.cleared = _raise(breaches), _clear(outcomes)
    run.counts = {str(o.invariant): o.counts() for o in outcomes}
    run.breaches = [b.as_dict() for b in breaches[:KEEP_BREACHES]]
    run.breach_total, run.cursors = len(breaches), ctx.cursors
    run.error, run.finished = "\n".join(errors), timezone.now()
    run.save()
    if breaches:
        log.warning("audit: %d breaches %s", len(breaches), run.breaches_by_invariant())
    return run


def _params(ctx: C.AuditContext) -> dict[str, Any]:
    return {
        "grace_seconds": ctx.grace.total_seconds(),
        "severity": ctx.severity,
        "draining_hours": ctx.draining_timeout.total_seconds() / 3600,
        "scheduler_nodes": ctx.scheduler_nodes,
        "scheduler_seconds": ctx.scheduler_seconds,
        "bmc_reads": ctx.bmc_reads,
        "bmc_seconds": ctx.bmc_seconds,
        "bmc_timeout": ctx.bmc_timeout,
    }


def _raise(breaches: list[C.Breach]) -> int:
    """One finding per (node, invariant): a new alert, or a refresh of the one already firing."""
    grouped: dict[tuple[int, str], list[C.Breach]] = defaultdict(list)
    for breach in breaches:
        grouped[(breach.node_id, breach.invariant)].append(breach)
    raised = 0
    for (node_id, invariant), found in grouped.items():
        first = found[0]
        summary = (
            f"Audit: {Invariant(invariant).label.lower()}: Nodewarden believes {first.believed}; "
            f"the world says {first.world}"
        )
        evidence = {
            "invariant": invariant,
            "believed": first.believed,
            "world": first.world,
            "evidence": [b.evidence for b in found[:10]],
            "breaches": len(found),
        }
        try:
            finding = raise_finding(
                node_id,
                rule=rule_for(invariant),
                severity=Severity.WARNING,
                summary=summary[:500],
                evidence=evidence,
                source="audit",
                actor=ACTOR,
            )
        except Node.DoesNotExist:
            continue  # deleted since it was checked
        raised += finding is not None
    return raised


def _clear(outcomes: list[C.Outcome]) -> int:
    """Resolve the audit alerts whose breach is gone: the node was checked and found right, or
    is out of the invariant's scope; never one whose answer was unknown or not reached."""
    cleared = 0
    for outcome in outcomes:
        if not outcome.complete:
            continue
        rule = rule_for(outcome.invariant)
        keep = outcome.unsure | {b.node_id for b in outcome.breaches}
        # Firing audit alerts are few (one per node and invariant at most): read them all.
        for node_id in Alert.objects.filter(state=AlertState.FIRING, rule=rule).values_list("node_id", flat=True):
            if node_id not in keep and clear_condition(node_id, rule=rule, reason="audit: the breach is gone"):
                cleared += 1
    return cleared


def last_run() -> AuditRun | None:
    """The latest finished run (the page and /metrics read it)."""
    return AuditRun.objects.filter(finished__isnull=False).first()
