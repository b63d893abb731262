"""Remediation's hooks on the lifecycle, registered in the lower apps' declared tables: findings
become decisions (``health.followups``), the node's road through drain, re-validation and back
to production moves its remediation on (``nodes.followups``), a running reimage completes at the
node's join (``provisioning.rejoin``), a running GPU reset at its agent command's end
(``telemetry.commands.on_result``)."""

from __future__ import annotations

from collections.abc import Sequence

from health.followups import on_new_finding
from nodes.followups import followup, on_state_change
from nodes.models import Node, NodeEvent
from nodes.services import awaits_drain
from provisioning.rejoin import AwaitedRejoin, awaits_rejoin
from schedulers.reactions import drain_hold
from telemetry.commands import on_result

from . import ladder, safety, services
from .choices import Status
from .models import Remediation
from .tasks import command_ended, consider_findings

# Inside a batch's transaction the rails in hand count every change of state it records.
on_state_change(safety.note_state_change)


@on_new_finding
def queue_consideration(finding_ids: Sequence[int]) -> None:
    """The findings of a commit are considered once it has committed (the remediation queue): one task
    for all of them, so the safety rails are counted once for the batch (``services.consider_findings``)."""
    consider_findings.apply_async(args=(list(finding_ids),), queue="remediation")


@on_result
def queue_gpu_reset_answer(command_id: int) -> None:
    """Every agent command's end, once committed: a GPU reset step waiting on it moves on (a task, so
    the agent's result request never waits on re-validation; the task ignores other commands)."""
    command_ended.apply_async(args=(command_id,), queue="remediation")


@followup("complete_drain")
def rung_after_drain(node: Node, event: NodeEvent) -> str:
    rem = services.on_drained(node.pk)
    return f"Remediation {rem.pk}: {rem.get_status_display().lower()}." if rem else ""


@awaits_drain
def remediation_awaits_drain(node_id: int) -> str | None:
    """A remediation waiting for the node's drain (its own, or an operator's drain it joined) starts
    its rung once drained: the drain ends in triage, not in maintenance."""
    waiting = Remediation.objects.filter(node_id=node_id, status=Status.DRAINING).exists()
    return "a remediation waits for the drain" if waiting else None


@followup("release_to_production")
def remediation_done(node: Node, event: NodeEvent) -> str:
    rem = services.on_back_in_production(node.pk)
    return f"Remediation {rem.pk} succeeded." if rem else ""


@followup("fail_validation")
def climb_after_failed_validation(node: Node, event: NodeEvent) -> str:
    rem = services.on_validation_failed(node.pk, event.reason)
    return f"Remediation {rem.pk}: climbing to {rem.get_rung_display().lower()}." if rem else ""


@awaits_rejoin
def running_reimage(node_id: int) -> AwaitedRejoin | None:
    """The reimage rung waiting for this node's agent to rejoin: the join completes it."""
    step = ladder.reimage_awaiting_join(node_id)
    if step is None:
        return None
    return AwaitedRejoin(
        started=step.started,
        complete=lambda detail: services.reimage_rejoined(step, detail),
        details={"remediation": step.remediation_id},
    )


@drain_hold
def confirming_before_leaving(node: Node) -> str | None:
    """A node drained for a condition that may clear by itself stays drain pending (no new work, no
    disruption) until its confirmation window has run: the reconciler stands it down if it clears."""
    rem = (
        Remediation.objects.filter(node_id=node.pk, status=Status.DRAINING)
        .select_related("finding__alert", "policy")
        .first()
    )
    return services.confirming(rem) or None if rem is not None else None
