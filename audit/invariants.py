"""The fleet auditor's invariants: one function per invariant, each comparing what Nodewarden
believes (the database) with what the world says (scheduler, BMC, the clock).

Each function takes an ``AuditContext`` and returns ``Outcome``s: the breaches (node, invariant,
what Nodewarden believes, what the world says, evidence) and counts of what was checked, what
could not be known (a scheduler or BMC that did not answer: never a breach), what was excused
and what the per-run bound left for the next run. The exact rules are in docs/auditor.md;
``audit.services.run_audit`` runs them, records the run and raises the findings.

Every rule leaves a node alone for ``grace`` after its last state change (or a remediation
after its last update): the loop's own periodic work (the reconciler every minute, Day 0
every five) must have had its chance before a disagreement counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from health.choices import SEVERITY_RANK, AlertState
from health.models import Alert
from nodes.choices import DAY1_STAGES, STAGE_KINDS, GpuHealth, NodeState
from nodes.choices import OPEN as OPEN_RUNS
from nodes.models import GPU, Node, Run
from remediation.choices import OPEN, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationStep

from .choices import RULE_PREFIX, Invariant

S = NodeState
# Out of production: Nodewarden has asked the scheduler for a drain or cordon (docs/auditor.md).
MUST_BE_CORDONED = (S.DRAIN_PENDING, S.DRAINING, S.MAINTENANCE, S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA)
POWERED_ON = (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING)  # serving, or finishing a job
# States an open remediation's plan may wait in, by its status (a RUNNING one needs a live step).
PLAN_STATES: dict[str, tuple[str, ...]] = {
    Status.QUEUED: (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING, S.TRIAGE),
    Status.AWAITING_APPROVAL: (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING, S.TRIAGE),
    Status.DRAINING: (S.DRAIN_PENDING, S.DRAINING),
    Status.VALIDATING: DAY1_STAGES,
}
LIST_LIMIT = 5000  # rows one check reads at most (alerts, remediations, transient nodes); past it: incomplete


@dataclass(frozen=True)
class Breach:
    """One invariant that does not hold on one node."""

    invariant: str
    node_id: int
    hostname: str
    believed: str  # what Nodewarden believes
    world: str  # what the world says
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "node": self.node_id,
            "hostname": self.hostname,
            "believed": self.believed,
            "world": self.world,
            "evidence": self.evidence,
        }


@dataclass
class Outcome:
    """One invariant's result in one run. ``unsure``: nodes whose answer is unknown or was not
    reached (their audit alerts are left as they are); ``complete`` False: the check stopped
    short (a bound, an error), so no audit alert of this invariant is cleared this run."""

    invariant: str
    breaches: list[Breach] = field(default_factory=list)
    checked: int = 0
    unknown: int = 0
    excused: int = 0
    not_reached: int = 0
    unsure: set[int] = field(default_factory=set)
    complete: bool = True

    def counts(self) -> dict[str, int]:
        return {
            "checked": self.checked,
            "breaches": len(self.breaches),
            "unknown": self.unknown,
            "excused": self.excused,
            "not_reached": self.not_reached,
        }


@dataclass
class AuditContext:
    """What every check needs: the time, the grace, the thresholds and the bounds (settings)."""

    now: datetime
    grace: timedelta
    severity: str  # NODEWARDEN_AUDIT_SEVERITY: the lowest that counts for unhandled alerts
    draining_timeout: timedelta
    scheduler_nodes: int  # most nodes whose scheduler is asked per run
    scheduler_seconds: float  # and most time spent asking
    bmc_reads: int
    bmc_seconds: float
    bmc_timeout: float
    cursors: dict[str, int] = field(default_factory=dict)  # where the bounded checks go on (node pk)
    clock: Callable[[], float] = time.monotonic

    def settled(self, changed_at: datetime) -> bool:
        return changed_at < self.now - self.grace


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _round_robin(ids: list[int], after: int, limit: int) -> list[int]:
    """Up to ``limit`` of the sorted ``ids``, going on after ``after`` and wrapping round:
    the nodes checked longest ago come first."""
    start = next((i for i, pk in enumerate(ids) if pk > after), 0)
    ordered = ids[start:] + ids[:start]
    return ordered[:limit]


def _bounded_walk(
    ctx: AuditContext,
    key: str,
    ids: list[int],
    nodes: dict[int, Any],
    chunk: list[int],
    seconds: float,
    outcomes: list[Outcome],
) -> Iterator[Any]:
    """The settled nodes of ``chunk`` in order, until ``seconds`` are spent. A node changed within the
    grace is excused and unsure; when the walk ends, the nodes not reached are unsure (and counted on
    the first outcome) and the cursor ``key`` moves to the last node reached, for the next run."""
    deadline = ctx.clock() + seconds
    reached: list[int] = []
    for pk in chunk:
        node = nodes.get(pk)
        if node is None:
            continue  # gone or moved out of scope since the id list was read
        if ctx.clock() > deadline:
            break
        reached.append(pk)
        if not ctx.settled(node.state_changed_at):
            outcomes[0].excused += 1
            for outcome in outcomes:
                outcome.unsure.add(pk)
            continue
        yield node
    done = set(reached)
    left = [pk for pk in ids if pk not in done]
    outcomes[0].not_reached = len(left)
    for outcome in outcomes:
        outcome.unsure.update(left)
    if reached:
        ctx.cursors[key] = reached[-1]


# --- 1. The scheduler agrees ---------------------------------------------------------------------


def scheduler_holds(node_ids: Iterable[int]) -> set[int]:
    """Production nodes held out of the scheduler for an active check: an open run of a non-stage
    kind whose details say ``"scheduler_hold": true`` (absent key: no hold)."""
    return set(
        Run.objects.filter(node_id__in=list(node_ids), status__in=OPEN_RUNS, details__scheduler_hold=True)
        .exclude(kind__in=STAGE_KINDS)
        .values_list("node_id", flat=True)
    )


def scheduler_agreement(ctx: AuditContext) -> list[Outcome]:
    """Out of production (and re-validating): cordoned in the scheduler. Production: not cordoned,
    unless held for an active check; a cordon someone else owns is the "foreign cordon" invariant."""
    from schedulers.base import OWNER, SchedulerError, adapter_for

    agree, foreign = Outcome(Invariant.SCHEDULER_AGREEMENT), Outcome(Invariant.FOREIGN_CORDON)
    scope = (
        Node.objects.filter(
            Q(state__in=(*MUST_BE_CORDONED, S.PRODUCTION)) | Q(state__in=DAY1_STAGES, is_revalidation=True)
        )
        .filter(cluster__isnull=False)
        .exclude(cluster__scheduler_kind="none")
    )
    ids = list(scope.order_by("pk").values_list("pk", flat=True))
    chunk = _round_robin(ids, ctx.cursors.get("scheduler", 0), ctx.scheduler_nodes)
    nodes = scope.filter(pk__in=chunk).select_related("cluster").in_bulk()
    held = scheduler_holds(pk for pk, n in nodes.items() if n.state == S.PRODUCTION)
    adapters: dict[int, Any] = {}
    for node in _bounded_walk(ctx, "scheduler", ids, nodes, chunk, ctx.scheduler_seconds, [agree, foreign]):
        pk = node.pk
        adapter = adapters.setdefault(node.cluster_id, adapter_for(node.cluster))
        try:
            world = adapter.drain_state(node)
        except SchedulerError:  # unreachable or refused: unknown this run, never a breach
            agree.unknown += 1
            agree.unsure.add(pk)
            foreign.unsure.add(pk)
            continue
        out_of_production = node.state != S.PRODUCTION
        disagrees = not world.cordoned if out_of_production else (world.cordoned and pk not in held)
        # The scheduler was asked after the node's state was read: a node that changed state
        # meanwhile (cordoned by a fault a second ago) is judged next run, not against stale belief.
        # Asked only on a disagreement (one query there, none on the common path).
        if (
            disagrees
            and Node.objects.filter(pk=pk).exclude(state=node.state, state_changed_at=node.state_changed_at).exists()
        ):
            agree.unsure.add(pk)
            foreign.unsure.add(pk)
            continue
        evidence = {
            "state": node.state,
            "state_changed_at": _ts(node.state_changed_at),
            "scheduler": adapter.kind,
            "cordoned": world.cordoned,
            "drained": world.drained,
            "running_jobs": world.running_jobs,
            "owner": world.owner,
            "detail": world.detail,
        }
        agree.checked += 1
        if out_of_production:
            if not world.cordoned:
                agree.breaches.append(
                    Breach(
                        Invariant.SCHEDULER_AGREEMENT,
                        pk,
                        node.hostname,
                        f"{node.state}: out of production",
                        "not cordoned",
                        evidence,
                    )
                )
            continue
        foreign.checked += 1
        if not world.cordoned:
            continue
        if pk in held:
            agree.excused += 1
        elif world.owner == OWNER:
            agree.breaches.append(
                Breach(
                    Invariant.SCHEDULER_AGREEMENT, pk, node.hostname, "production", "cordoned by Nodewarden", evidence
                )
            )
        else:
            foreign.breaches.append(
                Breach(
                    Invariant.FOREIGN_CORDON,
                    pk,
                    node.hostname,
                    "production",
                    f"cordoned by {world.owner or 'an unknown owner'}",
                    evidence,
                )
            )
    return [agree, foreign]


# --- 2. No production node with an alert nothing acts on -------------------------------------------


def unhandled_alerts(ctx: AuditContext) -> list[Outcome]:
    """A firing alert at or above the threshold on a production node, older than the grace, that
    the release gate (``health.gates.blocks``) would hold against the node since it (re-)entered
    production, with no open remediation on the node: nothing acts on it. An event last seen
    before the node entered production is the loop's verdict already given (its alert resolves at
    the release, answered by the re-validation pass, or when it goes quiet); a condition the reports evaluate that has not been seen to clear is not.
    Excused: silenced alerts, alerts whose finding an explicit policy only watches, and alerts that
    name a GPU now fenced (the fence is what acts on it: the node serves on without that GPU)."""
    from health.gates import blocks
    from remediation.services import match_policy

    outcome = Outcome(Invariant.UNHANDLED_ALERT)
    rank = SEVERITY_RANK[ctx.severity]
    # node: hostname and state; last_finding: the policy match and the evidence.
    alerts = list(
        Alert.objects.filter(state=AlertState.FIRING, severity_rank__gte=rank, node__state=S.PRODUCTION)
        .exclude(rule__startswith=RULE_PREFIX)
        .select_related("node", "last_finding")
        .order_by("first_seen", "id")[: LIST_LIMIT + 1]
    )
    if len(alerts) > LIST_LIMIT:
        alerts, outcome.complete = alerts[:LIST_LIMIT], False
    node_ids = {a.node_id for a in alerts}
    handled = set(Remediation.objects.filter(node_id__in=node_ids, status__in=OPEN).values_list("node_id", flat=True))
    fenced = set(GPU.objects.filter(node_id__in=node_ids, health=GpuHealth.FENCED).values_list("node_id", "index"))
    last: dict[int, Remediation] = {}
    for rem in (
        Remediation.objects.filter(node_id__in=node_ids - handled)
        .only("id", "node_id", "status", "rung", "created", "finished")
        .order_by("node_id", "-created")
    ):
        last.setdefault(rem.node_id, rem)
    for alert in alerts:
        outcome.checked += 1
        # The release gate's own rule, since the node entered production: an event seen since, or a
        # condition the reports evaluate that has not been seen to clear (health.gates).
        if alert.node_id in handled or not blocks(alert, alert.node.state_changed_at, rank):
            continue
        if not ctx.settled(alert.first_seen) or not ctx.settled(alert.node.state_changed_at):
            outcome.unsure.add(alert.node_id)
            continue
        if alert.silenced_until is not None and alert.silenced_until > ctx.now:
            outcome.excused += 1
            continue
        if alert.gpu_index is not None and (alert.node_id, alert.gpu_index) in fenced:
            outcome.excused += 1
            continue
        policy = match_policy(alert.last_finding) if alert.last_finding is not None else None
        if policy is not None and policy.urgency == Urgency.WATCH:
            outcome.excused += 1
            continue
        previous = last.get(alert.node_id)
        evidence = {
            "alert": alert.pk,
            "rule": alert.rule,
            "severity": alert.severity,
            "summary": alert.summary,
            "gpu_index": alert.gpu_index,
            "first_seen": _ts(alert.first_seen),
            "last_seen": _ts(alert.last_seen),
            "occurrences": alert.occurrences,
            "node_in_production_since": _ts(alert.node.state_changed_at),
            "last_remediation": {
                "id": previous.pk,
                "status": previous.status,
                "rung": previous.rung,
                "created": _ts(previous.created),
                "finished": _ts(previous.finished),
            }
            if previous is not None
            else None,
        }
        outcome.breaches.append(
            Breach(
                Invariant.UNHANDLED_ALERT,
                alert.node_id,
                alert.node.hostname,
                "production, no open remediation",
                f"{alert.severity} alert firing: {alert.summary}",
                evidence,
            )
        )
    return [outcome]


# --- 3. Every open remediation is alive ---------------------------------------------------------------


def live_remediations(ctx: AuditContext, stall: timedelta | None = None) -> list[Outcome]:
    """An open remediation has a running step not past its deadline, or a plan waiting where it
    may wait (``PLAN_STATES``). A running remediation without a step is given the reconciler's
    stall delay before it counts (the reconciler restarts such rungs)."""
    from remediation.reconciler import stall as stall_delay

    outcome = Outcome(Invariant.LIVE_REMEDIATION)
    stall = max(stall if stall is not None else stall_delay(), ctx.grace)
    rems = list(Remediation.objects.filter(status__in=OPEN).select_related("node").order_by("pk")[: LIST_LIMIT + 1])
    if len(rems) > LIST_LIMIT:
        rems, outcome.complete = rems[:LIST_LIMIT], False
    steps: dict[int, RemediationStep] = {}
    for running in RemediationStep.objects.filter(remediation_id__in=[r.pk for r in rems], status=StepStatus.RUNNING):
        steps[running.remediation_id] = running
    for rem in rems:
        outcome.checked += 1
        node, step = rem.node, steps.get(rem.pk)
        if step is not None and step.deadline >= ctx.now - ctx.grace:
            continue  # a live step
        if step is None and rem.status in PLAN_STATES and node.state in PLAN_STATES[rem.status]:
            continue  # a plan waiting where it may
        wait = stall if rem.status == Status.RUNNING and step is None else ctx.grace
        if rem.updated > ctx.now - wait or node.state_changed_at > ctx.now - ctx.grace:
            outcome.unsure.add(node.pk)
            continue
        if step is not None:
            world = f"step {step.rung} running past its deadline {step.deadline:%Y-%m-%d %H:%M} UTC"
        else:
            world = f"no running step, node {node.state}"
        evidence = {
            "remediation": rem.pk,
            "status": rem.status,
            "rung": rem.rung,
            "node_state": node.state,
            "node_state_changed_at": _ts(node.state_changed_at),
            "updated": _ts(rem.updated),
            "queued_reason": rem.queued_reason,
            "step": {"id": step.pk, "rung": step.rung, "started": _ts(step.started), "deadline": _ts(step.deadline)}
            if step is not None
            else None,
            "last_decision": (rem.decisions or [None])[-1],
        }
        outcome.breaches.append(
            Breach(
                Invariant.LIVE_REMEDIATION,
                node.pk,
                node.hostname,
                f"remediation #{rem.pk} {rem.status}",
                world,
                evidence,
            )
        )
    return [outcome]


# --- 4. BMC power matches the node's state -----------------------------------------------------------


def bmc_power(ctx: AuditContext) -> list[Outcome]:
    """Nodes serving (production, drain pending, draining) with a BMC endpoint are powered on:
    at most ``bmc_reads`` reads per run, oldest-checked first, one try each with a short timeout."""
    from bmc.client import read_power_state
    from bmc.drivers.base import BmcError, PowerState

    outcome = Outcome(Invariant.BMC_POWER)
    scope = Node.objects.filter(state__in=POWERED_ON, bmc__isnull=False)
    ids = list(scope.order_by("pk").values_list("pk", flat=True))
    chunk = _round_robin(ids, ctx.cursors.get("bmc", 0), ctx.bmc_reads)
    nodes = scope.filter(pk__in=chunk).select_related("bmc").in_bulk()
    for node in _bounded_walk(ctx, "bmc", ids, nodes, chunk, ctx.bmc_seconds, [outcome]):
        pk = node.pk
        try:
            power = read_power_state(node.bmc, timeout=ctx.bmc_timeout, retry=False)
        except BmcError:
            power = PowerState.UNKNOWN
        if power == PowerState.UNKNOWN:
            outcome.unknown += 1
            outcome.unsure.add(pk)
            continue
        outcome.checked += 1
        if power != PowerState.ON:
            outcome.breaches.append(
                Breach(
                    Invariant.BMC_POWER,
                    pk,
                    node.hostname,
                    f"{node.state}: powered on",
                    f"BMC reports power {power}",
                    {
                        "state": node.state,
                        "state_changed_at": _ts(node.state_changed_at),
                        "power": str(power),
                        "bmc": str(node.bmc),
                        "read_at": _ts(ctx.now),
                    },
                )
            )
    return [outcome]


# --- 5. No node past its transient state's timeout ---------------------------------------------------


def transient_timeouts(ctx: AuditContext, stall: timedelta | None = None) -> list[Outcome]:
    """Initializing past the Day 0 timeout; a Day 1 stage past its run's deadline (or, with no open
    run, past the stage's timeout since the node entered it); draining past
    NODEWARDEN_AUDIT_DRAINING_HOURS; remediating with no running step within its deadline.
    Each with the grace on top: the periodic task that times these out must have had its turn."""
    from provisioning.tasks import day0_timeout
    from remediation.reconciler import stall as stall_delay
    from validation.choices import BY_STATE
    from validation.models import Day1Spec

    outcome = Outcome(Invariant.TRANSIENT_TIMEOUT)
    stall = stall if stall is not None else stall_delay()
    states = (S.INITIALIZING, *DAY1_STAGES, S.DRAINING, S.REMEDIATING)
    nodes = list(
        Node.objects.filter(state__in=states)
        .select_related("hardware_profile")
        .order_by("state_changed_at", "pk")[: LIST_LIMIT + 1]
    )
    if len(nodes) > LIST_LIMIT:
        nodes, outcome.complete = nodes[:LIST_LIMIT], False
    ids = [n.pk for n in nodes]
    stage_runs = {
        run.node_id: run
        for run in Run.objects.filter(node_id__in=ids, kind__in=STAGE_KINDS, status__in=OPEN_RUNS).order_by(
            "started", "pk"
        )
    }
    steps = dict(
        RemediationStep.objects.filter(
            remediation__node_id__in=ids, remediation__status__in=OPEN, status=StepStatus.RUNNING
        ).values_list("remediation__node_id", "deadline")
    )
    specs: dict[int, Day1Spec] = {}
    for node in nodes:
        outcome.checked += 1
        since, evidence = node.state_changed_at, {"state": node.state, "state_changed_at": _ts(node.state_changed_at)}
        if node.state == S.INITIALIZING:
            due = since + day0_timeout()
            evidence["timeout"] = str(day0_timeout())
        elif node.state in DAY1_STAGES:
            run = stage_runs.get(node.pk)
            spec = specs.setdefault(node.hardware_profile_id, Day1Spec.for_profile(node.hardware_profile))
            due = run.deadline if run is not None and run.deadline else since + spec.timeout(BY_STATE[node.state].stage)
            evidence.update(stage_run=run.pk if run is not None else None, deadline=_ts(due))
        elif node.state == S.DRAINING:
            due = since + ctx.draining_timeout
            evidence["timeout"] = str(ctx.draining_timeout)
        else:  # remediating: its running step's deadline; with none, the reconciler's stall delay
            due = steps.get(node.pk) or since + stall
            evidence["step_deadline"] = _ts(steps.get(node.pk))
        if due + ctx.grace >= ctx.now:
            continue
        evidence["overdue"] = str(ctx.now - due)
        outcome.breaches.append(
            Breach(
                Invariant.TRANSIENT_TIMEOUT,
                node.pk,
                node.hostname,
                f"{node.state} (transient)",
                f"past its timeout by {ctx.now - due}",
                evidence,
            )
        )
    return [outcome]


CHECKS: tuple[Callable[[AuditContext], list[Outcome]], ...] = (
    scheduler_agreement,
    unhandled_alerts,
    live_remediations,
    bmc_power,
    transient_timeouts,
)
