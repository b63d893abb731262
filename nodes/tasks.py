"""Background work on nodes. Tasks take ids, re-read state and are safe to run twice."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from . import statecounts
from .choices import FINISHED, RunKind, RunStatus
from .followups import run_followups
from .models import Node, NodeEvent, Run, StateCountSnapshot

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True)
def run_transition_followup(self: Task[Any, Any], event_id: int) -> str:
    """Carry out what a committed transition asks for next, and record the run.

    Idempotent: a second delivery finds the finished run and returns; a node that
    has moved on since the transition is left alone (the run is marked superseded).
    """
    return _run_followup(event_id, self.request.id or "")


@shared_task(bind=True, acks_late=True)
def run_transition_followups(self: Task[Any, Any], event_ids: list[int]) -> str:
    """``run_transition_followup`` of each transition one transaction recorded, in order, each with its
    own run. One that fails is recorded on its run; the others still run, then the first error is raised."""
    statuses: list[str] = []
    failed: Exception | None = None
    for event_id in event_ids:
        try:
            statuses.append(_run_followup(event_id, self.request.id or ""))
        except Exception as exc:  # recorded on its run by _run_followup
            statuses.append(RunStatus.ERROR)
            failed = failed or exc
    if failed is not None:
        raise failed
    return " ".join(statuses)


def _run_followup(event_id: int, task_id: str) -> str:
    """One transition's follow-up, recorded as a ``Run`` (see ``run_transition_followup``)."""
    event = NodeEvent.objects.select_related("node__cluster").filter(pk=event_id).first()
    if event is None or event.node is None:
        return "gone"
    try:
        with transaction.atomic():
            # Created running (one INSERT); a redelivery finds it and marks it running again.
            run, created = Run.objects.get_or_create(
                trigger=event,
                kind=RunKind.TRANSITION_FOLLOWUP,
                defaults={
                    "node": event.node,
                    "task_id": task_id,
                    "status": RunStatus.RUNNING,
                    "started": timezone.now(),
                },
            )
    except IntegrityError:  # a concurrent delivery created it first
        run, created = Run.objects.get(trigger=event, kind=RunKind.TRANSITION_FOLLOWUP), False
    if run.status in FINISHED:
        return run.status

    node = event.node
    if not created:
        run.status, run.started, run.task_id = RunStatus.RUNNING, timezone.now(), task_id
        run.save(update_fields=["status", "started", "task_id"])
    try:
        if node.state != event.target_state:
            summary = run_followups(node, event, moved_on=True)
            run.status = RunStatus.SUPERSEDED
            run.summary = " ".join(filter(None, [f"Node is now {node.get_state_display()}.", summary]))[:300]
        else:
            summary = run_followups(node, event)
            run.summary = (summary or "No follow-up action for this transition.")[:300]
            run.status = RunStatus.PASSED
    except Exception as exc:  # recorded on the run, then re-raised for Celery's own logs
        run.status, run.error = RunStatus.ERROR, f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.finished = timezone.now()
        run.save(update_fields=["status", "summary", "error", "finished"])
    return run.status


@shared_task
def snapshot_state_counts() -> int:
    """Store the current number of nodes per state, cluster and tenant (for the history chart), then
    roll the finished days up (``statecounts.roll_up``: the charts of weeks and months read those)."""
    now = timezone.now().replace(second=0, microsecond=0)
    rows = Node.objects.values("state", "cluster_id", "tenant_id").annotate(n=Count("id")).order_by()
    snapshots = [
        StateCountSnapshot(
            taken_at=now, state=r["state"], cluster_id=r["cluster_id"], tenant_id=r["tenant_id"], count=r["n"]
        )
        for r in rows
    ]
    with transaction.atomic():
        StateCountSnapshot.objects.filter(taken_at=now).delete()  # idempotent within the minute
        StateCountSnapshot.objects.bulk_create(snapshots)
    statecounts.roll_up()
    return len(snapshots)
