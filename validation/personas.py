"""Re-roling a node (e.g. training to inference): the only road to a change of persona.

``request_persona_change`` records the change and drains the node if it serves
customers (``request_drain``: it leaves when the current job ends). Once it is out of
production (the drain completed, or it was already in triage, repair or remediation),
``apply_persona_change`` sets the persona, points its boot config at the persona's image,
records the scheduler configuration it now gets, and re-validates it with the persona's
Day 1 stages. ``release_to_production`` closes the change. A node in Day 0 or Day 1 takes
the new persona at once: it is not serving anyone yet.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.models import Persona
from nodes import services as node_services
from nodes.choices import DAY1_STAGES, EventKind, NodeState
from nodes.models import OPERATE, Node
from nodes.services import Actor, clean_reason, record_event

from .models import PersonaChange
from .services import StageConflict, StageForbidden

S = NodeState
SERVING = (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING)
OUT_OF_PRODUCTION = (S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA)
NOT_SERVING_YET = (S.ENROLLED, S.INITIALIZING, S.ONBOARD, *DAY1_STAGES)


def request_persona_change(node_id: int, persona_id: int, *, actor: Actor, reason: str) -> PersonaChange:
    """Re-role a node. Raises StageForbidden, StageConflict (already changing, same persona,
    decommissioned), ReasonRequired, Persona.DoesNotExist or Node.DoesNotExist."""
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise StageForbidden(f"{actor.name} may not re-role nodes.")
    reason = clean_reason(reason)
    persona = Persona.objects.get(pk=persona_id)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.persona_id == persona.pk:
            raise StageConflict(f"{node.hostname} already has persona {persona.name}.")
        if node.state == S.DECOMMISSIONED:
            raise StageConflict(f"{node.hostname} is decommissioned.")
        if node.state == S.MAINTENANCE:  # nothing would apply it: the operator's work comes first
            raise StageConflict(f"{node.hostname} is in maintenance: end maintenance first.")
        try:
            with transaction.atomic():
                change = PersonaChange.objects.create(
                    node=node,
                    from_persona_id=node.persona_id,
                    to_persona=persona,
                    reason=reason,
                    requested_by=actor.name,
                )
        except IntegrityError as exc:
            raise StageConflict(f"{node.hostname} is already being re-roled.") from exc
        record_event(
            node.pk,
            EventKind.ACTION,
            actor=actor,
            reason=f"Re-role to {persona.name} requested: {reason}",
            details={"persona_change": change.pk, "to_persona": persona.name},
        )
        if node.state == S.PRODUCTION:
            node_services.request_drain(
                node.pk,
                actor=actor,
                reason=f"Re-role to {persona.name}: {reason}",
                details={"persona_change": change.pk},
            )
        elif node.state in OUT_OF_PRODUCTION:
            transaction.on_commit(lambda: apply_persona_change(change.pk))
        elif node.state in NOT_SERVING_YET:
            _set_persona(node, change, actor, revalidate=False)
    return change


def _set_persona(node: Node, change: PersonaChange, actor: Actor, *, revalidate: bool) -> None:
    persona = change.to_persona
    node.persona = persona
    node.save(update_fields=["persona", "last_updated"])
    boot = getattr(node, "boot_config", None)
    if boot is not None and persona.boot_image and hasattr(boot, "boot_image"):
        boot.boot_image = persona.boot_image
        boot.save(update_fields=["boot_image"])
    config = {
        "boot_image": persona.boot_image,
        "scheduler_labels": persona.scheduler_labels,
        "slurm_partition": persona.slurm_partition,
    }
    record_event(
        node.pk,
        EventKind.ACTION,
        actor=actor,
        reason=f"Persona set to {persona.name}",
        details={"persona_change": change.pk, "persona_config": config},
    )
    change.applied_at = timezone.now()
    change.status = PersonaChange.Status.VALIDATING if revalidate else PersonaChange.Status.DONE
    change.finished_at = None if revalidate else change.applied_at
    change.save(update_fields=["applied_at", "status", "finished_at"])
    if revalidate:
        node_services.revalidate(
            node.pk,
            actor=actor,
            reason=f"Re-roled to {persona.name}: validating its stages",
            details={"persona_change": change.pk},
        )


def apply_persona_change(change_id: int, *, actor: Actor | None = None) -> PersonaChange:
    """Apply a change whose node is out of production; idempotent (an applied change is left alone)."""
    actor = actor or Actor.system("personas")
    with transaction.atomic():
        change = PersonaChange.objects.select_for_update().select_related("to_persona").get(pk=change_id)
        if change.status != PersonaChange.Status.DRAINING:
            return change
        node = Node.objects.select_for_update().get(pk=change.node_id)
        if node.state not in OUT_OF_PRODUCTION:
            return change  # still draining: the drain's completion calls again
        _set_persona(node, change, actor, revalidate=True)
    return change


def open_change(node_id: int) -> PersonaChange | None:
    return (
        PersonaChange.objects.filter(node_id=node_id, status__in=PersonaChange.OPEN)
        .select_related("to_persona")
        .first()
    )


def finish_persona_change(node_id: int) -> PersonaChange | None:
    """The node is back in production: its re-roling is done."""
    updated = PersonaChange.objects.filter(node_id=node_id, status=PersonaChange.Status.VALIDATING).update(
        status=PersonaChange.Status.DONE, finished_at=timezone.now()
    )
    return open_change(node_id) if not updated else PersonaChange.objects.filter(node_id=node_id).first()
