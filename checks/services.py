"""Active checks: the only road to requesting, handing out, finishing and cancelling them.

An operator requests a check (``request_check``); the node's agent polls, and when
the node is idle takes the queued runs (``claim_checks_for_agent``), runs the tools
and posts each outcome (``record_check_result``). A claimed run with no result by its
deadline becomes an error (``expire_stale_checks``, run by ``checks.tasks``).
Every verb writes its history row in the same transaction as the change.

A node in production is also held in its workload scheduler while a check runs there
(``schedulers.base.SchedulerAdapter.hold_for_check``: a Slurm drain "nodewarden: active
check ...", a Kubernetes cordon + taint), so no job lands on top of a burn-in; the hold is
given back after the result commits, the run expires or the sweep finds it left over
(``give_back_check_hold``). Runs with ``scheduler_hold`` set are the ones whose hold may
still be in the scheduler.

A held check gives way: when the scheduler wants the node (a pending job could run there,
``SchedulerAdapter.wants_node``, asked by ``preempt_wanted_checks`` every few seconds) or the
node's customer or staff ask for it back (``give_back_node``), the run is preempted
(``preempt_check``: cancelled, ``details["preempted"]``), the hold is given back after the
commit, and the agent, which asks about its running check every few seconds
(``run_is_wanted``), kills the check. Its late result is acknowledged and not recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from health.choices import Severity
from health.services import raise_finding
from nodes.choices import ACTIVE_KINDS, AGENT_OUTCOMES, EventKind, NodeState, RunKind, RunStatus
from nodes.models import OPERATE, OUTPUT_MAX_BYTES, Node, Run
from nodes.scoping import user_tenant_id
from nodes.services import Actor, clean_reason, record_event
from schedulers import base as schedulers  # through the module: tests replace adapter_for
from schedulers.base import CHECK_HOLD, SchedulerError
from telemetry.models import NodeHealth

from .specs import normalise_params, run_timeout
from .workloads import judge

# A NodeHealth row older than three report intervals (30 s) says nothing about now.
IDLE_REPORT_MAX_AGE = timedelta(seconds=90)
# Customer-facing states that mean a job may still be on the GPUs, whatever the counters say.
BUSY_STATES = (NodeState.DRAIN_PENDING, NodeState.DRAINING)
# States where an active check makes no sense: no agent yet, or the node has left for good.
NO_CHECK_STATES = (NodeState.ENROLLED, NodeState.RMA, NodeState.DECOMMISSIONED)
EXPIRE_BATCH = 500
# A check the freshness scheduler asked for that no agent claimed in this long is withdrawn: its node
# has not been idle since (a long customer job), and a request left open would block the node's
# other checks and, for ever, a slot of the cluster's freshness share. It is asked for again when
# the node is idle. Operators' requests wait for as long as they were asked to.
UNCLAIMED_FRESHNESS_MAX_AGE = timedelta(minutes=30)
# The actor of the freshness scheduler's requests (``checks.freshness``), stored on each run it asks
# for (``details["requested_as"]``) so its unclaimed ones are found apart from operators'.
FRESHNESS_ACTOR = "system:checks:freshness"
# Runs one poll may take at once (a node has at most one open run per active kind anyway).
CLAIM_BATCH = 20
# Nodes whose left-over holds one sweep gives back.
RELEASE_BATCH = 100
# pg_try_advisory_lock(HOLD_LOCK_SPACE, node id): taking and giving back one node's hold never overlap.
HOLD_LOCK_SPACE = 0x6E77
# Nodes with a held running check that one preemption sweep asks their scheduler about.
PREEMPT_BATCH = 100
HOLD_LOCK_WAIT = 10.0  # seconds a poll or a release waits for the other (a scheduler call or two)

logger = logging.getLogger(__name__)


class CheckConflict(Exception):
    """The request contradicts the run's or the node's current state (the API answers 409)."""


class CheckForbidden(PermissionError):
    """The acting user may not request or cancel checks (the API answers 403)."""


@dataclass(frozen=True)
class Claim:
    """What the agent's poll gets: whether the node counts as idle, why, and the runs it now owns."""

    idle: bool
    reason: str
    runs: list[Run] = field(default_factory=list)


def node_is_idle(node: Node, now: datetime | None = None) -> tuple[bool, str]:
    """Whether active checks may run on the node now, and why (or why not).

    The node is idle when all of these hold:
    - it is not in drain_pending or draining (a customer job is still running there);
    - its latest report (``telemetry.NodeHealth``) counts 0 GPU compute processes;
    - that report is fresh: collected and received within ``IDLE_REPORT_MAX_AGE``;
    - in production, its workload scheduler has no job allocated there (any state that holds
      an allocation: running, configuring, completing, suspended; a job still loading its data
      shows no GPU process yet). A scheduler that cannot be asked counts as busy.
    Anything unknown (no report, no process count, a stale report) counts as busy:
    a stress test on top of a customer's job would be far worse than a late check.
    Out of production the lifecycle has cordoned the node already; the scheduler is not asked.
    """
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
    if node.state == NodeState.PRODUCTION:
        return _scheduler_idle(node)
    return True, "No GPU compute processes in a fresh report."


def _scheduler_idle(node: Node) -> tuple[bool, str]:
    """Whether the node's workload scheduler has no job allocated on it, and why (or why not)."""
    adapter = schedulers.adapter_for(node.cluster)
    try:
        work = adapter.work_summary(node)
    except SchedulerError as exc:
        return False, f"The workload scheduler could not be asked whether a job is allocated: {exc}"
    if work:
        return False, f"The workload scheduler has work on the node: {work}"
    if adapter.kind == "none":
        return True, "No GPU compute processes in a fresh report."
    return True, f"No GPU compute processes in a fresh report; no job allocated in {adapter.kind}."


def request_check(node_id: int, kind: str, *, params: Any = None, actor: Actor, reason: str) -> Run:
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
                run = Run.objects.create(
                    node=node,
                    kind=kind,
                    params=normalised,
                    requested_by=actor.user,
                    requested_reason=reason,
                    details={"requested_as": actor.name},
                )
        except IntegrityError as exc:  # the partial unique constraint: one open run per kind
            raise CheckConflict(f"A {RunKind(kind).label} is already queued or running on {node.hostname}.") from exc
        record_event(
            node.pk,
            EventKind.ACTION,
            actor=actor,
            reason=reason,
            details={"check_requested": kind, "check_run": run.pk, "params": normalised},
        )
    return run


def cancel_check(run_id: int, *, actor: Actor, reason: str) -> Run:
    """Withdraw a queued check. A claimed one is already on the node: it finishes or expires."""
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise CheckForbidden(f"{actor.name} may not cancel checks.")
    reason = clean_reason(reason)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id, kind__in=ACTIVE_KINDS)
        changed = Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            status=RunStatus.CANCELLED, finished=timezone.now(), summary=f"Cancelled: {reason}"[:300]
        )
        if not changed:
            raise CheckConflict(f"Only a queued check can be cancelled; this one is {run.get_status_display()}.")
        record_event(
            run.node_id,
            EventKind.ACTION,
            actor=actor,
            reason=reason,
            details={"check_cancelled": run.kind, "check_run": run.pk},
        )
    run.refresh_from_db()
    return run


def claim_checks_for_agent(node_id: int, now: datetime | None = None) -> Claim:
    """Hand the node's queued checks to its agent, but only while the node is idle.

    Each run is taken with a compare-and-swap ``UPDATE ... WHERE status = 'queued'``;
    only the rows this call changed are handed out, so two overlapping polls (a retry,
    a restarted agent) never get the same run. A node in production is held in its
    scheduler first (``_claim_held``); no hold, no check.
    """
    now = now or timezone.now()
    node = Node.objects.select_related("cluster").get(pk=node_id)
    idle, reason = node_is_idle(node, now)
    if not idle:
        return Claim(False, reason)
    queued = list(
        Run.objects.filter(node_id=node_id, kind__in=ACTIVE_KINDS, status=RunStatus.QUEUED)
        .only("id", "kind", "params")
        .order_by("created", "id")[:CLAIM_BATCH]
    )
    if not queued:
        return Claim(True, reason)
    if node.state != NodeState.PRODUCTION or not needs_hold(node):
        return Claim(True, reason, _claim(queued, now))  # the lifecycle's cordon keeps work off already
    with _hold_lock(node.pk) as locked:
        if not locked:
            return Claim(False, "The node's scheduler hold is being taken or given back; asking again later.")
        return _claim_held(node, queued, reason, now)


def needs_hold(node: Node) -> bool:
    """Whether a check on this node needs a hold: a workload scheduler could start a job there."""
    return schedulers.adapter_for(node.cluster).kind != "none"


def _claim(queued: list[Run], now: datetime) -> list[Run]:
    claimed = []
    for run in queued:
        deadline = now + run_timeout(run.kind, run.params)
        if Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING, claimed_at=now, deadline=deadline
        ):
            run.status, run.claimed_at, run.deadline = RunStatus.RUNNING, now, deadline
            claimed.append(run)
    return claimed


def _claim_held(node: Node, queued: list[Run], reason: str, now: datetime) -> Claim:
    """Hold the node in its scheduler, make sure no job slipped in meanwhile, then claim.

    Runs under the node's hold lock and outside any transaction (the scheduler calls are not
    undone by a rollback). The runs are marked ``scheduler_hold`` before the hold is taken, so
    a hold whose poll dies half-way is still found and given back by the sweep.
    """
    adapter = schedulers.adapter_for(node.cluster)
    pks = [run.pk for run in queued]
    Run.objects.filter(pk__in=pks, status=RunStatus.QUEUED).update(scheduler_hold=True)
    text = f"{CHECK_HOLD}: {', '.join(sorted({run.kind for run in queued}))} (run {', '.join(map(str, pks))})"
    try:
        ours = adapter.hold_for_check(node, reason=text)
        # The idleness answer is older than the hold: a job may have started in between.
        work = adapter.work_summary(node)
    except SchedulerError as exc:
        _give_back(node, why="the hold could not be taken or checked")
        return Claim(False, f"The node could not be held in its workload scheduler for the check: {exc}")
    if work:
        _give_back(node, why="a job started before the hold")
        return Claim(
            False, f"A job started on the node before it was held for the check ({work}); the hold was given back."
        )
    if not ours:  # another's cordon keeps work off; it is theirs, there is nothing of ours to give back
        Run.objects.filter(pk__in=pks, status=RunStatus.QUEUED).update(scheduler_hold=False)
    claimed = _claim(queued, now)
    if not claimed:  # cancelled meanwhile
        _give_back(node, why="no run left to hand out")
        return Claim(True, reason)
    for run in claimed:
        run.scheduler_hold = ours
        run.details = {
            **run.details,
            "scheduler_hold": {"scheduler": adapter.kind, "reason": text, "ours": ours, "at": now.isoformat()},
        }
        Run.objects.filter(pk=run.pk).update(details=run.details)
    held = (
        f"held in {adapter.kind} ({text})"
        if ours
        else f"kept free of new work in {adapter.kind} by a cordon that is not the check's"
    )
    record_event(
        node.pk,
        EventKind.ACTION,
        actor=Actor.system("checks"),
        reason=f"Node {held} while the agent runs the check",
        details={"check_runs": [run.pk for run in claimed], "scheduler_hold": ours},
    )
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

    def matches(self, run: Run) -> bool:
        return (run.status, run.summary, run.figures, run.output, run.started, run.finished) == (
            self.status,
            self.summary[:300],
            self.figures,
            _tail(self.output),
            self.started_at,
            self.finished_at,
        )


def record_check_result(run_id: int, node_id: int, *, result: CheckResult) -> tuple[Run, bool]:
    """Record the agent's outcome of a claimed run; returns the run and whether it changed.

    Only the owning node's agent may report (another node's run is ``Run.DoesNotExist``,
    so the API answers 404 and leaks nothing). A repeat of the recorded result is a no-op
    (the agent retries on timeouts); a different one is a ``CheckConflict``. A run the
    sweep expired still takes its first real result: a late failure must not be lost.
    A failed check raises a degraded ``active_check`` finding; passed, not_available (the
    tool is missing, not the hardware) and error outcomes are recorded only. A training-step
    run is judged here against the profile's expected figures (``checks.workloads.judge``).
    """
    if result.status not in AGENT_OUTCOMES:
        raise ValidationError({"status": [f"Must be one of {', '.join(AGENT_OUTCOMES)}."]})
    with transaction.atomic():
        # Lock the run only, not the node joined for its hostname.
        run = (
            Run.objects.select_for_update(of=("self",))
            .select_related("node__hardware_profile")
            .get(pk=run_id, node_id=node_id, kind__in=ACTIVE_KINDS)
        )
        if run.details.get("preempted"):
            # A preempted run's late result is acknowledged (the agent drops it) but never recorded:
            # the check was killed part-way, its verdict says nothing about the hardware.
            return run, False
        if run.kind == RunKind.TRAINING_STEP:
            # Before the comparison: a repeated post is judged the same and matches the verdict stored.
            result = judge(run.node, str(run.params.get("workload", "")), result)
        if result.matches(run):
            return run, False
        expired = run.status == RunStatus.ERROR and run.details.get("expired")
        if run.status != RunStatus.RUNNING and not expired:
            raise CheckConflict(f"Run {run.pk} is {run.get_status_display()}; a different result was not recorded.")
        _apply_result(run, result, late=bool(expired))
        _record_outcome(run)
        if run.scheduler_hold:
            # After the commit: a scheduler call is not undone by a rollback, and must see the run finished.
            transaction.on_commit(lambda: give_back_check_hold(run.node_id))
    return run, True


def _apply_result(run: Run, result: CheckResult, *, late: bool) -> None:
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


def _record_outcome(run: Run) -> None:
    """The history row for a finished run: a finding for a failure, an action otherwise."""
    actor = Actor.system(f"agent:{run.node.hostname}")
    label = RunKind(run.kind).label
    if run.status == RunStatus.FAILED:
        # every_event: each failed run is a finding of its own, not a refresh of the open alert.
        raise_finding(
            run.node_id,
            rule="active_check",
            severity=Severity.DEGRADED,
            subject=run.kind,
            summary=f"{label} failed: {run.summary}" if run.summary else f"{label} failed",
            evidence={"check_run": run.pk, "figures": run.figures},
            source="check",
            observed_at=run.finished,
            actor=actor,
            every_event=True,
        )
        return
    record_event(
        run.node_id,
        EventKind.ACTION,
        actor=actor,
        reason=f"{label} {run.get_status_display().lower()}" + (f": {run.summary}" if run.summary else ""),
        details={"check_run": run.pk, "check_status": run.status, "figures": run.figures},
    )


def preempt_check(run_id: int, *, actor: Actor, reason: str) -> Run:
    """Abort a running check so the node goes back to its workload now.

    In one transaction: the run becomes cancelled with ``details["preempted"]`` (who, why, when)
    and the node's history says so; the scheduler hold is given back after the commit (through
    ``give_back_check_hold``). The agent learns it from ``run_is_wanted`` and kills the check.
    A preempted run does not count as fresh: the freshness scheduler asks for it again later.
    Raises ``Run.DoesNotExist``, ``ReasonRequired``, ``CheckForbidden`` (neither an operator
    nor the node's tenant) or ``CheckConflict`` (the run is not running).
    """
    reason = clean_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("node").get(pk=run_id, kind__in=ACTIVE_KINDS)
        _require_give_back_permission(actor, run.node)
        details = {**run.details, "preempted": {"by": actor.name, "reason": reason, "at": now.isoformat()}}
        # Compare-and-swap: a result that lands meanwhile wins, and the run is not preempted.
        if not Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
            status=RunStatus.CANCELLED, finished=now, summary=f"Preempted: {reason}"[:300], details=details
        ):
            raise CheckConflict(f"Only a running check can be preempted; this one is {run.get_status_display()}.")
        record_event(
            run.node_id,
            EventKind.ACTION,
            actor=actor,
            reason=f"{RunKind(run.kind).label} preempted: {reason}",
            details={"check_preempted": run.kind, "check_run": run.pk},
        )
        if run.scheduler_hold:
            transaction.on_commit(lambda: give_back_check_hold(run.node_id))
    run.refresh_from_db()
    return run


def _require_give_back_permission(actor: Actor, node: Node) -> None:
    """Operators (staff who may operate nodes) and the node's own tenant may ask for the node back;
    the system may. Staff who may only look (viewers) may not."""
    user = actor.user
    if user is None or user.has_perm(OPERATE):
        return
    if node.tenant_id is None or user_tenant_id(user) != node.tenant_id:
        raise CheckForbidden(f"{actor.name} may not take this node back from its checks.")


def give_back_node(node_id: int, *, actor: Actor, reason: str) -> list[Run]:
    """Preempt every running active check on the node (a customer or staff wants it back now).

    Returns the runs preempted; ``CheckConflict`` when no check runs there.
    """
    node = Node.objects.get(pk=node_id)
    _require_give_back_permission(actor, node)
    reason = clean_reason(reason)
    pks = list(
        Run.objects.filter(node_id=node_id, kind__in=ACTIVE_KINDS, status=RunStatus.RUNNING).values_list(
            "pk", flat=True
        )[:CLAIM_BATCH]
    )
    preempted = []
    for pk in pks:
        try:
            preempted.append(preempt_check(pk, actor=actor, reason=reason))
        except CheckConflict:
            continue  # finished meanwhile: nothing left to abort
    if not preempted:
        raise CheckConflict(f"No active check is running on {node.hostname}.")
    return preempted


def run_is_wanted(run_id: int, node_id: int) -> tuple[Run, bool, str]:
    """What the agent asks while its check runs: the run, whether to carry on, and why not.

    Only the owning node's agent may ask (another node's run is ``Run.DoesNotExist``).
    """
    run = Run.objects.only("id", "node_id", "status", "summary", "details").get(
        pk=run_id, node_id=node_id, kind__in=ACTIVE_KINDS
    )
    if run.status == RunStatus.RUNNING:
        return run, True, "The check is still wanted."
    preempted = run.details.get("preempted")
    if preempted:
        return run, False, f"Preempted by {preempted.get('by')}: {preempted.get('reason')}"
    return run, False, f"The run is {run.get_status_display().lower()}" + (f": {run.summary}" if run.summary else "")


def preempt_wanted_checks() -> int:
    """Preempt the held checks on nodes their scheduler wants back (a pending job could run there).

    Bounded: at most ``PREEMPT_BATCH`` nodes with a held running check are asked about per
    sweep, each scheduler once per node. A scheduler that cannot be asked leaves the check
    running (the hold expires with the run's deadline anyway). Returns how many runs were preempted.
    """
    node_ids = list(
        Run.objects.filter(status=RunStatus.RUNNING, scheduler_hold=True, kind__in=ACTIVE_KINDS)
        .order_by()
        .values_list("node_id", flat=True)
        .distinct()[:PREEMPT_BATCH]
    )
    preempted = 0
    for node in Node.objects.filter(pk__in=node_ids).select_related("cluster").order_by("pk"):
        try:
            why = schedulers.adapter_for(node.cluster).wants_node(node)
        except SchedulerError as exc:
            logger.warning("could not ask whether the scheduler wants %s back: %s", node.hostname, exc)
            continue
        if not why:
            continue
        runs = Run.objects.filter(node=node, status=RunStatus.RUNNING, scheduler_hold=True, kind__in=ACTIVE_KINDS)
        for pk in runs.values_list("pk", flat=True):
            try:
                preempt_check(
                    pk, actor=Actor.system("scheduler"), reason=f"The workload scheduler wants the node: {why}"
                )
            except CheckConflict:
                continue  # its result landed meanwhile; the hold goes back through the result
            preempted += 1
    return preempted


def expire_stale_checks(now: datetime | None = None) -> int:
    """Turn claimed runs past their deadline into errors; returns how many (at most a batch).

    Withdraws the freshness scheduler's requests no agent claimed within
    ``UNCLAIMED_FRESHNESS_MAX_AGE`` first (``withdraw_unclaimed_freshness_checks``). Then gives back every scheduler hold that is no longer needed (``release_left_over_holds``):
    the holds of the runs expired now, and those whose release failed before (scheduler down).
    """
    now = now or timezone.now()
    withdraw_unclaimed_freshness_checks(now)
    stale = Run.objects.filter(status=RunStatus.RUNNING, deadline__lt=now, kind__in=ACTIVE_KINDS)
    expired = 0
    for run in stale.select_related("node").order_by("deadline")[:EXPIRE_BATCH]:
        with transaction.atomic():
            # Compare-and-swap: a result that lands meanwhile wins and this row is left alone.
            if not Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, deadline__lt=now).update(
                status=RunStatus.ERROR,
                finished=now,
                details={**run.details, "expired": True},
                error=f"No result from the node agent by the deadline ({run.deadline and run.deadline.isoformat()}).",
            ):
                continue
            record_event(
                run.node_id,
                EventKind.ACTION,
                actor=Actor.system("checks"),
                reason=f"{RunKind(run.kind).label} expired: no result from the node agent in time",
                details={"check_run": run.pk, "check_status": RunStatus.ERROR},
            )
            expired += 1
    release_left_over_holds()
    return expired


def withdraw_unclaimed_freshness_checks(now: datetime | None = None) -> int:
    """Cancel the freshness scheduler's checks still queued ``UNCLAIMED_FRESHNESS_MAX_AGE`` after
    they were asked for; returns how many (at most a batch).

    Each goes through ``cancel_check`` (compare-and-swap on queued, a history row with the reason):
    a run the agent claims meanwhile is left to finish. An operator's request is never withdrawn.
    """
    now = now or timezone.now()
    cutoff = now - UNCLAIMED_FRESHNESS_MAX_AGE
    minutes = int(UNCLAIMED_FRESHNESS_MAX_AGE.total_seconds() // 60)
    reason = (
        f"Not claimed within {minutes} minutes: the node was not idle (a job on its GPUs or in its scheduler). "
        "The freshness scheduler asks again when the node is idle."
    )
    pks = list(
        Run.objects.filter(
            status=RunStatus.QUEUED,
            kind__in=ACTIVE_KINDS,
            created__lt=cutoff,
            requested_by__isnull=True,
            details__requested_as=FRESHNESS_ACTOR,
        )
        .order_by("created")
        .values_list("pk", flat=True)[:EXPIRE_BATCH]
    )
    withdrawn = 0
    for pk in pks:
        try:
            cancel_check(pk, actor=Actor.system("checks:freshness"), reason=reason)
        except CheckConflict:
            continue  # claimed meanwhile: it runs
        withdrawn += 1
    return withdrawn


def release_left_over_holds() -> int:
    """Give back the holds of nodes where no held run is running any more; returns how many nodes
    were given back (a release that fails keeps the runs' flags, so the next sweep tries again)."""
    nodes = list(
        Run.objects.filter(scheduler_hold=True)
        .exclude(status=RunStatus.RUNNING)
        .order_by()
        .values_list("node_id", flat=True)
        .distinct()[:RELEASE_BATCH]
    )
    return sum(give_back_check_hold(node_id) for node_id in nodes)


def give_back_check_hold(node_id: int) -> bool:
    """Release the node's check hold in its scheduler once no held run is running there.

    Only a node still in production is given back, and only while the scheduler's cordon is
    still the check's (a finding's cordon, an admin's drain, a lifecycle drain stay). True when
    the hold is settled (released, or found not ours to release); False when it is still needed
    or the scheduler could not be reached (the flags stay set for the sweep).
    """
    with _hold_lock(node_id) as locked:
        if not locked:
            return False
        node = Node.objects.select_related("cluster").get(pk=node_id)
        return _give_back(node, why="the check is over")


def _give_back(node: Node, *, why: str) -> bool:
    """Under the node's hold lock: release if no held run still runs, then clear the flags."""
    holders = Run.objects.filter(node_id=node.pk, scheduler_hold=True)
    if holders.filter(status=RunStatus.RUNNING).exists():
        return False  # another check on the node still needs the hold
    pks = list(holders.values_list("pk", flat=True))
    if not pks:
        return True
    adapter = schedulers.adapter_for(node.cluster)
    if node.state != NodeState.PRODUCTION:
        outcome, released = f"left in place: the node is {node.get_state_display().lower()} now", False
    else:
        try:
            released = adapter.release_check_hold(node, reason=f"{CHECK_HOLD} over: {why}")
        except SchedulerError as exc:
            logger.warning("could not give back the check hold on %s (runs %s): %s", node.hostname, pks, exc)
            return False
        outcome = "released" if released else "left in place: the cordon there is no longer the check's"
    Run.objects.filter(pk__in=pks, scheduler_hold=True).exclude(status=RunStatus.RUNNING).update(scheduler_hold=False)
    record_event(
        node.pk,
        EventKind.ACTION,
        actor=Actor.system("checks"),
        reason=f"Scheduler hold for the active check {outcome} ({why})",
        details={"check_runs": pks, "scheduler_hold_released": released, "scheduler": adapter.kind},
    )
    return True


@contextmanager
def _hold_lock(node_id: int, *, wait: float = HOLD_LOCK_WAIT) -> Iterator[bool]:
    """Serialise taking and giving back one node's check hold across processes; yields whether held.

    A PostgreSQL session advisory lock: it spans the scheduler calls without a transaction being
    open around them. On SQLite (one process, tests) there is nothing to serialise against.
    """
    if connection.vendor != "postgresql":
        yield True
        return
    deadline = time.monotonic() + wait
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [HOLD_LOCK_SPACE, node_id])
            locked = bool(cursor.fetchone()[0])
        if locked or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    try:
        yield locked
    finally:
        if locked:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [HOLD_LOCK_SPACE, node_id])
