"""What each lifecycle transition asks of the node's workload scheduler: declared here, run here.

One table (``REACTIONS``: verb -> reaction), one owner (``react``, the follow-up every
transition runs first, even when the node has moved on since), and one follower of drains
(``follow_drains``, Celery beat every minute) that moves draining nodes on when the scheduler
says so and retries what could not reach the scheduler. No other code cordons, drains, evicts
or resumes a node in its scheduler as a consequence of a transition.

The reactions:
- evict: no new work, and the work on the node is moved off now (an operator's or remediation's
  "Cordon now"; a forced move out of production);
- drain: no new work, the current work finishes (the drain verbs, ``start_maintenance``); the node
  moves on from drain pending to draining to triage (to maintenance when an operator planned the
  drain: ``nodes.services.planned_maintenance``) as the scheduler reports it idle, unless a drain hold
  (``drain_hold``, e.g. remediation confirming that a condition did not clear by itself) keeps
  it pending;
- cordon: no new work (the node runs none): every state out of production; the reason follows
  the node's state, so ``sinfo -R`` never says "Drain pending" for a node in triage;
- resume: take work again, lifting only a cordon Nodewarden set (back to production, a drain
  cancelled).

A GPU fenced or given back (``nodes.services.fence_gpu`` / ``clear_gpu``) is no transition; it
arrives here after commit through ``nodes.followups.gpu_fence_changed`` (``react_to_gpu_fence``,
a Celery task): the adapter fences the GPU (``fence_gpus``), and where it answers False, fails,
or ``NODEWARDEN_GPU_FENCING`` is off, a node in production is drained the normal road
(``request_drain``) with the fence's reason.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from nodes import services as node_services
from nodes.choices import DAY1_STAGES, EventKind, GpuHealth, NodeState
from nodes.followups import followup, on_action, on_state_change
from nodes.models import GPU, Node, NodeEvent

from . import base, conditions
from .base import SchedulerConflict, SchedulerError
from .models import PendingReaction

log = logging.getLogger(__name__)
S = NodeState
STATE_CHANGES = (EventKind.TRANSITION, EventKind.FORCED)
ACTOR = node_services.Actor.system("scheduler")
BATCH = 200  # nodes per run of the drain follower; the next run takes the rest
RETRY_MAX = timedelta(hours=1)


class Reaction(models.TextChoices):
    EVICT = "evict", "No new work; work on the node moved off now"
    DRAIN = "drain", "No new work; the current work finishes"
    CORDON = "cordon", "No new work (the node runs none)"
    RESUME = "resume", "Take work again (only Nodewarden's own cordon is lifted)"


R = Reaction
# What the scheduler must say for a node in each state (forced states, retries, the auditor).
# Enrolled and initializing nodes are not in a scheduler yet: nothing is asked of it.
STATE_REACTION: dict[str, str | None] = {
    S.ENROLLED: None,
    S.INITIALIZING: None,
    S.ONBOARD: R.CORDON,
    **dict.fromkeys(DAY1_STAGES, R.CORDON),
    S.PRODUCTION: R.RESUME,
    S.DRAIN_PENDING: R.DRAIN,
    S.DRAINING: R.DRAIN,
    S.MAINTENANCE: R.CORDON,  # reason "Maintenance: ... (out for: <the operator's reason>)"
    S.TRIAGE: R.CORDON,
    S.REMEDIATING: R.CORDON,
    S.REPAIR: R.CORDON,
    S.RMA: R.CORDON,
    S.DECOMMISSIONED: R.CORDON,
}

# The reaction of every verb (nodes.services.VERBS and force_state). A test walks each against
# a real Slurm and checks what ``scontrol show node`` says afterwards.
REACTIONS: dict[str, str | None] = {
    "start_initialization": None,
    "mark_onboard": R.CORDON,  # the node's scheduler daemon may register now: no work before Day 1
    "start_validation": R.CORDON,
    "revalidate": R.CORDON,
    "pass_firmware": R.CORDON,
    "pass_inventory_check": R.CORDON,
    "pass_burn_in": R.CORDON,
    "pass_fabric_check": R.CORDON,
    "release_to_production": R.RESUME,
    "fail_validation": R.CORDON,
    "request_drain": R.DRAIN,
    "cancel_drain": R.RESUME,
    "start_draining": R.DRAIN,
    "complete_drain": R.CORDON,
    "start_maintenance": R.DRAIN,  # a planned drain: the job finishes, then maintenance
    "end_maintenance": R.CORDON,  # out until the re-validation plan passes (release_to_production)
    "cordon": R.EVICT,
    "start_remediation": R.CORDON,
    "fail_remediation": R.CORDON,
    "send_to_repair": R.CORDON,
    "send_to_rma": R.CORDON,
    "decommission": R.CORDON,
    "force_state": None,  # by the target state: see reaction_for
}


def reaction_for(transition: str, target: str) -> str | None:
    """The reaction a transition into ``target`` asks for. A forced move out of production
    evicts (an admin override acts at once), into production resumes, into a drain drains."""
    if transition != "force_state":
        return REACTIONS.get(transition, STATE_REACTION.get(target))
    wanted = STATE_REACTION.get(target)
    return R.EVICT if wanted == R.CORDON else wanted


def still_wanted(reaction: str, state: str) -> bool:
    """A reaction queued for an earlier state is carried out only if the node is still on the same
    side: out of production for evict/drain/cordon, in production for resume (a later
    transition's own reaction covers the rest)."""
    if reaction == R.RESUME:
        return state == S.PRODUCTION
    return STATE_REACTION.get(state) is not None and state != S.PRODUCTION


REASON_MAX = 200  # Slurm keeps more, but ``sinfo -R`` and a taint value are read in one glance
CAUSE_MIN = 60  # at least this much of the transition's own reason stays when the cause is long


def scheduler_reason(state: str, reason: str, cause: str = "") -> str:
    """The reason the scheduler shows (``sinfo -R``, the Kubernetes annotation): the node's state
    first, then the transition's reason, then what took the node out of production (``cause``: the
    reason of the move out, e.g. remediation's "Remediation 4: XID 79 ..." naming the finding), so a
    node in triage or remediating still says why it is out."""
    head = " ".join(f"{NodeState(state).label}: {reason}".split())
    cause = " ".join(cause.split())
    if not cause or cause in head:
        return head[:REASON_MAX]
    tail = f" (out for: {cause})"
    return (head[: max(CAUSE_MIN, REASON_MAX - len(tail))] + tail)[:REASON_MAX]


def out_of_production_cause(node_id: int, event: NodeEvent) -> str:
    """The reason of the transition that took the node out of production (this one, or the latest
    earlier one; "" in production or where none is recorded). Index (node, -created)."""
    if event.target_state == S.PRODUCTION:
        return ""
    if event.source_state == S.PRODUCTION:
        return event.reason
    reason = (
        NodeEvent.objects.filter(node_id=node_id, source_state=S.PRODUCTION, kind__in=STATE_CHANGES)
        .exclude(target_state=S.PRODUCTION)
        .order_by("-created", "-pk")
        .values_list("reason", flat=True)
        .first()
    )
    return reason or ""


# --- Drain holds ---------------------------------------------------------------------------------
DrainHold = Callable[[Node], str | None]
DRAIN_HOLDS: list[DrainHold] = []


def drain_hold(fn: DrainHold) -> DrainHold:
    """Register a check that may keep a drain-pending node pending (it returns why, or None).
    Remediation registers one: a condition that can clear by itself is confirmed first."""
    DRAIN_HOLDS.append(fn)
    return fn


def held_by(node: Node) -> str | None:
    for hold in DRAIN_HOLDS:
        why = hold(node)
        if why:
            return why
    return None


# --- The owner ------------------------------------------------------------------------------------


def apply(node: Node, reaction: str, reason: str) -> str:
    """Ask the node's scheduler for ``reaction``; a failure is owed and retried by the follower."""
    adapter = base.adapter_for(node.cluster)  # looked up late: tests stand a scheduler in
    try:
        if reaction == R.EVICT:
            adapter.evict(node, reason=reason)
        elif reaction == R.DRAIN:
            adapter.drain(node, reason=reason)
        elif reaction == R.CORDON:
            adapter.cordon(node, reason=reason)
        else:
            adapter.uncordon(node, reason=reason)
    except SchedulerConflict as exc:  # someone else's cordon: theirs to lift, not retried
        PendingReaction.objects.filter(node=node).delete()
        _note_conflict(node, reaction, exc)
        return f"The scheduler keeps the node out: {exc}"
    except SchedulerError as exc:
        _owe(node, reaction, reason, str(exc))
        return f"The scheduler could not be asked to {reaction} ({exc}); asking again later."
    PendingReaction.objects.filter(node=node).delete()
    return "" if adapter.kind == "none" else f"{adapter.kind}: {reaction}."


def _note_conflict(node: Node, reaction: str, exc: SchedulerError) -> None:
    node_services.record_event(
        node.pk,
        EventKind.NOTE,
        actor=ACTOR,
        reason=f"The scheduler keeps the node out: {exc}",
        details={"scheduler_reaction": reaction, "conflict": True},
    )


def _note_owed(node: Node, reaction: str, error: str) -> None:
    node_services.record_event(
        node.pk,
        EventKind.ACTION,
        actor=ACTOR,
        reason=f"The scheduler could not be asked to {reaction}: {error}"[:1000],
        details={"scheduler_reaction": reaction, "ok": False},
    )


def _owe(node: Node, reaction: str, reason: str, error: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    owed = PendingReaction.objects.filter(node=node).first()
    if owed is None:
        owed = PendingReaction(node=node, attempts=0)
    first = owed.attempts == 0  # never tried before (or queued by a transition and not carried out yet)
    owed.reaction, owed.reason = reaction, reason
    _back_off(owed, error, now)
    if first:
        _note_owed(node, reaction, error)


def _back_off(owed: PendingReaction, error: str, now: datetime) -> None:
    """One more failed attempt: try again in 1, 2, 4 ... minutes (at most RETRY_MAX)."""
    owed.attempts += 1
    owed.last_error = error[:2000]
    if owed.attempts == 1:
        owed.first_failed_at, owed.next_attempt_at = now, now + timedelta(minutes=1)
    else:
        owed.next_attempt_at = now + min(timedelta(minutes=2 ** min(owed.attempts, 10)), RETRY_MAX)
    owed.save()


def react(node: Node, event: NodeEvent) -> str:
    """The scheduler reaction of a committed transition (see the module docstring): the transition
    queued it (``queue_reaction``); this carries out all that is queued for the node's cluster, so a
    burst of transitions reaches the scheduler in a few batched calls. Returns once the node's own
    reaction is done, whoever did it: what follows (the drain road) sees it in the scheduler."""
    reaction = reaction_for(event.transition, event.target_state)
    if reaction is None:
        return ""
    node = Node.objects.select_related("cluster").get(pk=node.pk)  # the state now, not at the event
    if not still_wanted(reaction, node.state):
        return f"Scheduler {reaction} superseded: the node is now {node.get_state_display()}."
    return flush(node.cluster_id, for_node=node.pk) if node.cluster_id else ""


def report_transition(node: Node, event: NodeEvent) -> str:
    """After the reaction: show the node's health as it is now where its scheduler can (Kubernetes:
    the condition, labels and a ``NodewardenTransition`` Event; ``schedulers.conditions``)."""
    if node.cluster_id is None or not base.adapter_for(node.cluster).reports_health:
        return ""  # nothing to show (Slurm, no scheduler): no read of the node again
    message = f"{event.get_source_state_display()} -> {event.get_target_state_display()}: {event.reason}"
    note = conditions.NodeEventNote(conditions.TRANSITION_EVENT, message, warning=event.target_state != S.PRODUCTION)
    return report_health(node.pk, note)


def report_health(node_id: int, note: conditions.NodeEventNote | None = None) -> str:
    """Show the node's health in its scheduler (``schedulers.conditions``). Best effort: a failure is
    logged, and the next transition, finding or alert change shows the state then."""
    node = Node.objects.select_related("cluster", "persona").filter(pk=node_id).first()
    if node is None or node.cluster is None or STATE_REACTION.get(node.state) is None:
        return ""  # not in a scheduler (yet)
    adapter = base.adapter_for(node.cluster)  # looked up late: tests stand a scheduler in
    if not adapter.reports_health:
        return ""
    report = conditions.health_report(node, event=note)
    try:
        adapter.report_health(node, report)
    except SchedulerError as exc:
        log.warning("could not show node %s's health in its scheduler: %s", node.hostname, exc)
        return f"The scheduler could not be shown the node's health ({exc})."
    return f"{adapter.kind}: {conditions.CONDITION_NAME}={report.healthy} ({report.reason})."


for _verb in REACTIONS:
    followup(_verb, even_if_moved_on=True)(react)
    followup(_verb, even_if_moved_on=True)(report_transition)


@on_action
def report_action(event: NodeEvent) -> None:
    """After an action or GPU health row commits (``nodes.followups.on_action``): a
    ``NodewardenAction`` Event on the node where its scheduler shows health (Kubernetes), queued
    as a task so a slow API server never holds up the remediation step or request that acted.
    A GPU marked suspect or fenced is a Warning; other actions are Normal."""
    from .tasks import report_node_health  # tasks imports this module

    if event.node_id is None:  # a deleted node's history row
        return
    node = Node.objects.select_related("cluster").only("id", "cluster").filter(pk=event.node_id).first()
    if node is None or node.cluster is None or not base.adapter_for(node.cluster).reports_health:
        return  # one query, no HTTP: most clusters show no health
    if event.kind == EventKind.GPU:
        index, target = event.details.get("gpu_index"), event.details.get("to", "")
        message = f"GPU {index} {GpuHealth(target).label.lower() if target else 'changed'}: {event.reason}"
        warning = target != GpuHealth.HEALTHY
    else:
        message, warning = event.reason, False
    report_node_health.delay(event.node_id, conditions.ACTION_EVENT, message, warning)


@on_state_change
def queue_reaction(event: NodeEvent) -> None:
    """Inside the transition's transaction: queue what it asks of the node's scheduler (one row per
    node, the latest reaction wins, except that an eviction not yet carried out stays an eviction
    under a later cordon or drain: the job must still be moved off)."""
    reaction = reaction_for(event.transition, event.target_state)
    node = event.node
    if reaction is None or node is None or node.cluster_id is None:
        return
    cause = out_of_production_cause(node.pk, event)
    reason, now = scheduler_reason(event.target_state, event.reason, cause), timezone.now()
    # savepoint=False: inside the transition's transaction this costs nothing; a caller that
    # records an event outside one (fixtures, scripts) still gets the row lock it needs.
    with transaction.atomic(savepoint=False):
        owed = PendingReaction.objects.select_for_update().filter(node_id=node.pk).first()
        if owed is None:
            PendingReaction.objects.create(
                node_id=node.pk, reaction=reaction, reason=reason, attempts=0, next_attempt_at=now
            )
            return
        if owed.reaction == R.EVICT and reaction in (R.CORDON, R.DRAIN):
            reaction = R.EVICT
        owed.reaction, owed.reason, owed.next_attempt_at = reaction, reason, now
        owed.save(update_fields=["reaction", "reason", "next_attempt_at"])


def flush(cluster_id: int, *, for_node: int | None = None, now: datetime | None = None) -> str:
    """Carry out the reactions due in the cluster, in batches (``SchedulerAdapter.apply_many``).

    Each batch is claimed with ``FOR UPDATE SKIP LOCKED``, so concurrent workers split the work; rows
    stay locked while the scheduler is asked, and a transition queueing a reaction for one of them
    waits for that batch. With ``for_node``: that node's summary, after waiting for the batch that
    holds it if another worker took it."""
    summaries: dict[int, str] = {}
    while True:
        batch, later, full = _flush_batch(cluster_id, now)
        summaries.update(batch)
        for record in later:
            record()
        # A batch short of BATCH took all that was due: no further read for an empty one. A row
        # queued since is carried out by its own transition's follow-up (or the follower).
        if not full:
            break
    if for_node is None or for_node in summaries:
        return summaries.get(for_node, "") if for_node else ""
    with transaction.atomic():  # another worker's batch holds it: wait for that batch to commit
        owed = PendingReaction.objects.select_for_update().filter(node_id=for_node).first()
    if owed is None:
        return "Scheduler reaction carried out in a batch."
    if owed.attempts:
        return f"The scheduler could not be asked to {owed.reaction} ({owed.last_error}); asking again later."
    return flush(cluster_id, for_node=for_node, now=now)  # queued again meanwhile: this worker does it


def _flush_batch(cluster_id: int, now: datetime | None) -> tuple[dict[int, str], list[Callable[[], None]], bool]:
    """One batch: claim, ask the scheduler once per reaction, settle each row. History rows are
    written after the commit (returned as callables): inserting them while the batch holds its locks
    could deadlock with a transition on one of its nodes. The flag: the batch was full (more may wait)."""
    summaries: dict[int, str] = {}
    later: list[Callable[[], None]] = []
    with transaction.atomic():
        rows = list(
            PendingReaction.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(node__cluster_id=cluster_id, next_attempt_at__lte=now or timezone.now())
            .select_related("node__cluster")
            .order_by("pk")[:BATCH]
        )
        if not rows:
            return summaries, later, False
        adapter = base.adapter_for(rows[0].node.cluster)  # looked up late: tests stand a scheduler in
        groups: dict[str, list[PendingReaction]] = {}
        for row in rows:
            if still_wanted(row.reaction, row.node.state):
                groups.setdefault(row.reaction, []).append(row)
            else:
                summaries[row.node_id] = f"Scheduler {row.reaction} superseded: the node is now {row.node.state}."
                row.delete()
        for reaction, group in groups.items():
            outcome = adapter.apply_many(reaction, [(row.node, row.reason) for row in group])
            for row in group:
                summaries[row.node_id] = _settle(row, adapter.kind, outcome.get(row.node_id), later)
    return summaries, later, len(rows) == BATCH


def _settle(row: PendingReaction, kind: str, error: SchedulerError | None, later: list[Callable[[], None]]) -> str:
    """Record one node's outcome of a batch as ``apply`` does for one node."""
    node, reaction = row.node, row.reaction
    if error is None:
        row.delete()
        return "" if kind == "none" else f"{kind}: {reaction}."
    if isinstance(error, SchedulerConflict):
        row.delete()
        later.append(lambda: _note_conflict(node, reaction, error))
        return f"The scheduler keeps the node out: {error}"
    first = row.attempts == 0
    _back_off(row, str(error), timezone.now())
    if first:
        later.append(lambda: _note_owed(node, reaction, str(error)))
    return f"The scheduler could not be asked to {reaction} ({error}); asking again later."


# --- The drain road -------------------------------------------------------------------------------


STARTED, COMPLETED = "No customer job running: started draining.", "Drain complete."
MOVED = (STARTED, COMPLETED)  # what advance_drain answers when it moved the node on


def advance_drain(node: Node, *, trigger: int | None = None) -> str:
    """Move a drain-pending or draining node on as far as its scheduler says it can go."""
    adapter = base.adapter_for(node.cluster)  # looked up late: tests stand a scheduler in
    details: dict[str, Any] = {"scheduler": adapter.kind, **({"trigger_event": trigger} if trigger else {})}
    try:
        if node.state == S.DRAIN_PENDING:
            hold = held_by(node)
            if hold:
                return f"Kept drain pending: {hold}"
            if adapter.is_running_work(node):
                return f"{adapter.kind} drains the node; waiting for its job to end."
            node_services.start_draining(
                node.pk, actor=ACTOR, reason="No customer job running: draining now.", details=details
            )
            return STARTED
        if node.state == S.DRAINING:
            state = adapter.drain_state(node)
            if not state.drained:
                return f"Waiting for the scheduler to report the node drained ({state.detail})."
            node_services.complete_drain(
                node.pk,
                actor=ACTOR,
                reason="The workload scheduler reports the node drained.",
                details={**details, "detail": state.detail},
            )
            return COMPLETED
    except SchedulerError as exc:  # the node stays where it is; the follower asks again
        return f"The scheduler could not be asked about the drain ({exc}); asking again later."
    except (TransitionNotAllowed, ConcurrentTransition):  # moved on meanwhile
        return ""
    return ""


@followup("request_drain")
@followup("start_maintenance")
@followup("start_draining")
def drain_on(node: Node, event: NodeEvent) -> str:
    """After the drain reaction: the node moves on at once when nothing runs on it."""
    return advance_drain(Node.objects.select_related("cluster").get(pk=node.pk), trigger=event.pk)


def follow_drains(now: datetime | None = None) -> dict[str, int]:
    """Celery beat, every minute: retry the reactions owed to schedulers, re-ask drains that did not
    reach the scheduler, move drain-pending and draining nodes on as their schedulers allow, and
    re-apply GPU fences (``reapply_gpu_fences``)."""
    now = now or timezone.now()
    counts = {"retried": 0, "still_owed": 0, "moved": 0}
    for owed in PendingReaction.objects.filter(next_attempt_at__lte=now).select_related("node__cluster")[:BATCH]:
        node = owed.node
        wanted = STATE_REACTION.get(node.state)
        if wanted is None:
            owed.delete()
            continue
        # An eviction owed to a node still out of production is still an eviction.
        reaction = owed.reaction if owed.reaction == R.EVICT and wanted == R.CORDON else wanted
        apply(node, reaction, scheduler_reason(node.state, owed.reason.split(": ", 1)[-1]))
        still = PendingReaction.objects.filter(node=node).exists()
        counts["still_owed" if still else "retried"] += 1
    draining = (
        Node.objects.filter(state__in=(S.DRAIN_PENDING, S.DRAINING))
        .select_related("cluster")
        .order_by("state_changed_at")[:BATCH]
    )
    for node in draining:
        counts["moved"] += advance_drain(node) in MOVED
    counts["fences"] = reapply_gpu_fences()
    return counts


def reapply_gpu_fences() -> int:
    """Ask each production node's scheduler again for the GPU fences Nodewarden holds (a kubelet
    rewrites allocatable from its device plugin); one that no longer takes drains the node. Quiet
    when the fence is in place: no history row per minute. Returns how many nodes were asked."""
    fenced: dict[int, list[int]] = {}
    rows = (
        GPU.objects.filter(health=GpuHealth.FENCED, node__state=S.PRODUCTION)
        .order_by("node_id", "index")
        .values_list("node_id", "index")[: BATCH * 8]
    )
    for node_id, index in rows:
        fenced.setdefault(node_id, []).append(index)
    for node in Node.objects.filter(pk__in=fenced).select_related("cluster"):
        try:
            held = base.adapter_for(node.cluster).fence_gpus(node, fenced[node.pk], reason="fence re-applied")
        except SchedulerError:
            held = False
        if not held:
            apply_gpu_fence(node.pk, fenced[node.pk], fenced=True, reason="the fence no longer holds in the scheduler")
    return len(fenced)


# --- A GPU fenced or given back ---------------------------------------------------------------------


def apply_gpu_fence(node_id: int, indices: list[int], *, fenced: bool, reason: str) -> str:
    """Tell the node's scheduler that these GPUs are fenced (or given back), as they are now.

    Only the GPUs still fenced (or no longer fenced) are sent: a clear that overtook its fence
    wins. A fence the scheduler cannot take drains a node in production instead.
    """
    node = Node.objects.select_related("cluster").filter(pk=node_id).first()
    if node is None:
        return ""
    health = GpuHealth.FENCED if fenced else GpuHealth.HEALTHY
    indices = sorted(
        set(GPU.objects.filter(node=node, index__in=indices, health=health).values_list("index", flat=True))
    )
    if not indices:
        return ""
    adapter = base.adapter_for(node.cluster)  # looked up late: tests stand a scheduler in
    verb = "fence" if fenced else "give back"
    done, why = False, "GPU fencing is off (NODEWARDEN_GPU_FENCING)"
    if settings.NODEWARDEN_GPU_FENCING or not fenced:
        try:
            done = (
                adapter.fence_gpus(node, indices, reason=reason)
                if fenced
                else adapter.unfence_gpus(node, indices, reason=reason)
            )
            why = f"{adapter.kind} cannot {verb} single GPUs of this node safely"
        except SchedulerError as exc:
            why = f"{adapter.kind} could not be asked to {verb} GPU(s): {exc}"
    named = ", ".join(map(str, indices))
    if not fenced:
        _cancel_fence_drain(node, named)
    if done:
        who = "no workload scheduler hands GPUs out here" if adapter.kind == "none" else adapter.kind
        summary = f"{who}: GPU {named} {'fenced' if fenced else 'given back'}."
        node_services.record_event(
            node.pk,
            EventKind.ACTION,
            actor=ACTOR,
            reason=summary,
            details={"gpu_fence": fenced, "gpu_indices": indices, "ok": True},
        )
        return summary
    if fenced and node.state == S.PRODUCTION:
        # Moved on meanwhile: out of production, the scheduler cordons it anyway.
        with contextlib.suppress(TransitionNotAllowed, ConcurrentTransition):
            node_services.request_drain(
                node.pk,
                actor=ACTOR,
                reason=f"GPU {named} fenced ({reason}); {why}: draining the node instead."[:1000],
                details={"gpu_fence": True, "gpu_indices": indices},
            )
        return f"{why}: the node is drained instead."
    node_services.record_event(
        node.pk,
        EventKind.NOTE,
        actor=ACTOR,
        reason=f"GPU {named}: {why}."[:1000],
        details={"gpu_fence": fenced, "gpu_indices": indices, "ok": False},
    )
    return why


def _cancel_fence_drain(node: Node, named: str) -> None:
    """A GPU given back whose fence had drained the node instead (the scheduler could not fence it):
    while that drain is still pending and no other GPU is fenced, the node goes back to production
    (``cancel_drain``). Once draining, work has moved off and the node goes on through triage."""
    if node.state != S.DRAIN_PENDING or GPU.objects.filter(node=node, health=GpuHealth.FENCED).exists():
        return
    last = NodeEvent.objects.filter(node=node, kind=EventKind.TRANSITION).order_by("-created", "-id").first()
    if last is None or last.transition != "request_drain" or not (last.details or {}).get("gpu_fence"):
        return  # someone else's drain: theirs to cancel
    with contextlib.suppress(TransitionNotAllowed, ConcurrentTransition):
        node_services.cancel_drain(
            node.pk, actor=ACTOR, reason=f"GPU {named} cleared: the drain its fence caused is no longer needed."
        )


def react_to_gpu_fence(node_id: int, indices: list[int], fenced: bool, reason: str) -> None:
    """The registered reaction (``nodes.followups.on_gpu_fence_change``): queue the scheduler call,
    so a slow scheduler never holds up the request or task that fenced the GPU."""
    from .tasks import apply_gpu_fence as task

    task.delay(node_id, indices, fenced, reason)
