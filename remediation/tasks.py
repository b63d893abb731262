"""Celery tasks of remediation: small, idempotent, safe to run twice."""

from __future__ import annotations

from functools import partial

from celery import shared_task

from health.gpus import suspect_named_gpu

from . import ladder, reconciler, services
from .models import Remediation


@shared_task(ignore_result=True, acks_late=True)
def consider_finding(finding_id: int) -> str:
    """Decide what a new finding calls for (``services.consider_finding``). The GPU it names is
    made suspect first (idempotent: health's own task may have done it), so that nothing
    remediation does to the GPU (a fence) comes before the suspicion in its history."""
    suspect_named_gpu([finding_id], warn_unknown=False)  # health's own task warns
    rem = services.consider_finding(finding_id)
    return f"remediation {rem.pk}: {rem.status}" if rem else "no action"


@shared_task(ignore_result=True, acks_late=True)
def consider_findings(finding_ids: list[int]) -> str:
    """Decide what the new findings of one commit call for, together (``services.consider_findings``).
    A finding that may fence its GPU makes it suspect first (as ``consider_finding``); the others
    only cordon, and health's own task marks their GPUs meanwhile (``start_rungs`` makes sure of it
    before a rung touches a GPU), so the cordons do not wait for a burst's suspicions."""
    rems = services.consider_findings(finding_ids, before=partial(suspect_named_gpu, warn_unknown=False))
    return f"{sum(rem is not None for rem in rems)} of {len(rems)} findings remediated"


@shared_task(ignore_result=True, acks_late=True)
def start_rung(remediation_id: int) -> str:
    """Start the rung of a remediation whose node was just cordoned (idempotent: a started rung,
    a finished remediation or a node no longer in triage is left alone)."""
    rem = services.start_rung(remediation_id)
    return f"remediation {rem.pk}: {rem.status}"


@shared_task(ignore_result=True, acks_late=True)
def start_rungs(remediation_ids: list[int]) -> str:
    """``start_rung`` of each remediation a batch cordoned (``services.start_rungs``; idempotent), after
    the GPUs their findings name are suspect (idempotent: health's own task has usually done it), so a
    rung on a GPU never comes before the suspicion in its history."""
    findings = Remediation.objects.filter(pk__in=remediation_ids, finding__isnull=False)
    suspect_named_gpu(list(findings.values_list("finding_id", flat=True)), warn_unknown=False)
    started = services.start_rungs(remediation_ids)
    return f"{started} of {len(remediation_ids)} rungs started"


@shared_task(ignore_result=True, acks_late=True)
def run_step(step_id: int) -> str:
    return ladder.run(step_id)


@shared_task(ignore_result=True, acks_late=True)
def command_ended(command_id: int) -> str:
    """An agent command ended: the GPU reset step waiting on it, if any, passes to re-validation or fails."""
    step = services.gpu_reset_answered(command_id)
    return f"step {step.pk}: {step.rung}" if step else "no step waits on it"


@shared_task(ignore_result=True)
def reconcile() -> dict[str, int]:
    """Re-drive what stalled (beat, every minute)."""
    return reconciler.reconcile()
