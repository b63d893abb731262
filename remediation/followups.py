"""Remediation's hooks on the lifecycle: findings become decisions, and the node's road
through drain, re-validation and back to production moves its remediation on."""

from __future__ import annotations

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from health.models import Finding
from nodes.followups import followup
from nodes.models import Node, NodeEvent
from provisioning.rejoin import AwaitedRejoin, awaits_rejoin
from schedulers.reactions import drain_hold

from . import ladder, services
from .choices import Status
from .models import Remediation


@receiver(post_save, sender=Finding, dispatch_uid="remediation.consider_finding")
def queue_consideration(sender, instance: Finding, created: bool, **kwargs) -> None:  # type: ignore[no-untyped-def]
    """Every new finding is considered once its transaction commits (the remediation queue)."""
    if created and not instance.shadow and instance.node_id is not None:
        from .tasks import consider_finding

        transaction.on_commit(lambda: consider_finding.apply_async(args=[instance.pk], queue="remediation"))


@followup("complete_drain")
def rung_after_drain(node: Node, event: NodeEvent) -> str:
    rem = services.on_drained(node.pk)
    return f"Remediation {rem.pk}: {rem.get_status_display().lower()}." if rem else ""


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
