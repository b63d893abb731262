"""Active checks: the only road to requesting, handing out, finishing and cancelling them.

An operator requests a check (``request_check``); the node's agent polls, and when
the node is idle takes the queued runs (``claim_checks_for_agent``), runs the tools
and posts each outcome (``record_check_result``). A claimed run with no result by its
deadline becomes an error (``expire_stale_checks``, run by ``checks.tasks``).
Every verb writes its history row in the same transaction as the change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from nodes.choices import EventKind, NodeState
from nodes.models import OPERATE, Node
from nodes.services import Actor, clean_reason, record_event

from .choices import ACTIVE_KINDS, AGENT_OUTCOMES, RunKind, RunStatus
from .models import OUTPUT_MAX_BYTES, CheckRun
from .specs import normalise_params, run_timeout

# A NodeHealth row older than three report intervals (30 s) says nothing about now.
IDLE_REPORT_MAX_AGE = timedelta(seconds=90)
# Customer-facing states that mean a job may still be on the GPUs, whatever the counters say.
BUSY_STATES = (NodeState.DRAIN_PENDING, NodeState.DRAINING)
# States where an active check makes no sense: no agent yet, or the node has left for good.
NO_CHECK_STATES = (NodeState.ENROLLED, NodeState.RMA, NodeState.DECOMMISSIONED)
EXPIRE_BATCH = 500


class CheckConflict(Exception):
    """The request contradicts the run's or the node's current state (the API answers 409)."""


class CheckForbidden(PermissionError):
    """The acting user may not request or cancel checks (the API answers 403)."""


@dataclass(frozen=True)
class Claim:
    """What the agent's poll gets: whether the node counts as idle, why, and the runs it now owns."""

    idle: bool
    reason: str
    runs: list[CheckRun] = field(default_factory=list)


def node_is_idle(node: Node, now: datetime | None = None) -> tuple[bool, str]:
    """Whether active checks may run on the node now, and why (or why not).

    The node is idle when all of these hold:
    - it is not in drain_pending or draining (a customer job is still running there);
    - its latest report (``telemetry.NodeHealth``) counts 0 GPU compute processes;
    - that report is fresh: collected and received within ``IDLE_REPORT_MAX_AGE``.
    Anything unknown (no report, no process count, a stale report) counts as busy:
    a stress test on top of a customer's job would be far worse than a late check.
    """
    from telemetry.models import NodeHealth  # telemetry depends on nodes, not on checks

    now = now or timezone.now()
    if node.state in BUSY_STATES:
        return False, f"Node is {node.get_state_display().lower()}: a job may still be running."
    health = NodeHealth.objects.filter(node_id=node.pk).first()
    if health is None:
        return False, "No report from the node agent yet."
    age = now - min(health.last_report_at, health.last_received_at)
    if age > IDLE_REPORT_MAX_AGE:
        return False, f"Latest report is {int(age.total_seconds())} s old (limit {IDLE_REPORT_MAX_AGE.seconds} s)."
    if health.gpu_compute_processes is None:
        return False, "Latest report does not say how many GPU processes are running."
    if health.gpu_compute_processes > 0:
        return False, f"{health.gpu_compute_processes} GPU compute process(es) running."
    return True, "No GPU compute processes in a fresh report."


def request_check(node_id: int, kind: str, *, params: Any = None, actor: Actor, reason: str) -> CheckRun:
    """Queue an active check on a node; the agent runs it the next time the node is idle.

    Raises ``Node.DoesNotExist``, ``CheckForbidden``, ``ReasonRequired``, ``ValidationError``
    (bad kind or params, every problem named) or ``CheckConflict`` (the node's state
    rules checks out, or the same kind is already queued or running there).
    """
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise CheckForbidden(f"{actor.name} may not request checks on nodes.")
    reason = clean_reason(reason)
    with transaction.atomic():
        node = Node.objects.select_for_update().select_related("hardware_profile").get(pk=node_id)
        normalised = normalise_params(kind, params, node)
        if node.state in NO_CHECK_STATES:
            raise CheckConflict(f"Cannot run checks on a node in state {node.get_state_display()!r}.")
        try:
            with transaction.atomic():  # a savepoint, so the conflict leaves the outer block usable
                run = CheckRun.objects.create(node=node, kind=kind, params=normalised, requested_by=actor.user,
                                              requested_reason=reason)
        except IntegrityError as exc:  # the partial unique constraint: one open run per kind
            raise CheckConflict(f"A {RunKind(kind).label} is already queued or running on {node.hostname}.") from exc
        record_event(node.pk, EventKind.ACTION, actor=actor, reason=reason,
                     details={"check_requested": kind, "check_run": run.pk, "params": normalised})
    return run


def cancel_check(run_id: int, *, actor: Actor, reason: str) -> CheckRun:
    """Withdraw a queued check. A claimed one is already on the node: it finishes or expires."""
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise CheckForbidden(f"{actor.name} may not cancel checks.")
    reason = clean_reason(reason)
    with transaction.atomic():
        run = CheckRun.objects.select_for_update().get(pk=run_id, kind__in=ACTIVE_KINDS)
        changed = CheckRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            status=RunStatus.CANCELLED, finished=timezone.now(), summary=f"Cancelled: {reason}"[:300])
        if not changed:
            raise CheckConflict(f"Only a queued check can be cancelled; this one is {run.get_status_display()}.")
        record_event(run.node_id, EventKind.ACTION, actor=actor, reason=reason,
                     details={"check_cancelled": run.kind, "check_run": run.pk})
    run.refresh_from_db()
    return run


def claim_checks_for_agent(node_id: int, now: datetime | None = None) -> Claim:
    """Hand the node's queued checks to its agent, but only while the node is idle.

    Each run is taken with a compare-and-swap ``UPDATE ... WHERE status = 'queued'``;
    only the rows this call changed are handed out, so two overlapping polls (a retry,
    a restarted agent) never get the same run.
    """
    now = now or timezone.now()
    node = Node.objects.only("id", "state").get(pk=node_id)
    idle, reason = node_is_idle(node, now)
    if not idle:
        return Claim(False, reason)
    queued = CheckRun.objects.filter(node_id=node_id, kind__in=ACTIVE_KINDS, status=RunStatus.QUEUED)
    claimed = []
    for run in queued.only("id", "kind", "params").order_by("created", "id"):
        deadline = now + run_timeout(run.kind, run.params)
        if CheckRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
                status=RunStatus.RUNNING, claimed_at=now, deadline=deadline):
            run.status, run.claimed_at, run.deadline = RunStatus.RUNNING, now, deadline
            claimed.append(run)
    return Claim(True, reason, claimed)


@dataclass(frozen=True)
class CheckResult:
    """What the agent reports for one run; validated by the API serializer."""

    status: str
    summary: str
    figures: dict[str, float]
    output: str
    started_at: datetime
    finished_at: datetime

    def matches(self, run: CheckRun) -> bool:
        return (run.status, run.summary, run.figures, run.output, run.started, run.finished) == (
            self.status, self.summary[:300], self.figures, _tail(self.output), self.started_at, self.finished_at)


def record_check_result(run_id: int, node_id: int, *, result: CheckResult) -> tuple[CheckRun, bool]:
    """Record the agent's outcome of a claimed run; returns the run and whether it changed.

    Only the owning node's agent may report (another node's run is ``CheckRun.DoesNotExist``,
    so the API answers 404 and leaks nothing). A repeat of the recorded result is a no-op
    (the agent retries on timeouts); a different one is a ``CheckConflict``. A run the
    sweep expired still takes its first real result: a late failure must not be lost.
    A failed check raises a degraded ``active_check`` finding; passed, not_available (the
    tool is missing, not the hardware) and error outcomes are recorded only.
    """
    if result.status not in AGENT_OUTCOMES:
        raise ValidationError({"status": [f"Must be one of {', '.join(AGENT_OUTCOMES)}."]})
    with transaction.atomic():
        # Lock the run only, not the node joined for its hostname.
        run = (CheckRun.objects.select_for_update(of=("self",)).select_related("node")
               .get(pk=run_id, node_id=node_id, kind__in=ACTIVE_KINDS))
        if result.matches(run):
            return run, False
        expired = run.status == RunStatus.ERROR and run.details.get("expired")
        if run.status != RunStatus.RUNNING and not expired:
            raise CheckConflict(f"Run {run.pk} is {run.get_status_display()}; a different result was not recorded.")
        _apply_result(run, result, late=bool(expired))
        _record_outcome(run)
    return run, True


def _apply_result(run: CheckRun, result: CheckResult, *, late: bool) -> None:
    run.status, run.summary, run.figures = result.status, result.summary[:300], result.figures
    run.output = _tail(result.output)
    run.started, run.finished = result.started_at, result.finished_at
    run.error = "Result arrived after the deadline." if late else ""
    if late:  # from now on this run holds a real result, which a different one may not replace
        run.details = {**run.details, "expired": False, "late_result": True}
    run.save(update_fields=["status", "summary", "figures", "output", "started", "finished", "error", "details"])


def _tail(output: str) -> str:
    """At most OUTPUT_MAX_BYTES of UTF-8, keeping the end (where tools print their verdict)."""
    data = output.encode()
    return output if len(data) <= OUTPUT_MAX_BYTES else data[-OUTPUT_MAX_BYTES:].decode(errors="ignore")


def _record_outcome(run: CheckRun) -> None:
    """The history row for a finished run: a finding for a failure, an action otherwise."""
    actor = Actor.system(f"agent:{run.node.hostname}")
    label = RunKind(run.kind).label
    if run.status == RunStatus.FAILED:
        from health.choices import Severity
        from health.services import raise_finding

        # every_event: each failed run is a finding of its own, not a refresh of the open alert.
        raise_finding(run.node_id, rule="active_check", severity=Severity.DEGRADED, subject=run.kind,
                      summary=f"{label} failed: {run.summary}" if run.summary else f"{label} failed",
                      evidence={"check_run": run.pk, "figures": run.figures}, source="check",
                      observed_at=run.finished, actor=actor, every_event=True)
        return
    record_event(run.node_id, EventKind.ACTION, actor=actor,
                 reason=f"{label} {run.get_status_display().lower()}" + (f": {run.summary}" if run.summary else ""),
                 details={"check_run": run.pk, "check_status": run.status, "figures": run.figures})


def expire_stale_checks(now: datetime | None = None) -> int:
    """Turn claimed runs past their deadline into errors; returns how many (at most a batch)."""
    now = now or timezone.now()
    stale = CheckRun.objects.filter(status=RunStatus.RUNNING, deadline__lt=now, kind__in=ACTIVE_KINDS)
    expired = 0
    for run in stale.select_related("node").order_by("deadline")[:EXPIRE_BATCH]:
        with transaction.atomic():
            # Compare-and-swap: a result that lands meanwhile wins and this row is left alone.
            if not CheckRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, deadline__lt=now).update(
                    status=RunStatus.ERROR, finished=now, details={**run.details, "expired": True},
                    error=f"No result from the node agent by the deadline ({run.deadline.isoformat()})."):
                continue
            record_event(run.node_id, EventKind.ACTION, actor=Actor.system("checks"),
                         reason=f"{RunKind(run.kind).label} expired: no result from the node agent in time",
                         details={"check_run": run.pk, "check_status": RunStatus.ERROR})
            expired += 1
    return expired
