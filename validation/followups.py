"""Day 1 hooks on the lifecycle's follow-ups (``nodes.followups``): a node that joins
starts validation on its own, and each transition into a stage opens that stage."""

from __future__ import annotations

from nodes import services as node_services
from nodes.followups import followup
from nodes.models import Node, NodeEvent

from . import services
from .choices import ENTERING_TRANSITIONS


@followup("mark_onboard")
def start_validation_when_onboard(node: Node, event: NodeEvent) -> str:
    """The agent joined: Day 1 begins without a human."""
    node_services.start_validation(
        node.pk,
        actor=services.ACTOR,
        reason="Node onboard: starting Day 1 validation",
        details={"trigger_event": event.pk},
    )
    return "Day 1 validation started."


def _begin(node: Node, event: NodeEvent) -> str:
    run = services.begin_stage(event.pk)
    if run is None:
        return "No stage to begin."
    return f"{run.get_kind_display()}: {run.get_status_display()}" + (f" ({run.summary})" if run.summary else "")


@node_services.awaits_drain
def re_role_awaits_drain(node_id: int) -> str | None:
    """A re-role drains the node to apply its new persona: that drain ends in triage, not in
    maintenance, and the persona is applied there (``apply_persona_when_drained``)."""
    from .models import PersonaChange

    waiting = PersonaChange.objects.filter(node_id=node_id, status=PersonaChange.Status.DRAINING).exists()
    return "a re-role waits for the drain" if waiting else None


@followup("complete_drain")
def apply_persona_when_drained(node: Node, event: NodeEvent) -> str:
    """A node drained for a re-role takes its new persona now and is re-validated."""
    from .personas import apply_persona_change, open_change

    change = open_change(node.pk)
    if change is None:
        return "No re-role pending."
    apply_persona_change(change.pk)
    return f"Re-roled to {change.to_persona.name}: re-validating."


@followup("release_to_production")
def close_persona_change(node: Node, event: NodeEvent) -> str:
    """Back in production: a re-role in progress is done; the scheduler may give it work."""
    from .personas import finish_persona_change

    change = finish_persona_change(node.pk)
    done = f" Re-role to {change.to_persona.name} done." if change is not None else ""
    return "In production: the workload scheduler may schedule work here." + done


for _name in ENTERING_TRANSITIONS:
    followup(_name)(_begin)
