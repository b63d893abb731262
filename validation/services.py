"""Day 1 pipeline verbs: the only road by which a stage starts, moves on or ends.

A transition into a Day 1 state (``start_validation``, ``revalidate``, ``pass_*``)
commits and queues its follow-up, which calls ``begin_stage``: one stage run
(``checks.Run`` of kind ``stage_*``, unique per triggering transition) is opened
and the stage's ``start`` runs. A stage that needs time (burn-in, the soak, waiting for
the agent's report) stays open and ``advance_open_stages`` (Celery beat) polls it.
``conclude`` ends a run: in one transaction the run's outcome, then either the verb that
moves the node to the next stage or, on a failure, a finding and ``fail_validation``
(triage, with the stage and the exact difference as the reason). The last stage releases the
node to production only through the release gate (``health.gates``): nothing at or above the
blocking severity may still fire on it since the pass began. Stage work that talks
to a BMC or waits never holds a transaction open.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from nodes import services as node_services
from nodes.choices import STAGE_KINDS, EventKind, RunStatus
from nodes.models import OPERATE, Node, NodeEvent, Run
from nodes.services import Actor, clean_reason, record_event

from .choices import BY_RUN_KIND, BY_STAGE, BY_STATE, PASS_TRANSITIONS, Reentry, Stage, StageInfo, maintenance_reentry
from .models import Day1Spec, RevalidationPlan
from .stages import RUNNERS, StageContext, Verdict

log = logging.getLogger(__name__)

ACTOR = Actor.system("validation")
FINDING_RULE = "day1_stage"
ADVANCE_BATCH = 200
# A node in a stage with no stage run open this long after entering it has lost its follow-up.
ORPHAN_GRACE = timedelta(minutes=5)


class StageConflict(Exception):
    """The node is not in a state where this stage action makes sense (the API answers 409)."""


class StageForbidden(PermissionError):
    """The acting user may not operate nodes (the API answers 403)."""


# --- Which pass, which plan ------------------------------------------------------------


def current_pass(node_id: int) -> NodeEvent | None:
    """The transition that began the node's current walk through Day 1."""
    return (
        NodeEvent.objects.filter(node_id=node_id, transition__in=PASS_TRANSITIONS).order_by("-created", "-id").first()
    )


def reentry_of(pass_event: NodeEvent | None) -> str:
    if pass_event is None or pass_event.transition == "start_validation":
        return Reentry.FIRST
    if pass_event.transition == "end_maintenance":  # the plan follows what the operator did
        return maintenance_reentry(str((pass_event.details or {}).get("maintenance_work", "")))
    return pass_event.source_state if pass_event.source_state in Reentry.values else Reentry.TRIAGE


def planned_stages(node_id: int) -> tuple[str, list[str]]:
    """(re-entry reason, the stages its plan runs) for the node's current pass. A pass begun
    by a re-role walks the new persona's stages (all of them if it names none)."""
    pass_event = current_pass(node_id)
    change_id = (pass_event.details or {}).get("persona_change") if pass_event else None
    if change_id:
        from .models import PersonaChange

        change = PersonaChange.objects.select_related("to_persona").filter(pk=change_id).first()
        if change is not None:
            return "persona", list(change.to_persona.validation_stages or Stage.values)
    reentry = reentry_of(pass_event)
    return reentry, RevalidationPlan.stages_for(reentry)


# --- Starting and stepping -------------------------------------------------------------


def _open_run(node: Node, info: StageInfo, trigger: NodeEvent, now: datetime) -> tuple[Run, bool]:
    """The node's one open run of its current stage: opened now (``True``) or found (``False``).

    Several starters may ask at once: the entering transition's follow-up (and its re-delivery),
    the orphan sweep, an operator's or the demo's ``start_stage``. A node has at most one open stage
    run (constraint ``one_open_stage_run_per_node``), so the later ones find the first run instead
    of opening a second one whose start would withdraw the first's checks. An open run left from
    an earlier visit (the node was forced out and back before a poll noticed) or of another stage
    is superseded first.
    """
    spec = Day1Spec.for_profile(node.hardware_profile)
    with transaction.atomic():
        # Serialises the starters of this node (PostgreSQL); the constraint catches the rest.
        Node.objects.select_for_update().filter(pk=node.pk).values_list("pk", flat=True).first()
        mine = Run.objects.filter(trigger=trigger, kind=info.run_kind).first()
        if mine is not None:  # a re-delivered follow-up: its run, open or not
            return mine, False
        current = _open_stage_run_of_this_visit(node, info)
        if current is not None:
            return current, False
        try:
            with transaction.atomic():
                run = Run.objects.create(
                    trigger=trigger,
                    kind=info.run_kind,
                    node=node,
                    status=RunStatus.RUNNING,
                    started=now,
                    deadline=now + spec.timeout(info.stage),
                )
        except IntegrityError:  # another starter opened it first (SQLite, or no lock taken)
            open_run = Run.objects.filter(node=node, kind__in=STAGE_KINDS, status=RunStatus.RUNNING).first()
            if open_run is None:
                raise
            return open_run, False
    return run, True


def _open_stage_run_of_this_visit(node: Node, info: StageInfo) -> Run | None:
    """The node's open stage run if it belongs to its stay in the current state; any other open
    stage run (another stage, an earlier stay) is superseded, its queued checks withdrawn."""
    entered = (
        NodeEvent.objects.filter(node_id=node.pk, target_state=info.state)
        .order_by("-created", "-id")
        .values_list("pk", flat=True)
        .first()
    )
    for run in Run.objects.select_for_update().filter(node=node, kind__in=STAGE_KINDS, status=RunStatus.RUNNING):
        # A trigger at or after the entering transition is this stay's (the transition itself, or
        # an operator's start since); a run without one (its event deleted) is taken as this stay's.
        this_stay = run.trigger_id is None or entered is None or run.trigger_id >= entered
        if run.kind == info.run_kind and this_stay:
            return run
        run.status, run.finished = RunStatus.SUPERSEDED, timezone.now()
        run.summary = f"Superseded: the node began {Stage(info.stage).label} again"[:300]
        run.save(update_fields=["status", "finished", "summary"])
        _withdraw_queued_checks(run, ACTOR, f"{Stage(BY_RUN_KIND[run.kind].stage).label} stage superseded")
    return None


def begin_stage(event_id: int, now: datetime | None = None) -> Run | None:
    """Open the stage that the transition ``event_id`` put the node into, and start it.

    Idempotent: a second call for the same transition finds the run and does nothing.
    A stage that the pass's plan leaves out is recorded as skipped and passed at once.
    """
    now = now or timezone.now()
    event = NodeEvent.objects.select_related("node__hardware_profile").filter(pk=event_id).first()
    if event is None or event.node is None or event.target_state not in BY_STATE:
        return None
    node, info = event.node, BY_STATE[event.target_state]
    if node.state != info.state:
        return None  # the node moved on (an operator, a forced state) before the stage began
    run, created = _open_run(node, info, event, now)
    if not created:
        return run
    reentry, stages = planned_stages(node.pk)
    if info.stage not in stages:
        label = "re-role" if reentry == "persona" else Reentry(reentry).label.lower()
        return conclude(run.pk, Verdict(True, f"Not in the re-validation plan ({label})"), skipped=True)
    return step(run.pk, first=True, now=now)


def _context(run: Run, now: datetime) -> StageContext:
    node = run.node
    return StageContext(run=run, node=node, spec=Day1Spec.for_profile(node.hardware_profile), now=now)


def step(run_id: int, *, first: bool = False, now: datetime | None = None) -> Run:
    """Start (``first``) or poll an open stage run, and conclude it if the stage decided.

    A stage that raises is not decided: the error is kept on the run, the next poll tries
    again, and the stage timeout ends it if the error persists.
    """
    now = now or timezone.now()
    run = Run.objects.select_related("node__hardware_profile").get(pk=run_id)
    if run.status != RunStatus.RUNNING:
        return run
    stage = BY_RUN_KIND[run.kind].stage
    ctx = _context(run, now)
    details_before = dict(run.details)
    try:
        verdict = (RUNNERS[stage].start if first else RUNNERS[stage].poll)(ctx)
        error = ""
    except Exception as exc:  # a bug or an outage in one stage must not stop the others
        log.exception("Day 1 stage %s failed to %s on node %s", stage, "start" if first else "poll", run.node_id)
        verdict, error = None, f"{type(exc).__name__}: {exc}"
    if run.details != details_before or error != run.error:
        Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(details=run.details, error=error)
    if verdict is None:
        return run
    return conclude(run.pk, verdict)


# --- Ending ----------------------------------------------------------------------------


def conclude(
    run_id: int, verdict: Verdict, *, skipped: bool = False, actor: Actor = ACTOR, now: datetime | None = None
) -> Run:
    """End an open stage run with ``verdict`` and move the node: on to the next stage (or
    production) if it passed or was skipped, to triage with a finding if it failed.

    Idempotent: a run that is no longer open is returned unchanged. A node that has left
    the stage's state meanwhile is not moved; the run is marked superseded.
    """
    now = now or timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("node").get(pk=run_id)
        if run.status != RunStatus.RUNNING:
            return run
        info, node = BY_RUN_KIND[run.kind], run.node
        label = Stage(info.stage).label
        run.finished, run.summary, run.figures = now, verdict.summary[:300], verdict.figures
        run.details = {**run.details, "evidence": verdict.evidence} if verdict.evidence else run.details
        if node.state != info.state:
            run.status = RunStatus.SUPERSEDED
            run.summary = f"Node is now {node.get_state_display()}; {verdict.summary}"[:300]
        elif skipped:
            run.status = RunStatus.SKIPPED
        else:
            run.status = RunStatus.PASSED if verdict.passed else RunStatus.FAILED
        run.save(update_fields=["status", "finished", "summary", "figures", "details"])
        _withdraw_queued_checks(run, actor, f"{label} stage ended: {run.get_status_display().lower()}")
        if run.status == RunStatus.SUPERSEDED:
            return run
        details = {"stage": info.stage, "stage_run": run.pk}
        if verdict.passed and info.pass_verb == "release_to_production":  # noqa: S105 - a verb's name
            verdict = _release_gate(node, verdict)
            if not verdict.passed:
                run.status, run.summary = RunStatus.FAILED, verdict.summary[:300]
                run.details = {**run.details, "evidence": verdict.evidence}
                run.save(update_fields=["status", "summary", "details"])
        if verdict.passed:
            verb = getattr(node_services, info.pass_verb)
            word = "skipped" if skipped else "passed"
            verb(node.pk, actor=actor, reason=f"{label} {word}: {verdict.summary}", details=details)
        else:
            _fail(run, info, verdict, actor, details)
    return run


def _release_gate(node: Node, verdict: Verdict) -> Verdict:
    """The last stage passed: the node goes back to customers only if nothing serious still fires on
    it since this pass began (``health.gates``); otherwise the stage fails, saying what fires."""
    from health.gates import blocking_alerts, describe

    pass_event = current_pass(node.pk)
    since = pass_event.created if pass_event is not None else node.state_changed_at
    blocking = blocking_alerts(node.pk, since)
    if not blocking:
        return verdict
    return Verdict.fail(
        f"Still firing, not released: {describe(blocking)}"[:300],
        alerts=[a.pk for a in blocking],
        rules=sorted({a.rule for a in blocking}),
    )


def _withdraw_queued_checks(run: Run, actor: Actor, why: str) -> None:
    """The stage's active checks nobody has taken yet are withdrawn: a node that failed burn-in
    (or left it) must not run a stress test later, in triage or repair, for a stage long over."""
    from checks.services import cancel_check

    ids = [pk for pk in (run.details.get("checks") or {}).values() if pk]
    for pk in Run.objects.filter(pk__in=ids, status=RunStatus.QUEUED).values_list("pk", flat=True):
        cancel_check(pk, actor=actor, reason=why)


def failure_text(label: str, summary: str) -> str:
    """What a failed stage's finding and triage reason say: "<Stage> failed: <verdict>", unless the
    verdict already begins with the stage's name (burn-in's does: its run summary is read alone too),
    which would read "Burn-in failed: Burn-in failed: ..."."""
    if summary.casefold().startswith(label.casefold()):
        return summary
    return f"{label} failed: {summary}"


def _fail(run: Run, info: StageInfo, verdict: Verdict, actor: Actor, details: dict[str, Any]) -> None:
    from health.choices import Severity
    from health.services import raise_finding

    label = Stage(info.stage).label
    text = failure_text(label, verdict.summary)
    raise_finding(
        run.node_id,
        rule=FINDING_RULE,
        severity=Severity.DEGRADED,
        subject=info.stage,
        summary=text,
        evidence={**details, **verdict.evidence},
        source="validation",
        actor=actor,
        every_event=True,
    )
    node_services.fail_validation(
        run.node_id,
        actor=actor,
        reason=text,
        details={**details, "evidence": verdict.evidence},
    )


def advance_open_stages(now: datetime | None = None, limit: int = ADVANCE_BATCH) -> int:
    """Poll every open stage run (oldest first, at most ``limit``); fail those past their
    deadline as stuck. Returns how many runs were concluded."""
    now = now or timezone.now()
    concluded = 0
    open_runs = Run.objects.filter(kind__in=STAGE_KINDS, status=RunStatus.RUNNING).order_by("started", "id")
    for run_id, kind, deadline in open_runs.values_list("pk", "kind", "deadline")[:limit]:
        if deadline is not None and deadline < now:
            label = Stage(BY_RUN_KIND[kind].stage).label
            run = conclude(
                run_id,
                Verdict.fail(
                    f"{label} timed out: no verdict by {deadline:%Y-%m-%d %H:%M:%S} UTC", deadline=deadline.isoformat()
                ),
                now=now,
            )
        else:
            run = step(run_id, now=now)
        concluded += run.status != RunStatus.RUNNING
    return concluded


def begin_orphaned_stages(now: datetime | None = None, limit: int = ADVANCE_BATCH) -> int:
    """Nodes in a Day 1 stage with no stage run open, ``ORPHAN_GRACE`` after they entered it: the
    transition's follow-up was lost (a worker killed, a message dropped) or rows were written
    without it. Nothing would ever conclude or time them out, so the stage begins now from the
    transition that put the node there (``begin_stage`` is idempotent). Returns how many began."""
    now = now or timezone.now()
    running = Run.objects.filter(node=OuterRef("pk"), kind__in=STAGE_KINDS, status=RunStatus.RUNNING)
    orphans = (
        Node.objects.filter(state__in=list(BY_STATE), state_changed_at__lt=now - ORPHAN_GRACE)
        .exclude(Exists(running))
        .order_by("state_changed_at", "pk")
        .values_list("pk", "state")[:limit]
    )
    begun = 0
    for node_id, state in orphans:
        entry = (
            NodeEvent.objects.filter(node_id=node_id, target_state=state)
            .order_by("-created", "-id")
            .values_list("pk", flat=True)
            .first()
        )
        if entry is None:
            continue
        run = begin_stage(entry, now=now)
        if run is not None and run.started == now:
            log.info("Day 1: node %s in %s had no stage run; began it from event %s", node_id, state, entry)
            begun += 1
    return begun


# --- Operator verbs ---------------------------------------------------------------------


def _operator_node(node_id: int, actor: Actor) -> tuple[Node, StageInfo]:
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise StageForbidden(f"{actor.name} may not operate Day 1 stages.")
    node = Node.objects.select_related("hardware_profile").get(pk=node_id)
    info = BY_STATE.get(node.state)
    if info is None:
        raise StageConflict(f"{node.hostname} is {node.get_state_display()}, not in a Day 1 stage.")
    return node, info


def open_stage_run(node_id: int, info: StageInfo) -> Run | None:
    return (
        Run.objects.filter(node_id=node_id, kind=info.run_kind, status=RunStatus.RUNNING)
        .order_by("-started", "-id")
        .first()
    )


def start_stage(node_id: int, *, actor: Actor, reason: str) -> Run:
    """Start (or retry) the stage of the node's current Day 1 state: for a node forced into
    a stage, or whose run errored or was left open. Refused while a run is open."""
    reason = clean_reason(reason)
    node, info = _operator_node(node_id, actor)
    if open_stage_run(node.pk, info) is not None:
        raise StageConflict(f"{Stage(info.stage).label} is already running on {node.hostname}.")
    now = timezone.now()
    with transaction.atomic():
        trigger = record_event(
            node.pk, EventKind.ACTION, actor=actor, reason=reason, details={"stage_started": info.stage}
        )
        run, _ = _open_run(node, info, trigger, now)
    return step(run.pk, first=True, now=now)


def skip_stage(node_id: int, *, actor: Actor, reason: str) -> Run:
    """Skip the node's current Day 1 stage (audited: the operator and the reason go on the
    run and on the transition to the next stage)."""
    reason = clean_reason(reason)
    node, info = _operator_node(node_id, actor)
    run = open_stage_run(node.pk, info)
    if run is None:
        with transaction.atomic():
            trigger = record_event(
                node.pk, EventKind.ACTION, actor=actor, reason=reason, details={"stage_skipped": info.stage}
            )
            run, _ = _open_run(node, info, trigger, timezone.now())
    return conclude(run.pk, Verdict(True, f"Skipped by {actor.name}: {reason}"), skipped=True, actor=actor)


def stage_info(stage: str) -> StageInfo:
    return BY_STAGE[stage]
