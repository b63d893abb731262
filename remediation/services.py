"""Remediation verbs: the only road from a finding to an action on a node.

``consider_finding`` (the findings of a commit together: ``consider_findings``, one task queued on
commit) picks the policy, the urgency and the rung, explains why on the node's history, and either acts, queues
(a hold, a tripped breaker, a blast-radius limit, a closed window), or waits for an
operator's approval. Acting:
- now (catastrophic): cordon (out of production at once, the scheduler evicts), then the rung;
- when idle (degraded): drain (the node leaves when its job ends), then the rung; or, for a
  finding that names one GPU while a job runs, fence that GPU instead (``remediation.fencing``);
- a rung: GPU reset, reboot, BMC power cycle, reimage (``remediation.ladder`` runs it in a
  task), then re-validation (the Day 1 stages for "back from remediation"); a pass brings
  the node back to production, a failure climbs the ladder; repair and RMA hand off to a
  technician ticket or an RMA case.
Escalation: a node that fails again within ``ESCALATION_WINDOW`` of a rung starts on the
next rung; a repeat offender (``REPEAT_INCIDENTS`` in ``REPEAT_DAYS``) goes to repair.
Every decision is kept on the remediation and written to the node's history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from fleet.models import Cluster
from health.choices import AlertState, Severity
from health.gates import still_firing
from health.models import Finding
from health.ruleconfig import rule_config
from health.rules import REGISTRY
from health.tasks import QUIET_RULES
from nodes import services as node_services
from nodes.choices import EventKind, GpuHealth, NodeState
from nodes.models import GPU, OPERATE, Node
from nodes.services import Actor, clean_reason, record_event
from repairs import services as repairs

from . import fencing, safety
from .choices import (
    APPROVABLE,
    DISRUPTIVE,
    DONE,
    HAND_OFF,
    LADDER,
    OPEN,
    RECOMMENDED_RUNG,
    SKIPPABLE,
    Rung,
    Status,
    StepStatus,
    Urgency,
    next_rung,
)
from .machine import INITIAL, STEP_INITIAL, RemediationConflict, move, move_steps
from .models import Remediation, RemediationPolicy, RemediationStep

if TYPE_CHECKING:
    from health.models import Finding

log = logging.getLogger(__name__)
ACTOR = Actor.system("remediation")
S = NodeState
ACTIONABLE = (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING, S.TRIAGE)
# Where people have the node: an open remediation of such a node is over (``end_superseded``).
OUT_OF_HANDS = (S.REPAIR, S.RMA, S.DECOMMISSIONED)
# Findings of Day 0 and Day 1 themselves: the node is in triage for people to look at (a failed
# re-validation after a rung climbs through ``on_validation_failed`` instead). A policy that
# names one of these rules explicitly opts in.
VALIDATION_RULES = ("day1_stage", "day0_timeout")
# Not admitted yet: an operator's approval or the safety rails stand between it and the node.
NOT_ADMITTED = (Status.AWAITING_APPROVAL, Status.QUEUED)
RUNG_TIMEOUT: dict[str, int] = {Rung.GPU_RESET: 300, Rung.REBOOT: 900, Rung.POWER_CYCLE: 900, Rung.REIMAGE: 3600}


class RemediationForbidden(PermissionError):
    """The user may not operate nodes (403)."""


@dataclass
class Plan:
    urgency: str
    rung: str
    policy: RemediationPolicy | None
    reasons: list[str] = field(default_factory=list)


DEFAULT_URGENCY = {Severity.CATASTROPHIC: Urgency.NOW, Severity.DEGRADED: Urgency.WHEN_IDLE}


def match_policy(finding: Any, policies: list[RemediationPolicy] | None = None) -> RemediationPolicy | None:
    """The first enabled policy (in their order) that matches the finding; ``policies``: as read already."""
    for policy in RemediationPolicy.objects.filter(enabled=True) if policies is None else policies:
        if policy.match_rule and policy.match_rule != finding.rule:
            continue
        if policy.match_xid is not None and policy.match_xid != finding.xid:
            continue
        if policy.match_severity and policy.match_severity != finding.severity:
            continue
        if policy.match_component and policy.match_component not in (finding.subject or ""):
            continue
        return policy
    return None


def urgency_and_rung(
    finding: Any, policies: list[RemediationPolicy] | None = None
) -> tuple[str, str, RemediationPolicy | None]:
    """What the finding alone calls for: its policy's urgency and first rung, else the defaults."""
    policy = match_policy(finding, policies)
    urgency = policy.urgency if policy else DEFAULT_URGENCY.get(finding.severity, Urgency.WATCH)
    rung = (
        policy.first_rung
        if policy and policy.first_rung
        else RECOMMENDED_RUNG.get(finding.recommended_action, Rung.REBOOT)
    )
    return urgency, rung, policy


def plan_for(finding: Any, node: Node, now: datetime, policies: list[RemediationPolicy] | None = None) -> Plan:
    """Urgency and rung for this finding on this node, with the reasons (see the module docstring)."""
    urgency, rung, policy = urgency_and_rung(finding, policies)
    reasons = [
        f"policy {policy.name!r}" if policy else f"default for {finding.severity} findings",
        f"{Urgency(urgency).label.lower()}",
        f"first rung {Rung(rung).label.lower()}"
        + ("" if policy and policy.first_rung else f" (recommended action: {finding.recommended_action})"),
    ]
    # One read of the node's recent incidents (index node, -created) answers both questions below.
    recent = list(
        Remediation.objects.filter(node=node, created__gte=now - timedelta(days=settings.NODEWARDEN_REPEAT_DAYS))
        .exclude(status=Status.STOPPED)
        .order_by("-created", "-id")
        .values_list("status", "finished", "rung")
    )
    incidents = len(recent) + 1
    if incidents >= settings.NODEWARDEN_REPEAT_INCIDENTS and LADDER.index(rung) < LADDER.index(Rung.REPAIR):
        rung = Rung.REPAIR
        reasons.append(
            f"repeat offender: {incidents} incidents in {settings.NODEWARDEN_REPEAT_DAYS} days, straight to repair"
        )
    since = now - timedelta(hours=settings.NODEWARDEN_ESCALATION_WINDOW_HOURS)
    last = next(
        (
            (finished, done)
            for status, finished, done in recent
            if status == Status.SUCCEEDED and finished and finished >= since
        ),
        None,
    )
    if last is not None and LADDER.index(rung) <= LADDER.index(last[1]):
        finished, done = last
        rung = next_rung(done)
        reasons.append(
            f"failed again {_ago(now - finished)} after a {Rung(done).label.lower()}: "
            f"climbing to {Rung(rung).label.lower()}"
        )
    return Plan(urgency, rung, policy, reasons)


def _ago(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f} h" if hours >= 1 else f"{int(delta.total_seconds() // 60)} min"


def _entry(what: str, actor: Actor, now: datetime, **details: Any) -> dict[str, Any]:
    """One decision as kept on the remediation: when, what, who (and the details)."""
    return {"at": now.isoformat(), "what": what, "who": actor.name, **details}


def _decide(rem: Remediation, what: str, *, actor: Actor = ACTOR, event: bool = True, **details: Any) -> None:
    """Keep a decision on the remediation and, by default, on the node's history."""
    now = timezone.now()
    rem.decisions = [*rem.decisions, _entry(what, actor, now, **details)]
    rem.updated = now
    rem.save(update_fields=["decisions", "updated", "status", "rung", "queued_reason", "finished"])
    if event:
        _decision_event(rem, what, actor=actor, **details)


def _decision_event(
    rem: Remediation, what: str, *, actor: Actor = ACTOR, node: Node | None = None, **details: Any
) -> None:
    """The node's history row of a decision kept on the (saved) remediation. ``node``: the node as the
    caller has just read it (its state unchanged since), so the row needs no read of it."""
    record_event(
        rem.node_id,
        EventKind.ACTION,
        actor=actor,
        reason=f"Remediation: {what}",
        details={"remediation": rem.pk, "rung": rem.rung, "status": rem.status, **details},
        node=node,
    )


# --- From a finding to a plan --------------------------------------------------------------------


@dataclass
class Batch:
    """Findings considered together (``consider_findings``): the rails counted once for a chunk of
    them, and the remediations cordoned, whose rungs start once the whole batch has committed."""

    rails: safety.Rails
    rungs: list[int] = field(default_factory=list)
    policies: list[RemediationPolicy] = field(default_factory=list)  # the enabled ones, read with the chunk


# Findings admitted in one transaction under their cluster's lock: the rails are read once for them;
# their cordons commit together, so this also bounds how long the first of them waits for the scheduler.
ADMIT_CHUNK = 25


def consider_findings(
    finding_ids: Sequence[int], now: datetime | None = None, *, before: Callable[[list[int]], None] | None = None
) -> list[Remediation | None]:
    """``consider_finding`` for a batch of findings (a commit's), in order, each with the same outcome as
    if considered alone in that order: consecutive findings of one cluster are decided in chunks, each
    in one transaction under the cluster's lock with the safety rails read once (``safety.Rails``) and
    kept up to date as each node is taken out. The rungs of the nodes cordoned start in one task once
    all are out (a lost start leaves a queued remediation on a node in triage: the reconciler admits it).
    A finding that may be answered by fencing its GPU is considered alone: the scheduler is asked
    outside any lock, after ``before([its id])`` (the task marks its GPU suspect: a fence must not come
    before the suspicion in the GPU's history). Idempotent per finding."""
    now = now or timezone.now()
    fencing_on = settings.NODEWARDEN_GPU_FENCING
    meta = {
        pk: (cluster_id, fencing_on and severity == Severity.DEGRADED and gpu_index is not None)
        for pk, cluster_id, severity, gpu_index in Finding.objects.filter(pk__in=list(finding_ids)).values_list(
            "pk", "node__cluster_id", "severity", "gpu_index"
        )
    }
    results: list[Remediation | None] = []
    rungs: list[int] = []
    chunk: list[int] = []
    chunk_cluster: int | None = None
    for finding_id in finding_ids:
        cluster_id, alone = meta.get(finding_id, (None, False))  # a finding gone: considered as nothing
        if chunk and (alone or len(chunk) == ADMIT_CHUNK or cluster_id != chunk_cluster):
            results += _consider_chunk(chunk, chunk_cluster, now, rungs)
            chunk = []
        if alone:
            if before is not None:
                before([finding_id])
            results.append(consider_finding(finding_id, now))
        else:
            chunk.append(finding_id)
            chunk_cluster = cluster_id
    if chunk:
        results += _consider_chunk(chunk, chunk_cluster, now, rungs)
    if rungs:
        transaction.on_commit(lambda: queue_start_rungs(rungs))
    return results


def _consider_chunk(
    finding_ids: list[int], cluster_id: int | None, now: datetime, rungs: list[int]
) -> list[Remediation | None]:
    """Consider findings of one cluster in one transaction under its lock (see ``consider_findings``)."""
    results: list[Remediation | None] = []
    with transaction.atomic():
        if cluster_id:  # as ``_admit``: one admission at a time per cluster
            list(Cluster.objects.select_for_update().filter(pk=cluster_id).values_list("pk"))
        batch = Batch(safety.Rails(now), rungs, list(RemediationPolicy.objects.filter(enabled=True)))
        findings = Finding.objects.select_related("node__cluster").in_bulk(finding_ids)
        with batch.rails.active():
            for finding_id in finding_ids:
                try:
                    with transaction.atomic():  # one finding's failure undoes its own work only
                        results.append(_consider(findings.get(finding_id), now, batch))
                except Exception:
                    # As a failed task of its own: logged, the others considered; the counts are read again.
                    log.exception("finding %s could not be considered", finding_id)
                    batch.rails.forget()
                    results.append(None)
    return results


def consider_finding(finding_id: int, now: datetime | None = None) -> Remediation | None:
    """Decide what a new finding calls for (see the module docstring). Idempotent per finding."""
    # The node's cluster too: the safety rails name it, and admission locks it.
    finding = Finding.objects.select_related("node__cluster").filter(pk=finding_id).first()
    return _consider(finding, now or timezone.now(), None)


def _consider(finding: Finding | None, now: datetime, batch: Batch | None) -> Remediation | None:
    """``consider_finding`` of a finding read with its node and cluster (``batch``: in a chunk)."""
    if finding is None or finding.node is None or finding.shadow:
        return None
    node = finding.node
    # One read: this finding's own remediation (a redelivered task) and the node's open one (at most
    # one: ``one_open_remediation_per_node``).
    known = list(Remediation.objects.filter(Q(finding=finding) | Q(node=node, status__in=OPEN)))
    if any(rem.finding_id == finding.pk for rem in known):
        return None  # a redelivered task
    open_rem = known[0] if known else None
    if open_rem is not None:
        if finding.severity in DEFAULT_URGENCY:
            _decide(open_rem, f"further finding during the remediation: {finding.summary}", finding=finding.pk)
            return hasten(open_rem.pk, finding, now=now)
        return open_rem
    if node.state not in ACTIONABLE:
        return None  # Day 0/Day 1 (validation decides), already in repair or RMA, or gone
    if (
        finding.rule in VALIDATION_RULES
        and not RemediationPolicy.objects.filter(enabled=True, match_rule=finding.rule).exists()
    ):
        return None
    plan = plan_for(finding, node, now, batch.policies if batch else None)
    if plan.urgency == Urgency.WATCH:
        return None  # the finding itself is on the record and its alert on the list
    try:
        with transaction.atomic():
            what = f"{finding.summary} -> " + "; ".join(plan.reasons)
            # Created with its first decision (one INSERT), then that decision's history row.
            rem = Remediation.objects.create(
                node=node,
                finding=finding,
                policy=plan.policy,
                urgency=plan.urgency,
                rung=plan.rung,
                status=INITIAL,
                created=now,
                updated=now,
                decisions=[_entry(what, ACTOR, timezone.now(), finding=finding.pk)],
            )
            _decision_event(rem, what, node=node, finding=finding.pk)
    except IntegrityError:  # another finding opened one for this node meanwhile
        return Remediation.objects.filter(node=node, status__in=OPEN).first()
    if plan.policy is not None and plan.policy.shadow:
        move(rem, Status.STOPPED)
        rem.finished = now
        _decide(rem, "shadow policy: recorded what would be done, nothing done")
        return rem
    if plan.policy is not None and plan.policy.requires_approval:
        move(rem, Status.AWAITING_APPROVAL)
        _decide(rem, "waiting for an operator's approval")
        return rem
    return _admit(rem, now=now, actor=ACTOR, batch=batch)


URGENCY_RANK: dict[str, int] = {Urgency.WATCH: 0, Urgency.WHEN_IDLE: 1, Urgency.NOW: 2}


def hasten(remediation_id: int, finding: Any, *, now: datetime | None = None) -> Remediation:
    """A further finding during an open remediation: the most severe finding decides, whatever the
    order they arrived in. A more urgent one makes the remediation act now (a pending drain becomes
    a cordon, the job is evicted); a higher first rung not yet started replaces the planned one."""
    now = now or timezone.now()
    urgency, rung, _policy = urgency_and_rung(finding)
    with transaction.atomic():
        rem = (
            Remediation.objects.select_for_update(of=("self",)).select_related("node", "finding").get(pk=remediation_id)
        )
        more_urgent = URGENCY_RANK.get(urgency, 0) > URGENCY_RANK.get(rem.urgency, 0)
        not_started = rem.status in (Status.AWAITING_APPROVAL, Status.QUEUED, Status.DRAINING)
        higher_rung = not_started and LADDER.index(rung) > LADDER.index(rem.rung)
        if not (more_urgent or higher_rung):
            return rem
        if more_urgent:
            rem.urgency = urgency
            Remediation.objects.filter(pk=rem.pk).update(urgency=urgency)
        if higher_rung:
            rem.rung = rung
        _decide(
            rem,
            f"{finding.summary} is more severe: "
            + ", ".join(
                filter(
                    None,
                    [
                        f"now {Urgency(urgency).label.lower()}" if more_urgent else "",
                        f"first rung {Rung(rung).label.lower()}" if higher_rung else "",
                    ],
                )
            ),
            finding=finding.pk,
        )
        if not (more_urgent and rem.status == Status.DRAINING and urgency == Urgency.NOW):
            return rem
        if rem.node.state in (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING):
            _take_out_now(rem, ACTOR)
    return start_rung(rem.pk, now=now)


def admit(remediation_id: int, *, now: datetime | None = None, actor: Actor = ACTOR) -> Remediation:
    """Let a queued (or approved) remediation act if the safety rails allow it now."""
    now = now or timezone.now()
    rem = Remediation.objects.select_related("node__cluster", "policy", "finding").get(pk=remediation_id)
    return _admit(rem, now=now, actor=actor)


def _admit(rem: Remediation, *, now: datetime, actor: Actor, batch: Batch | None = None) -> Remediation:
    """``admit`` of a remediation already read with its node (and cluster), policy and finding. In a
    ``batch`` the caller holds the cluster's lock and the rails in hand answer (``consider_findings``)."""
    if rem.status != Status.QUEUED:  # awaiting approval: ``approve`` queues it first
        return rem
    node = rem.node
    if batch is None:
        gpu = fencing.fence_candidate(rem, node, now)  # asks the scheduler: outside the lock below
        if gpu is not None:
            return _fence_instead(rem, gpu)
    with transaction.atomic(savepoint=batch is None):  # a batch's finding has a savepoint of its own
        # One admission at a time per cluster: the limits are counted and the node taken out
        # under the same lock, so a burst of findings cannot overshoot a blast-radius limit.
        if batch is None and node.cluster_id:
            list(Cluster.objects.select_for_update().filter(pk=node.cluster_id).values_list("pk"))
        if batch is None:
            blocked = safety.block_reason(node, taking_out=True, now=now)
        else:
            blocked = batch.rails.block_reason(node, taking_out=True)
        if blocked:
            if rem.queued_reason != blocked:
                move(rem, Status.QUEUED)
                rem.queued_reason = blocked[:300]
                _decide(rem, f"queued: {blocked}")
            return rem
        rem.queued_reason = ""
        return _act(rem, node, actor, now, batch)


def _fence_instead(rem: Remediation, gpu: GPU) -> Remediation:
    """The scheduler fenced the finding's GPU: record the fence and end, the node in production."""
    with transaction.atomic():
        if gpu.health != GpuHealth.FENCED:
            node_services.fence_gpu(
                rem.node_id,
                gpu.index,
                actor=fencing.FENCE_ACTOR,
                reason=fencing.fence_reason(rem),
                details={"remediation": rem.pk},
            )
        move(rem, Status.FENCED)
        rem.finished = timezone.now()
        _decide(rem, f"GPU {gpu.index} fenced: the node stays in production with one GPU fewer", gpu_index=gpu.index)
    return rem


def _act(rem: Remediation, node: Node, actor: Actor, now: datetime, batch: Batch | None = None) -> Remediation:
    """Take the admitted node out of production as its urgency says, then start its rung."""
    if node.state in (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING) and rem.urgency == Urgency.NOW:
        _take_out_now(rem, actor)
        # The rung starts in its own task once the cordon has committed: in a burst of findings every
        # node is taken out first, not after the rungs (and hand-offs) of those considered before it.
        # A start that is lost leaves the remediation queued on a node in triage: the reconciler admits it.
        _decide(rem, "cordoned: the rung starts once the cordon has committed", event=False)
        if batch is not None:
            batch.rungs.append(rem.pk)  # one task for the batch's, once all of it has committed
        else:
            transaction.on_commit(lambda: queue_start_rungs([rem.pk]))
        return rem
    if node.state == S.PRODUCTION and rem.urgency == Urgency.WHEN_IDLE:
        move(rem, Status.DRAINING)
        _decide(rem, "draining: the node leaves production when its current job ends", event=False)
        node_services.request_drain(
            node.pk, actor=actor, reason=f"Remediation {rem.pk}: {_finding_text(rem)}", details={"remediation": rem.pk}
        )
        return rem
    if node.state in (S.DRAIN_PENDING, S.DRAINING):
        move(rem, Status.DRAINING)
        _decide(rem, "already draining: the rung starts once the drain completes", event=False)
        return rem
    return start_rung(rem.pk, now=now)


def _finding_text(rem: Remediation) -> str:
    return rem.finding.summary if rem.finding else "finding"


def _take_out_now(rem: Remediation, actor: Actor) -> None:
    """Cordon: out of production at once; the cordon's scheduler reaction (``schedulers.reactions``)
    evicts the job once the transition has committed."""
    node_services.cordon(
        rem.node_id,
        actor=actor,
        reason=f"Remediation {rem.pk}: {_finding_text(rem)} (act now)",
        details={"remediation": rem.pk},
    )


# --- The ladder ----------------------------------------------------------------------------------


def start_rung(remediation_id: int, *, now: datetime | None = None) -> Remediation:
    """Start the remediation's current rung on a node in triage (RUNNING, a step, a task)."""
    now = now or timezone.now()
    rem = Remediation.objects.select_related("node", "policy", "finding").get(pk=remediation_id)
    node = rem.node
    if rem.status in DONE or rem.status == Status.AWAITING_APPROVAL or node.state not in (S.TRIAGE, S.REMEDIATING):
        return rem
    if (rem.rung in HAND_OFF or rem.rung in DISRUPTIVE) and not rem.steps.exists():
        waiting = confirming(rem, now)
        if waiting:
            if rem.queued_reason != waiting[:300]:
                move(rem, Status.QUEUED)
                rem.queued_reason = waiting[:300]
                _decide(rem, f"queued: {waiting}")
            return rem
    if rem.rung in HAND_OFF:
        return _hand_off(rem)
    if rem.policy is not None and rem.policy.disruptive_only_in_window:
        closed = safety.window_block(node, rem.rung, now)
        if closed:
            if rem.queued_reason != closed:
                move(rem, Status.QUEUED)
                rem.queued_reason = closed
                _decide(rem, f"queued: {closed}")
            return rem
    with transaction.atomic():
        step, created = RemediationStep.objects.get_or_create(
            remediation=rem,
            rung=rem.rung,
            defaults={"deadline": now + timedelta(seconds=RUNG_TIMEOUT.get(rem.rung, 900)), "started": now},
        )
        if not created and step.status != STEP_INITIAL:
            return rem  # this rung was tried already in this incident
        if node.state == S.TRIAGE:
            node_services.start_remediation(
                node.pk,
                actor=ACTOR,
                reason=f"{Rung(rem.rung).label} (remediation {rem.pk})",
                details={"remediation": rem.pk, "rung": rem.rung},
            )
        move(rem, Status.RUNNING)
        rem.queued_reason = ""
        _decide(rem, f"{Rung(rem.rung).label.lower()} started", event=False)
        transaction.on_commit(lambda: queue_step(step.pk))
    return rem


def start_rungs(remediation_ids: Sequence[int]) -> int:
    """``start_rung`` of each remediation a batch cordoned, in order, ``ADMIT_CHUNK`` of them to a
    transaction (their transitions' follow-ups are then one task a chunk). One that fails is logged
    and undone alone, left queued on its node in triage (the reconciler admits it again). Returns how
    many started without error."""
    started = 0
    for first in range(0, len(remediation_ids), ADMIT_CHUNK):
        with transaction.atomic():
            for remediation_id in remediation_ids[first : first + ADMIT_CHUNK]:
                try:
                    with transaction.atomic():
                        start_rung(remediation_id)
                    started += 1
                except Exception:
                    log.exception("remediation %s: the rung could not start", remediation_id)
    return started


def queue_start_rungs(remediation_ids: list[int]) -> None:
    from .tasks import start_rungs

    start_rungs.apply_async(args=(remediation_ids,), queue="remediation")


def queue_step(step_id: int) -> None:
    from .tasks import run_step

    run_step.apply_async(args=(step_id,), queue="remediation")


def _hand_off(rem: Remediation) -> Remediation:
    """Repair and RMA: a person takes over (technician ticket or vendor case)."""
    node = rem.node
    what = _finding_text(rem)
    if node.state == S.REMEDIATING:
        node_services.fail_remediation(node.pk, actor=ACTOR, reason=f"Handing off to {Rung(rem.rung).label.lower()}")
    component = _component(rem)
    if rem.rung == Rung.RMA:
        vendor, failed_serial = _rma_vendor_and_serial(rem)
        repairs.open_rma_case(
            node.pk,
            vendor=vendor,
            part=component,
            failed_serial=failed_serial,
            actor=ACTOR,
            reason=f"Remediation {rem.pk}: {what}",
        )
    else:
        repairs.open_repair_ticket(
            node.pk,
            component=component,
            what=f"{what}. Tried: {_tried(rem) or 'nothing automated'}.",
            actor=ACTOR,
            reason=f"Remediation {rem.pk}: {what}",
            finding_id=rem.finding_id,
            remediation_id=rem.pk,
        )
    move(rem, Status.HANDED_OFF)
    rem.finished = timezone.now()
    _decide(rem, f"handed off: {Rung(rem.rung).label.lower()}")
    return rem


def _component(rem: Remediation) -> str:
    """What the technician or vendor should look at: the finding's subject, its GPU, or its rule."""
    finding = rem.finding
    if finding is None:
        return "node (no finding recorded)"
    if finding.subject:
        return finding.subject
    return f"GPU {finding.gpu_index}" if finding.gpu_index is not None else finding.rule


def _rma_vendor_and_serial(rem: Remediation) -> tuple[str, str]:
    """Who the part goes back to and its serial, as far as Nodewarden knows them: a GPU's (NVIDIA,
    its serial from the inventory) or the server's (its hardware profile, the node's serial). The
    RMA case requires both; a person corrects them on the case if the vendor differs."""
    finding, node = rem.finding, rem.node
    if finding is not None and finding.gpu_index is not None:
        serial = GPU.objects.filter(node_id=node.pk, index=finding.gpu_index).values_list("serial", flat=True).first()
        return "NVIDIA", serial or f"{node.serial} GPU {finding.gpu_index}"
    profile = node.hardware_profile.name if node.hardware_profile_id else "server vendor"
    return profile, node.serial or node.hostname


def _tried(rem: Remediation) -> str:
    return ", ".join(f"{Rung(s.rung).label.lower()} ({s.status})" for s in rem.steps.all())


def action_done(step: RemediationStep, detail: str) -> None:
    """The rung's action is done: re-validate the node (the Day 1 road for a remediated node). The step
    is not passed yet: it waits, verifying, for its success check (``on_back_in_production``)."""
    with transaction.atomic():
        if not move_steps(
            RemediationStep.objects.filter(pk=step.pk),
            [StepStatus.RUNNING],
            StepStatus.VERIFYING,
            acted_at=timezone.now(),
            detail=detail[:2000],
        ):
            return  # another delivery finished it
        rem = Remediation.objects.select_related("node").get(pk=step.remediation_id)
        move(rem, Status.VALIDATING)
        _decide(rem, f"{Rung(step.rung).label.lower()} done ({detail}); re-validating before production", event=False)
        if rem.node.state == S.REMEDIATING:
            node_services.revalidate(
                rem.node_id,
                actor=ACTOR,
                reason=f"{Rung(step.rung).label} done: re-validating",
                details={"remediation": rem.pk},
            )


def _verified(rem: Remediation, status: str, detail: str) -> None:
    """The verifying step of the remediation has its answer: passed or failed, with why."""
    move_steps(
        RemediationStep.objects.filter(remediation=rem),
        [StepStatus.VERIFYING],
        status,
        finished=timezone.now(),
        detail=Concat(F("detail"), Value(f"; {detail}"[:1000])),
    )


def reimage_rejoined(step: RemediationStep, detail: str) -> bool:
    """The reimaged node's agent joined with the reimage's token: the reimage's action is done, and
    re-validation starts (its success check). Called inside the join's transaction; the step row is
    locked so the deadline cannot fail it meanwhile. False (nothing written) if it is no longer running."""
    with transaction.atomic():
        running = (
            RemediationStep.objects.select_for_update()
            .filter(pk=step.pk, rung=Rung.REIMAGE, status=StepStatus.RUNNING)
            .first()
        )
        if running is None:
            return False
        action_done(running, detail)
        return True


def gpu_reset_answered(command_id: int) -> RemediationStep | None:
    """The agent command of a running GPU reset step ended: a reset is the rung's action done
    (re-validation follows, its success check); anything else (busy, failed, expired undelivered,
    unanswered) fails the step with the agent's or the channel's words, and the ladder climbs.
    The step row is locked so the deadline cannot fail it meanwhile. None if no running step
    waits on this command (an operator's command, a late answer, a redelivered follow-up)."""
    from telemetry.choices import CommandStatus

    with transaction.atomic():
        step = (
            RemediationStep.objects.select_for_update(of=("self",))
            .select_related("agent_command")
            .filter(agent_command_id=command_id, rung=Rung.GPU_RESET, status=StepStatus.RUNNING)
            .first()
        )
        command = step.agent_command if step is not None else None
        if step is None or command is None or command.status in (CommandStatus.QUEUED, CommandStatus.DELIVERED):
            return None
        said = f"reset_gpu #{command.pk} (GPU {command.args.get('gpu')}) {command.status}" + (
            f": {command.summary}" if command.summary else ""
        )
        if command.status == CommandStatus.SUCCEEDED:
            action_done(step, f"{said}, by the node's agent")
        else:
            step_failed(step, said)
    return step


def step_failed(step: RemediationStep, detail: str) -> None:
    """The rung did not work (or could not run): climb."""
    with transaction.atomic():
        if not move_steps(
            RemediationStep.objects.filter(pk=step.pk),
            [StepStatus.RUNNING],
            StepStatus.FAILED,
            finished=timezone.now(),
            detail=detail[:2000],
        ):
            return
        rem = Remediation.objects.get(pk=step.remediation_id)
        escalate(rem, f"{Rung(step.rung).label.lower()} failed: {detail}")


def escalate(rem: Remediation, why: str, *, actor: Actor = ACTOR) -> Remediation:
    """The next rung (repair and RMA end the ladder). A remediation not admitted yet (awaiting its
    approval, or queued behind a safety rail) keeps waiting, on the next rung: skipping a rung is
    no approval and no admission. The move is checked before the node is touched."""
    if rem.rung == LADDER[-1]:
        move(rem, Status.FAILED)
        rem.finished = timezone.now()
    elif rem.status not in NOT_ADMITTED:
        move(rem, Status.RUNNING)
    node = Node.objects.get(pk=rem.node_id)
    if node.state == S.REMEDIATING:
        node_services.fail_remediation(node.pk, actor=actor, reason=why[:1000], details={"remediation": rem.pk})
    if rem.status == Status.FAILED:
        _decide(rem, f"{why}; no rung left", actor=actor)
        return rem
    rem.rung = next_rung(rem.rung)
    _decide(rem, f"{why}; climbing to {Rung(rem.rung).label.lower()}", actor=actor)
    transaction.on_commit(lambda: start_rung(rem.pk))
    return rem


# --- Events of the node's lifecycle --------------------------------------------------------------


def confirm_window(finding: Any) -> timedelta:
    """How long a disruptive step or a ticket waits, for this finding, to see whether its condition
    clears by itself: the rule's ``confirm_seconds`` parameter (per hardware profile), by default
    set on the rules whose conditions come and go without a defect (a link flap, a hot aisle:
    see health.rules), 0 for the rest."""
    spec = REGISTRY.get(finding.rule)
    if spec is None:
        return timedelta(0)
    profile_id = Node.objects.filter(pk=finding.node_id).values_list("hardware_profile_id", flat=True).first()
    seconds = rule_config(finding.rule, profile_id).param("confirm_seconds", spec.params.get("confirm_seconds", 0))
    return timedelta(seconds=float(seconds or 0))


def _stand_down_finding(rem: Remediation) -> Finding | None:
    """The remediation's finding, if it may stand down (else None): a condition with an alert that
    resolves when the rule sees it clear (not an XID, whose alert resolves by going quiet), and a
    policy that lets a remediation stand down."""
    finding = rem.finding
    if finding is None or finding.alert_id is None or finding.rule in QUIET_RULES:
        return None
    return finding if rem.policy is None or rem.policy.stand_down_if_cleared else None


def confirming(rem: Remediation, now: datetime | None = None) -> str:
    """Why the remediation does not act yet on a condition that may clear by itself ('' if it may act):
    its confirmation window has not run, or its condition is clearing or has cleared (then the
    reconciler stands it down). Idle node or busy, the same rule."""
    finding = _stand_down_finding(rem)
    if finding is None:
        return ""
    window = confirm_window(finding)
    if not window:
        return ""
    alert = finding.alert
    if cleared_by_itself(rem):
        return f"{finding.summary} cleared by itself"
    if alert is not None and alert.clearing_since is not None:
        return f"{finding.summary} is clearing (seen clear since {alert.clearing_since:%H:%M:%S} UTC)"
    until = finding.created + window
    if (now or timezone.now()) < until:
        return f"confirming {finding.summary} does not clear by itself (until {until:%H:%M:%S} UTC)"
    return ""


def cleared_by_itself(rem: Remediation) -> bool:
    """The finding's condition is gone before anything disruptive was done: its alert resolved because
    the rule saw the condition clear, and the remediation may stand down (``_stand_down_finding``)."""
    finding = _stand_down_finding(rem)
    return finding is not None and finding.alert is not None and finding.alert.state == AlertState.RESOLVED


def stand_down(remediation_id: int) -> Remediation:
    """A remediation whose condition cleared by itself before anything disruptive was done ends as
    cleared: a drain still pending is cancelled (the node stays in production, the scheduler gives
    it work again); a node already out, waiting in triage for its confirmation, re-validates.
    Idempotent: anything else is left alone."""
    with transaction.atomic():
        rem = (
            Remediation.objects.select_for_update(of=("self",)).select_related("node", "finding").get(pk=remediation_id)
        )
        in_drain = rem.status == Status.DRAINING and rem.node.state == S.DRAIN_PENDING
        confirming_in_triage = rem.status == Status.QUEUED and rem.node.state == S.TRIAGE and not rem.steps.exists()
        if not (in_drain or confirming_in_triage):
            return rem
        if in_drain:
            why = f"{_finding_text(rem)} cleared by itself before the job ended: standing down"
            node_services.cancel_drain(
                rem.node_id, actor=ACTOR, reason=f"Remediation {rem.pk}: {why}", details={"remediation": rem.pk}
            )
        else:  # out of production already: back through re-validation, nothing disruptive done
            why = f"{_finding_text(rem)} cleared by itself while being confirmed: standing down, re-validating"
            node_services.revalidate(
                rem.node_id, actor=ACTOR, reason=f"Remediation {rem.pk}: {why}", details={"remediation": rem.pk}
            )
        move(rem, Status.CLEARED)
        rem.finished = timezone.now()
        _decide(rem, why)
    return rem


def on_drained(node_id: int) -> Remediation | None:
    rem = Remediation.objects.filter(node_id=node_id, status=Status.DRAINING).first()
    return start_rung(rem.pk) if rem else None


def on_back_in_production(node_id: int) -> Remediation | None:
    """Re-validation passed and the node is back: the step passed, and the remediation succeeded if
    its finding's condition has cleared since the action (the release gate,
    ``health.gates.blocking_alerts``, holds back a node whose condition still fires; a node an
    operator put back by hand while it fires is recorded as such, not as a success)."""
    rem = Remediation.objects.filter(node_id=node_id, status=Status.VALIDATING).select_related("finding__alert").first()
    if rem is None:
        return None
    # Since the action being verified (or the last action carried out, or the finding).
    since = (
        rem.steps.filter(status=StepStatus.VERIFYING).values_list("acted_at", flat=True).first()
        or rem.steps.exclude(acted_at=None).order_by("-acted_at").values_list("acted_at", flat=True).first()
        or rem.created
    )
    firing = still_firing(rem.finding, since=since) if rem.finding else None
    rem.finished = timezone.now()
    if firing:
        _verified(rem, StepStatus.FAILED, f"back in production while still firing: {firing}")
        move(rem, Status.STOPPED)
        _decide(rem, f"back in production by other hands while {firing} still fires: not a success")
        return rem
    _verified(rem, StepStatus.PASSED, "re-validation passed")
    move(rem, Status.SUCCEEDED)
    _decide(
        rem,
        f"back in production after {Rung(rem.rung).label.lower()} and re-validation "
        f"({_ago(rem.finished - rem.created)} after the finding)",
    )
    return rem


def on_validation_failed(node_id: int, reason: str) -> Remediation | None:
    rem = Remediation.objects.filter(node_id=node_id, status=Status.VALIDATING).first()
    if rem is None:
        return None
    _verified(rem, StepStatus.FAILED, f"re-validation failed: {reason}")
    return escalate(rem, f"re-validation failed: {reason}")


# --- Operator verbs ------------------------------------------------------------------------------


def _operator(actor: Actor, reason: str) -> str:
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise RemediationForbidden(f"{actor.name} may not operate remediations.")
    return clean_reason(reason)


def approve(remediation_id: int, *, actor: Actor, reason: str) -> Remediation:
    reason = _operator(actor, reason)
    rem = Remediation.objects.get(pk=remediation_id)
    if rem.status not in APPROVABLE:
        raise RemediationConflict(f"Remediation {rem.pk} is {rem.get_status_display().lower()}, not awaiting approval.")
    move(rem, Status.QUEUED)
    _decide(rem, f"approved: {reason}", actor=actor)
    return admit(rem.pk, actor=actor)


def stop(remediation_id: int, *, actor: Actor, reason: str) -> Remediation:
    """Stop the automated plan; the node stays where it is (usually triage) for people to decide."""
    reason = _operator(actor, reason)
    rem = Remediation.objects.get(pk=remediation_id)
    if rem.status not in OPEN:
        raise RemediationConflict(f"Remediation {rem.pk} is already {rem.get_status_display().lower()}.")
    _end_stopped(rem, step_detail=f"stopped by {actor.name}")
    _decide(rem, f"stopped: {reason}", actor=actor)
    return rem


def _end_stopped(rem: Remediation, *, step_detail: str) -> None:
    """The remediation ends stopped: its open steps are skipped (saying why), nothing more is done."""
    now = timezone.now()
    move_steps(
        RemediationStep.objects.filter(remediation=rem),
        [StepStatus.RUNNING, StepStatus.VERIFYING],
        StepStatus.SKIPPED,
        finished=now,
        detail=step_detail,
    )
    move(rem, Status.STOPPED)
    rem.finished = now


def end_superseded(remediation_id: int) -> Remediation:
    """People took the node out of the remediation's hands (a repair ticket, an RMA, a decommission)
    while it was still open: it ends, saying so, and nothing more is done automatically."""
    with transaction.atomic():
        rem = Remediation.objects.select_for_update(of=("self",)).select_related("node").get(pk=remediation_id)
        if rem.status not in OPEN or rem.node.state not in OUT_OF_HANDS:
            return rem
        _end_stopped(rem, step_detail=f"node in {rem.node.state}")
        _decide(rem, f"the node went to {rem.node.get_state_display().lower()} by other hands: nothing more to do")
    return rem


def skip_rung(remediation_id: int, *, actor: Actor, reason: str) -> Remediation:
    """Skip the current rung and go to the next (e.g. a GPU reset known not to help)."""
    reason = _operator(actor, reason)
    rem = Remediation.objects.get(pk=remediation_id)
    if rem.status not in SKIPPABLE:
        raise RemediationConflict(f"Remediation {rem.pk} is {rem.get_status_display().lower()}: no rung to skip.")
    move_steps(
        RemediationStep.objects.filter(remediation=rem, rung=rem.rung),
        [StepStatus.RUNNING],
        StepStatus.SKIPPED,
        finished=timezone.now(),
        detail=f"skipped by {actor.name}: {reason}",
    )
    with transaction.atomic():
        return escalate(rem, f"{Rung(rem.rung).label.lower()} skipped by {actor.name}: {reason}", actor=actor)


# --- Safety verbs --------------------------------------------------------------------------------


def place_hold(
    *,
    actor: Actor,
    reason: str,
    node_id: int | None = None,
    cluster_id: int | None = None,
    rack_id: int | None = None,
    tenant_id: int | None = None,
    until: datetime | None = None,
) -> Any:
    """No automated action on the node or domain (all None: the whole fleet) until released."""
    from .models import Hold

    reason = _operator(actor, reason)
    hold = Hold.objects.create(
        node_id=node_id,
        cluster_id=cluster_id,
        rack_id=rack_id,
        tenant_id=tenant_id,
        reason=reason,
        actor_name=actor.name,
        until=until,
    )
    if node_id:
        record_event(node_id, EventKind.NOTE, actor=actor, reason=f"Hold placed: {reason}", details={"hold": hold.pk})
    return hold


def release_hold(hold_id: int, *, actor: Actor, reason: str) -> Any:
    from .models import Hold

    reason = _operator(actor, reason)
    hold = Hold.objects.get(pk=hold_id)
    if hold.released_at is None:
        hold.released_at, hold.released_reason = timezone.now(), f"{actor.name}: {reason}"
        hold.save(update_fields=["released_at", "released_reason"])
        if hold.node_id:
            record_event(
                hold.node_id, EventKind.NOTE, actor=actor, reason=f"Hold released: {reason}", details={"hold": hold.pk}
            )
    return hold


def reset_breaker(breaker_id: int, *, actor: Actor, reason: str) -> Any:
    """An operator has looked at the spike: automated actions may resume in the cluster."""
    from .models import CircuitBreaker

    reason = _operator(actor, reason)
    breaker = CircuitBreaker.objects.get(pk=breaker_id)
    if breaker.reset_at is not None:
        raise RemediationConflict(f"The breaker of {breaker.cluster} was already reset by {breaker.reset_by}.")
    breaker.reset_at, breaker.reset_by, breaker.reset_reason = timezone.now(), actor.name, reason
    breaker.save(update_fields=["reset_at", "reset_by", "reset_reason"])
    return breaker
