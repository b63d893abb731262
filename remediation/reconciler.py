"""The reconciler: no node stays stuck in a transient state.

Every minute it re-drives:
- steps running past their deadline: failed as timed out, the ladder climbs;
- steps no worker has taken up for the stall delay (the worker died, the message was
  lost): queued again, once per stall delay (a compare-and-swap on ``last_activity``); the
  delay must exceed what a step may legitimately take (a power action waits up to twice
  the BMC power timeout), so a slow power cycle is never doubled. A reimage whose node is
  reinstalling is not re-driven: it waits for the node's join, not for a worker; nor is a GPU
  reset queued for the node's agent: it waits for the command's end;
- drains: a remediation whose condition cleared by itself before the drain ended stands down;
  one whose node drained into triage without its rung starting starts it (moving drains on as
  the scheduler reports them is ``schedulers.reactions.follow_drains``'s);
- open remediations whose node people sent to repair, RMA or decommission: ended, saying so;
- queued remediations: admitted when the hold, breaker or limit is gone;
- remediations whose node is in triage but whose rung never started.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TypeVar

from django.utils import timezone

from nodes.choices import NodeState

from . import services
from .choices import OPEN, Status, StepStatus
from .models import Remediation, RemediationStep

BATCH = 200
log = logging.getLogger(__name__)


def stall() -> timedelta:
    from django.conf import settings

    return timedelta(seconds=settings.NODEWARDEN_REMEDIATION_STALL_SECONDS)


S = NodeState
_Item = TypeVar("_Item")  # what one of the reconciler's passes walks over


def reconcile(now: datetime | None = None) -> dict[str, int]:
    """One pass over everything that may have stalled. An item that fails (a bug, a service that
    refuses) is logged and counted under "errors"; it never stops the pass for the others."""
    now = now or timezone.now()
    counts = {
        "timed_out": 0,
        "requeued": 0,
        "drained": 0,
        "stood_down": 0,
        "superseded": 0,
        "admitted": 0,
        "restarted": 0,
        "errors": 0,
    }
    stalled_after = stall()

    def each(items: Iterable[_Item], act: Callable[[_Item], str]) -> None:
        for item in items:
            try:
                outcome = act(item)
            except Exception:
                log.exception("reconciler: %s failed on %r", act.__name__, item)
                counts["errors"] += 1
                continue
            if outcome:
                counts[outcome] += 1

    def step_due(step: RemediationStep) -> str:
        if step.deadline < now:
            services.step_failed(step, f"timed out (deadline {step.deadline:%H:%M:%S} UTC)")
            return "timed_out"
        # A reimage waiting for its node to rejoin, or a GPU reset waiting for its agent's answer, waits on no worker.
        if (
            step.boot_generation is None
            and step.agent_command_id is None
            and (step.last_activity or step.started) < now - stalled_after
            and _claim(step, now)
        ):
            services.queue_step(step.pk)
            return "requeued"
        return ""

    def draining(rem: Remediation) -> str:
        if rem.node.state == S.DRAIN_PENDING and services.cleared_by_itself(rem):
            return "stood_down" if services.stand_down(rem.pk).status == Status.CLEARED else ""
        if rem.node.state == S.TRIAGE:  # drained, but its follow-up did not start the rung
            services.on_drained(rem.node_id)
            return "drained"
        return ""

    def superseded(rem_id: int) -> str:
        return "superseded" if services.end_superseded(rem_id).status == Status.STOPPED else ""

    def queued(rem: Remediation) -> str:
        if rem.node.state == S.TRIAGE and services.cleared_by_itself(rem):
            return "stood_down" if services.stand_down(rem.pk).status == Status.CLEARED else ""
        rem = services.admit(rem.pk, now=now)
        # Admitted: out of the queue, or taken out now with its rung starting in its own task (no reason to wait).
        return "admitted" if rem.status != Status.QUEUED or not rem.queued_reason else ""

    def stranded(rem: Remediation) -> str:
        services.start_rung(rem.pk, now=now)
        return "restarted"

    each(RemediationStep.objects.filter(status=StepStatus.RUNNING).order_by("deadline")[:BATCH], step_due)
    each(
        Remediation.objects.filter(status=Status.DRAINING).select_related("node__cluster", "finding__alert", "policy")[
            :BATCH
        ],
        draining,
    )
    each(
        Remediation.objects.filter(status__in=OPEN, node__state__in=services.OUT_OF_HANDS).values_list("pk", flat=True)[
            :BATCH
        ],
        superseded,
    )
    each(
        Remediation.objects.filter(status=Status.QUEUED)
        .select_related("node", "finding__alert", "policy")
        .order_by("updated")[:BATCH],
        queued,
    )
    each(
        Remediation.objects.filter(
            status=Status.RUNNING, node__state__in=(S.TRIAGE, S.REMEDIATING), updated__lt=now - stalled_after
        ).exclude(steps__status=StepStatus.RUNNING)[:BATCH],
        stranded,
    )
    return counts


def _claim(step: RemediationStep, now: datetime) -> bool:
    """Compare-and-swap on last_activity: of two reconcilers (or a worker taking the step up
    meanwhile), only one re-queues it, and not again until it has stalled once more."""
    return bool(
        RemediationStep.objects.filter(pk=step.pk, status=StepStatus.RUNNING, last_activity=step.last_activity).update(
            last_activity=now
        )
    )
